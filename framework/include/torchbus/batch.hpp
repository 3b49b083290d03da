#pragma once

/// \file
/// Batch: what one step of the loop trains on. The `data`/`target` pair of LibTorch's
/// `torch::data::Example<>` (a Batch is one, so code written for Example<> reads it unchanged),
/// plus any number of named tensors (a mask, token ids) and named lists of tensors (per-image boxes
/// of different lengths). See docs/any-model.md.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/data/example.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace torchbus {

/// One batch: `data` and `target` (either may be undefined), named tensors and named lists of
/// tensors. Names are unique across tensors and lists, and "data" and "target" name the pair.
/// Converts implicitly from `torch::data::Example<>`, and is one: every place that takes an
/// Example<> takes a Batch.
class Batch : public torch::data::Example<> {
 public:
  /// A named tensor: its name and the tensor.
  using NamedTensor = std::pair<std::string, at::Tensor>;
  /// A named list: its name and one tensor per sample, of any shapes.
  using NamedList = std::pair<std::string, std::vector<at::Tensor>>;

  Batch() = default;
  /// The pair alone, as `torch::data::Example<>(data, target)`.
  Batch(at::Tensor data, at::Tensor target)
      : torch::data::Example<>(std::move(data), std::move(target)) {}
  /// The pair of `example`, with no named fields.
  Batch(torch::data::Example<> example)  // NOLINT(google-explicit-constructor): Example<> code
      : torch::data::Example<>(std::move(example)) {}

  /// Sets the tensor `name` (added, or replacing the tensor of that name; "data" and "target" set
  /// the pair). A name a list has already is a DataError.
  Batch& set(std::string name, at::Tensor tensor);
  /// Sets the list `name` (added or replaced). A name a tensor has already, "data" or "target" is
  /// a DataError.
  Batch& set_list(std::string name, std::vector<at::Tensor> tensors);
  /// Whether the tensor `name` is set ("data" and "target": when defined).
  bool has(std::string_view name) const noexcept;
  /// Whether the list `name` is set.
  bool has_list(std::string_view name) const noexcept;
  /// The tensor `name` ("data", "target" or a named one). A DataError naming the batch's fields
  /// when there is none of that name.
  const at::Tensor& get(std::string_view name) const&;
  /// The tensor `name` of a temporary batch (`collate(samples).get("ids")`), by value.
  at::Tensor get(std::string_view name) && { return get_field(name); }
  /// The list `name`. A DataError naming the batch's fields when there is none of that name.
  const std::vector<at::Tensor>& list(std::string_view name) const&;
  /// The list `name` of a temporary batch, by value (a reference would outlive the batch).
  std::vector<at::Tensor> list(std::string_view name) && { return list_field(name); }
  /// The named tensors (not `data` and `target`), in the order they were first set.
  const std::vector<NamedTensor>& tensors() const noexcept { return tensors_; }
  /// The named lists, in the order they were first set.
  const std::vector<NamedList>& lists() const noexcept { return lists_; }
  /// Whether the batch has named tensors or lists (false: an Example<>'s pair alone).
  bool structured() const noexcept { return !tensors_.empty() || !lists_.empty(); }
  /// Removes the named tensors and lists (the pair stays).
  void clear_named() noexcept;
  /// Every field's name, "data" and "target" first when defined, e.g. "data, target, mask".
  std::string field_names() const;

  /// How many samples the batch holds: the first dimension of `data`, else of `target`, else of
  /// the first named tensor, else the length of the first list. A 0-dimensional tensor, or a
  /// batch with no field at all (a custom step that reads its data elsewhere), counts as one.
  std::int64_t samples() const;
  /// How many samples the batch holds by the field `field`: its first dimension (1 for a
  /// 0-dimensional tensor), or a list's length; empty: samples(). A DataError naming the fields
  /// when the batch has no field of that name.
  std::int64_t samples(std::string_view field) const;

  /// Moves every tensor (the pair, the named ones, each list's) to `device`; `non_blocking` as in
  /// `at::Tensor::to`. Tensors already there are left as they are.
  void to(const c10::Device& device, bool non_blocking = false);

 private:
  const at::Tensor& get_field(std::string_view name) const;
  const std::vector<at::Tensor>& list_field(std::string_view name) const;

  std::vector<NamedTensor> tensors_;
  std::vector<NamedList> lists_;
};

}  // namespace torchbus
