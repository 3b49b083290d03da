#pragma once

/// \file
/// Tensors by name: the train step and callbacks put tensors in, loggers read them by name.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace torchbus {

/// How long a tensor stays in the store: cleared after BatchEnd (and EvalBatchEnd), StepEnd,
/// EpochEnd, or kept for the whole action.
enum class Scope : std::uint8_t { Batch, Step, Epoch, Action };

/// Named tensors with a lifetime. Setting an existing name reuses its slot, so the loop does not
/// allocate per batch once every name has been seen.
class TensorStore {
 public:
  /// Stores `value` under `name` until the end of `scope` (replacing any earlier value).
  void set(std::string_view name, at::Tensor value, Scope scope = Scope::Batch);

  /// The tensor named `name`; throws Error naming the tensors present when there is none.
  const at::Tensor& get(std::string_view name) const;

  /// The tensor named `name`, or nullptr.
  const at::Tensor* find(std::string_view name) const noexcept;

  /// Whether a tensor named `name` is present.
  bool contains(std::string_view name) const noexcept { return find(name) != nullptr; }

  /// Removes every tensor stored with exactly `scope`.
  void clear(Scope scope) noexcept;

  /// Removes every tensor.
  void clear_all() noexcept;

  /// Names of the tensors present, in the order they were first set.
  std::vector<std::string> names() const;

 private:
  struct Entry {
    std::string name;
    at::Tensor value;
    Scope scope;
  };
  std::vector<Entry> entries_;
};

}  // namespace torchbus
