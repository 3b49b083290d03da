#include <torchbus/batch.hpp>
#include <torchbus/error.hpp>

#include <algorithm>

namespace torchbus {
namespace {

bool is_pair_name(std::string_view name) noexcept {
  return name == "data" || name == "target";
}

template <typename Fields>
auto find_field(Fields& fields, std::string_view name) noexcept {
  return std::find_if(fields.begin(), fields.end(),
                      [name](const auto& field) { return field.first == name; });
}

}  // namespace

Batch& Batch::set(std::string name, at::Tensor tensor) {
  if (name == "data") {
    data = std::move(tensor);
    return *this;
  }
  if (name == "target") {
    target = std::move(tensor);
    return *this;
  }
  TORCHBUS_CHECK(!name.empty(), DataError, "a batch field needs a name, got ''");
  TORCHBUS_CHECK(!has_list(name), DataError, "the batch has a list '", name,
                 "': a tensor cannot have its name (its fields: ", field_names(), ")");
  if (const auto found = find_field(tensors_, name); found != tensors_.end()) {
    found->second = std::move(tensor);
  } else {
    tensors_.emplace_back(std::move(name), std::move(tensor));
  }
  return *this;
}

Batch& Batch::set_list(std::string name, std::vector<at::Tensor> tensors) {
  TORCHBUS_CHECK(!name.empty(), DataError, "a batch field needs a name, got ''");
  TORCHBUS_CHECK(!is_pair_name(name), DataError, "'", name,
                 "' is a tensor of every batch (data, target): a list cannot have its name");
  TORCHBUS_CHECK(find_field(tensors_, name) == tensors_.end(), DataError,
                 "the batch has a tensor '", name,
                 "': a list cannot have its name (its fields: ", field_names(), ")");
  if (const auto found = find_field(lists_, name); found != lists_.end()) {
    found->second = std::move(tensors);
  } else {
    lists_.emplace_back(std::move(name), std::move(tensors));
  }
  return *this;
}

bool Batch::has(std::string_view name) const noexcept {
  if (name == "data") return data.defined();
  if (name == "target") return target.defined();
  return find_field(tensors_, name) != tensors_.end();
}

bool Batch::has_list(std::string_view name) const noexcept {
  return find_field(lists_, name) != lists_.end();
}

const at::Tensor& Batch::get(std::string_view name) const& {
  return get_field(name);
}

const at::Tensor& Batch::get_field(std::string_view name) const {
  if (name == "data" && data.defined()) return data;
  if (name == "target" && target.defined()) return target;
  const auto found = find_field(tensors_, name);
  TORCHBUS_CHECK(found != tensors_.end(), DataError, "the batch has no tensor '", name,
                 "'; its fields: ", field_names(),
                 has_list(name) ? " (it is a list: read it with list())" : "");
  return found->second;
}

const std::vector<at::Tensor>& Batch::list(std::string_view name) const& {
  return list_field(name);
}

const std::vector<at::Tensor>& Batch::list_field(std::string_view name) const {
  const auto found = find_field(lists_, name);
  TORCHBUS_CHECK(found != lists_.end(), DataError, "the batch has no list '", name,
                 "'; its fields: ", field_names(),
                 has(name) ? " (it is a tensor: read it with get())" : "");
  return found->second;
}

void Batch::clear_named() noexcept {
  tensors_.clear();
  lists_.clear();
}

std::string Batch::field_names() const {
  std::string names;
  const auto add = [&names](std::string_view name, const char* kind) {
    names += (names.empty() ? "" : ", ") + std::string(name) + kind;
  };
  if (data.defined()) add("data", "");
  if (target.defined()) add("target", "");
  for (const auto& [name, tensor] : tensors_) add(name, "");
  for (const auto& [name, list] : lists_) add(name, " (list)");
  return names.empty() ? "none" : names;
}

std::int64_t Batch::samples() const {
  const auto first_dimension = [](const at::Tensor& tensor) {
    return tensor.dim() > 0 ? tensor.size(0) : std::int64_t{1};
  };
  if (data.defined()) return first_dimension(data);
  if (target.defined()) return first_dimension(target);
  for (const auto& [name, tensor] : tensors_) {
    if (tensor.defined()) return first_dimension(tensor);
  }
  if (!lists_.empty()) return static_cast<std::int64_t>(lists_.front().second.size());
  return 1;
}

std::int64_t Batch::samples(std::string_view field) const {
  if (field.empty()) return samples();
  if (has_list(field)) return static_cast<std::int64_t>(list_field(field).size());
  TORCHBUS_CHECK(
      has(field), DataError, "the samples of a batch are counted by its field '", field,
      "' (TrainerOptions::sample_field), and the batch has none; its fields: ", field_names());
  const auto& tensor = get_field(field);
  return tensor.dim() > 0 ? tensor.size(0) : std::int64_t{1};
}

void Batch::to(const c10::Device& device, bool non_blocking) {
  const auto move = [&](at::Tensor& tensor) {
    if (tensor.defined() && tensor.device() != device) tensor = tensor.to(device, non_blocking);
  };
  move(data);
  move(target);
  for (auto& [name, tensor] : tensors_) move(tensor);
  for (auto& [name, list] : lists_) {
    for (auto& tensor : list) move(tensor);
  }
}

}  // namespace torchbus
