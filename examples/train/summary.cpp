#include "summary.hpp"

#include "sha256.hpp"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace train {
namespace {

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
          out += escaped;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace

JsonObject& JsonObject::add_member(const std::string& key, std::string json, std::string text) {
  members_.push_back({key, std::move(json), std::move(text)});
  return *this;
}

JsonObject& JsonObject::add(const std::string& key, const std::string& value) {
  return add_member(key, quoted(value), value);
}

JsonObject& JsonObject::add(const std::string& key, double value) {
  std::ostringstream out;
  out.precision(17);
  out << value;
  const auto json = std::isfinite(value) ? out.str() : "null";
  return add_member(key, json, json);
}

JsonObject& JsonObject::add(const std::string& key, std::int64_t value) {
  return add_member(key, std::to_string(value), std::to_string(value));
}

JsonObject& JsonObject::add(const std::string& key, const JsonObject& value) {
  return add_member(key, value.str(), value.str());
}

std::string JsonObject::str() const {
  std::string out = "{";
  for (std::size_t i = 0; i < members_.size(); ++i) {
    out += (i == 0 ? "" : ", ") + quoted(members_[i].key) + ": " + members_[i].json;
  }
  return out + "}";
}

std::vector<std::pair<std::string, std::string>> JsonObject::text_members() const {
  std::vector<std::pair<std::string, std::string>> texts;
  for (const auto& member : members_) texts.emplace_back(member.key, member.text);
  return texts;
}

std::string parameters_sha256(const torch::nn::Module& module) {
  Sha256 hash;
  auto add_tensor = [&](const std::string& name, const at::Tensor& tensor) {
    const auto contiguous = tensor.detach().to(torch::kCPU).contiguous();
    std::ostringstream header;
    header << name << ' ' << contiguous.sizes() << ' ' << contiguous.dtype() << '\n';
    const auto text = header.str();
    hash.update(text.data(), text.size());
    hash.update(contiguous.data_ptr(), contiguous.numel() * contiguous.element_size());
  };
  for (const auto& item : module.named_parameters()) add_tensor(item.key(), item.value());
  for (const auto& item : module.named_buffers()) add_tensor(item.key(), item.value());
  return hash.hex_digest();
}

}  // namespace train
