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

JsonObject& JsonObject::add(const std::string& key, const std::string& value) {
  members_.emplace_back(key, quoted(value));
  return *this;
}

JsonObject& JsonObject::add(const std::string& key, double value) {
  std::ostringstream out;
  out.precision(17);
  out << value;
  members_.emplace_back(key, std::isfinite(value) ? out.str() : "null");
  return *this;
}

JsonObject& JsonObject::add(const std::string& key, std::int64_t value) {
  members_.emplace_back(key, std::to_string(value));
  return *this;
}

JsonObject& JsonObject::add(const std::string& key, const JsonObject& value) {
  members_.emplace_back(key, value.str());
  return *this;
}

std::string JsonObject::str() const {
  std::string out = "{";
  for (std::size_t i = 0; i < members_.size(); ++i) {
    out += (i == 0 ? "" : ", ") + quoted(members_[i].first) + ": " + members_[i].second;
  }
  return out + "}";
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
