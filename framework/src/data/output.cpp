#include <torchbus/error.hpp>
#include <torchbus/output.hpp>

#include <algorithm>

namespace torchbus {

Output::Output(std::initializer_list<NamedTensor> named) {
  for (const auto& [name, tensor] : named) set(name, tensor);
}

Output& Output::set(std::string name, at::Tensor tensor) {
  TORCHBUS_CHECK(!name.empty(), DataError, "an output needs a name, got ''");
  if (name == "output") {
    main_ = std::move(tensor);
    return *this;
  }
  const auto found = std::find_if(named_.begin(), named_.end(),
                                  [&](const NamedTensor& entry) { return entry.first == name; });
  const bool first = !main_.defined() && named_.empty();
  if (found != named_.end()) {
    if (found->second.is_same(main_)) main_ = tensor;
    found->second = std::move(tensor);
    return *this;
  }
  if (first) main_ = tensor;
  named_.emplace_back(std::move(name), std::move(tensor));
  return *this;
}

bool Output::has(std::string_view name) const noexcept {
  if (name == "output") return main_.defined();
  return std::any_of(named_.begin(), named_.end(),
                     [&](const NamedTensor& entry) { return entry.first == name; });
}

const at::Tensor& Output::get(std::string_view name) const {
  if (name == "output" && main_.defined()) return main_;
  const auto found = std::find_if(named_.begin(), named_.end(),
                                  [&](const NamedTensor& entry) { return entry.first == name; });
  TORCHBUS_CHECK(found != named_.end(), DataError, "the model's output has no tensor '", name,
                 "'; its outputs: ", names());
  return found->second;
}

std::string Output::names() const {
  std::string names = main_.defined() ? "output" : "";
  for (const auto& [name, tensor] : named_) names += (names.empty() ? "" : ", ") + name;
  return names.empty() ? "none" : names;
}

}  // namespace torchbus
