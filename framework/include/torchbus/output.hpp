#pragma once

/// \file
/// Output: what a model's forward returns to the trainer. One tensor (logits, a regression's
/// values), or named tensors (logits and an auxiliary loss). See docs/any-model.md.

#include <ATen/core/Tensor.h>

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace torchbus {

/// A forward's result: its main tensor, the one `State::batch_output()` shows and metrics read by
/// default, and any number of named tensors. "output" names the main tensor.
class Output {
 public:
  /// A named tensor: its name and the tensor.
  using NamedTensor = std::pair<std::string, at::Tensor>;

  Output() = default;
  /// One tensor, the main one: a forward returning a tensor returns an Output.
  Output(at::Tensor tensor)  // NOLINT(google-explicit-constructor): forwards return tensors
      : main_(std::move(tensor)) {}
  /// Named tensors, the first of them the main one: `Output{{"logits", l}, {"aux_loss", a}}`.
  Output(std::initializer_list<NamedTensor> named);

  /// Sets the named tensor `name` (added, or replacing the tensor of that name); the first tensor
  /// set on an empty Output becomes the main one. "output" sets the main tensor.
  Output& set(std::string name, at::Tensor tensor);
  /// The main tensor (undefined for an empty Output).
  const at::Tensor& main() const noexcept { return main_; }
  /// The tensor `name` ("output": the main one). A DataError naming the outputs when there is none
  /// of that name.
  const at::Tensor& get(std::string_view name) const;
  /// Whether the tensor `name` is set ("output": whether the main one is defined).
  bool has(std::string_view name) const noexcept;
  /// The named tensors, in the order they were first set (the main one among them when it was set
  /// by name).
  const std::vector<NamedTensor>& named() const noexcept { return named_; }
  /// Every name, "output" first, e.g. "output, logits, aux_loss".
  std::string names() const;

 private:
  at::Tensor main_;
  std::vector<NamedTensor> named_;
};

}  // namespace torchbus
