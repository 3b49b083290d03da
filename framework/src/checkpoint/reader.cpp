#include <c10/util/Exception.h>

#include "checkpoint/reader.hpp"
#include "support/type_name.hpp"

#include <sstream>

namespace torchbus::detail {

std::string reason_of(const std::exception& error) {
  if (dynamic_cast<const std::bad_alloc*>(&error) != nullptr) {
    return "it announces more memory than can be allocated (std::bad_alloc)";
  }
  const auto* torch_error = dynamic_cast<const c10::Error*>(&error);
  std::string text = torch_error ? torch_error->what_without_backtrace() : error.what();
  text = text.substr(0, text.find('\n')).substr(0, 200);
  return text.empty() ? concat("an error of type ", type_name(typeid(error)), " without a message")
                      : text;
}

std::string indexed_key(std::string_view key, std::size_t index) {
  return index == 0 ? std::string(key) : concat(key, '_', index);
}

std::string join_lines(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += name + "\n";
  return out;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> names;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) names.push_back(line);
  return names;
}

CheckpointReader::CheckpointReader(const std::filesystem::path& path, c10::Device device)
    : path_(path), device_(device) {
  const auto payload = read_checkpoint_payload(path, &header_);
  try {
    std::istringstream in(payload);
    archive_.load_from(in, device_);
  } catch (const std::exception& error) {
    fail("cannot be parsed: ", reason_of(error));
  }
}

c10::IValue CheckpointReader::value(const std::string& key) {
  c10::IValue value;
  if (!archive_.try_read(key, value)) fail("has no '", key, "' entry");
  return value;
}

at::Tensor CheckpointReader::tensor(const std::string& key) {
  at::Tensor tensor;
  if (!archive_.try_read(key, tensor)) fail("has no '", key, "' tensor");
  return tensor;
}

c10::IValue CheckpointReader::optional_value(const std::string& key) {
  c10::IValue value;
  archive_.try_read(key, value);
  return value;
}

at::Tensor CheckpointReader::optional_tensor(const std::string& key) {
  at::Tensor tensor;
  archive_.try_read(key, tensor);
  return tensor;
}

torch::serialize::InputArchive CheckpointReader::nested(const std::string& key) {
  torch::serialize::InputArchive nested;
  if (archive_.try_read(key, nested)) return nested;
  // A section serialized when the checkpoint was captured (checkpoint_io.cpp, write_section).
  const auto bytes = optional_tensor(key + "_bytes");
  if (!bytes.defined()) fail("has no '", key, "' section");
  if (bytes.scalar_type() != at::kByte || bytes.dim() != 1 || !bytes.is_contiguous()) {
    fail("has a malformed '", key, "_bytes' section");
  }
  const auto on_host = bytes.cpu();
  nested.load_from(static_cast<const char*>(on_host.data_ptr()),
                   static_cast<std::size_t>(on_host.numel()), device_);
  return nested;
}

}  // namespace torchbus::detail
