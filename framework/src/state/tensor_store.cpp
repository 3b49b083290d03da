#include <torchbus/error.hpp>
#include <torchbus/tensor_store.hpp>

namespace torchbus {

void TensorStore::set(std::string_view name, at::Tensor value, Scope scope) {
  for (auto& entry : entries_) {
    if (entry.name == name) {
      entry.value = std::move(value);
      entry.scope = scope;
      return;
    }
  }
  entries_.push_back(Entry{std::string(name), std::move(value), scope});
}

const at::Tensor* TensorStore::find(std::string_view name) const noexcept {
  for (const auto& entry : entries_) {
    if (entry.name == name) return entry.value.defined() ? &entry.value : nullptr;
  }
  return nullptr;
}

const at::Tensor& TensorStore::get(std::string_view name) const {
  if (const auto* value = find(name)) return *value;
  throw Error(detail::concat("no tensor named '", name,
                             "' in the tensor store; present: ", detail::join_or_none(names())));
}

void TensorStore::clear(Scope scope) noexcept {
  for (auto& entry : entries_) {
    if (entry.scope == scope) entry.value.reset();
  }
}

void TensorStore::clear_all() noexcept {
  entries_.clear();
}

std::vector<std::string> TensorStore::names() const {
  std::vector<std::string> result;
  for (const auto& entry : entries_) {
    if (entry.value.defined()) result.push_back(entry.name);
  }
  return result;
}

}  // namespace torchbus
