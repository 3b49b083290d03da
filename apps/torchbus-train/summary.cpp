#include "summary.hpp"

#include "sha256.hpp"

#include <sstream>

namespace train {

std::vector<std::pair<std::string, std::string>> text_members(const JsonObject& object) {
  std::vector<std::pair<std::string, std::string>> texts;
  for (const auto& [key, value] : object.items()) {
    texts.emplace_back(key, value.is_string() ? value.get<std::string>() : value.dump());
  }
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
