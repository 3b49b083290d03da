#pragma once

// Test support: a strict XML parser for generated HTML/SVG. It accepts an XML declaration, a
// DOCTYPE without internal subset, comments, elements with quoted attributes and text; it rejects
// unbalanced or misnested tags, unquoted or repeated attributes, a raw '<' or '>' in text or a raw
// '<' in an attribute, and '&' that does not start one of XML's five entities or a character
// reference. Values are decoded.

#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace torchbus::testing {

/// An element of a parsed document.
struct XmlElement {
  std::string name;
  std::vector<std::pair<std::string, std::string>> attributes;  // decoded values, in order
  std::vector<XmlElement> children;
  std::string text;  // decoded text directly inside it, concatenated

  /// The value of attribute `key`, or nullptr.
  const std::string* attribute(const std::string& key) const {
    for (const auto& [attribute_name, value] : attributes) {
      if (attribute_name == key) return &value;
    }
    return nullptr;
  }
  /// Whether the space-separated class attribute contains `css_class`.
  bool has_class(const std::string& css_class) const {
    const auto* classes = attribute("class");
    if (classes == nullptr) return false;
    const std::string padded = " " + *classes + " ";
    return padded.find(" " + css_class + " ") != std::string::npos;
  }
  /// Its text and that of every descendant, in document order.
  std::string all_text() const {
    std::string out = text;
    for (const auto& child : children) out += child.all_text();
    return out;
  }
  /// Every descendant (and itself) for which `match` is true, in document order.
  std::vector<const XmlElement*> find_all(
      const std::function<bool(const XmlElement&)>& match) const {
    std::vector<const XmlElement*> found;
    collect(match, found);
    return found;
  }
  /// Every descendant (and itself) named `element` with class `css_class` (any when empty).
  std::vector<const XmlElement*> find_all(const std::string& element,
                                          const std::string& css_class = "") const {
    return find_all([&](const XmlElement& candidate) {
      return candidate.name == element && (css_class.empty() || candidate.has_class(css_class));
    });
  }

 private:
  void collect(const std::function<bool(const XmlElement&)>& match,
               std::vector<const XmlElement*>& found) const {
    if (match(*this)) found.push_back(this);
    for (const auto& child : children) child.collect(match, found);
  }
};

namespace detail {

class XmlParser {
 public:
  explicit XmlParser(const std::string& text) : text_(text) {}

  XmlElement document() {
    if (starts_with("<?xml")) skip_past("?>");
    skip_misc();
    if (starts_with("<!DOCTYPE")) {
      const auto end = text_.find('>', pos_);
      if (end == std::string::npos) fail("unterminated DOCTYPE");
      if (text_.substr(pos_, end - pos_).find('[') != std::string::npos) {
        fail("DOCTYPE with an internal subset");
      }
      pos_ = end + 1;
    }
    skip_misc();
    if (!starts_with("<")) fail("expected the root element");
    XmlElement root = element();
    skip_misc();
    if (pos_ != text_.size()) fail("content after the root element");
    return root;
  }

 private:
  [[noreturn]] void fail(const std::string& problem) const {
    std::size_t line = 1, column = 1;
    for (std::size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throw std::runtime_error("not well-formed at line " + std::to_string(line) + ", column " +
                             std::to_string(column) + ": " + problem);
  }
  bool starts_with(const char* prefix) const {
    return text_.compare(pos_, std::strlen(prefix), prefix) == 0;
  }
  void skip_past(const char* end) {
    const auto found = text_.find(end, pos_);
    if (found == std::string::npos) fail(std::string("missing '") + end + "'");
    pos_ = found + std::strlen(end);
  }
  static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
  void skip_space() {
    while (pos_ < text_.size() && is_space(text_[pos_])) ++pos_;
  }
  void skip_misc() {
    for (;;) {
      skip_space();
      if (!starts_with("<!--")) return;
      comment();
    }
  }
  void comment() {
    pos_ += 4;
    const auto end = text_.find("--", pos_);
    if (end == std::string::npos) fail("unterminated comment");
    if (text_.compare(end, 3, "-->") != 0) fail("'--' inside a comment");
    pos_ = end + 3;
  }
  static bool name_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
  }
  static bool name_char(char c) {
    return name_start(c) || (c >= '0' && c <= '9') || c == '-' || c == '.';
  }
  std::string name() {
    if (pos_ >= text_.size() || !name_start(text_[pos_])) fail("expected a name");
    const auto begin = pos_;
    while (pos_ < text_.size() && name_char(text_[pos_])) ++pos_;
    return text_.substr(begin, pos_ - begin);
  }
  /// Decodes the reference at pos_ ('&'), appending it to `out`.
  void reference(std::string& out) {
    const auto end = text_.find(';', pos_);
    if (end == std::string::npos || end - pos_ > 10) fail("'&' that starts no reference");
    const std::string entity = text_.substr(pos_ + 1, end - pos_ - 1);
    if (entity == "amp") {
      out += '&';
    } else if (entity == "lt") {
      out += '<';
    } else if (entity == "gt") {
      out += '>';
    } else if (entity == "quot") {
      out += '"';
    } else if (entity == "apos") {
      out += '\'';
    } else if (entity.size() > 1 && entity[0] == '#') {
      const bool hex = entity[1] == 'x';
      const std::string digits = entity.substr(hex ? 2 : 1);
      if (digits.empty() || digits.find_first_not_of(hex ? "0123456789abcdefABCDEF"
                                                         : "0123456789") != std::string::npos) {
        fail("bad character reference &" + entity + ";");
      }
      append_utf8(out, static_cast<std::uint32_t>(std::stoul(digits, nullptr, hex ? 16 : 10)));
    } else {
      fail("unknown entity &" + entity + ";");
    }
    pos_ = end + 1;
  }
  static void append_utf8(std::string& out, std::uint32_t code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xE0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }
  XmlElement element() {
    ++pos_;  // '<'
    XmlElement element;
    element.name = name();
    for (;;) {
      const auto before = pos_;
      skip_space();
      if (starts_with("/>")) {
        pos_ += 2;
        return element;
      }
      if (starts_with(">")) {
        ++pos_;
        break;
      }
      if (pos_ == before) fail("expected whitespace, '>' or '/>' in <" + element.name + ">");
      const std::string key = name();
      if (element.attribute(key) != nullptr) fail("attribute '" + key + "' given twice");
      skip_space();
      if (!starts_with("=")) fail("attribute '" + key + "' without a value");
      ++pos_;
      skip_space();
      if (pos_ >= text_.size() || (text_[pos_] != '"' && text_[pos_] != '\'')) {
        fail("unquoted value of attribute '" + key + "'");
      }
      const char quote = text_[pos_++];
      std::string value;
      while (pos_ < text_.size() && text_[pos_] != quote) {
        if (text_[pos_] == '<') fail("raw '<' in attribute '" + key + "'");
        if (text_[pos_] == '&') {
          reference(value);
        } else {
          value += text_[pos_++];
        }
      }
      if (pos_ >= text_.size()) fail("unterminated value of attribute '" + key + "'");
      ++pos_;
      element.attributes.emplace_back(key, std::move(value));
    }
    // Content.
    for (;;) {
      if (pos_ >= text_.size()) fail("<" + element.name + "> is never closed");
      const char c = text_[pos_];
      if (c == '<') {
        if (starts_with("</")) {
          pos_ += 2;
          const std::string closing = name();
          if (closing != element.name) {
            fail("</" + closing + "> closes <" + element.name + ">");
          }
          skip_space();
          if (!starts_with(">")) fail("expected '>' after </" + closing);
          ++pos_;
          return element;
        }
        if (starts_with("<!--")) {
          comment();
        } else if (starts_with("<!") || starts_with("<?")) {
          fail("unsupported markup (CDATA, declaration or processing instruction)");
        } else {
          element.children.push_back(this->element());
        }
      } else if (c == '&') {
        reference(element.text);
      } else if (c == '>') {
        fail("raw '>' in the text of <" + element.name + ">");
      } else {
        element.text += c;
        ++pos_;
      }
    }
  }

  const std::string& text_;
  std::size_t pos_ = 0;
};

}  // namespace detail

/// The root element of `text`; throws std::runtime_error naming line, column and the problem when
/// `text` is not well-formed.
inline XmlElement parse_xml(const std::string& text) {
  return detail::XmlParser(text).document();
}

/// Empty when `text` is well-formed, else what is wrong and where.
inline std::string xml_problem(const std::string& text) {
  try {
    parse_xml(text);
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  return "";
}

}  // namespace torchbus::testing
