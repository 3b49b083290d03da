#pragma once

/// \file
/// collate: samples into a batch, so that a dataset returns samples and torchbus makes batches
/// (PyTorch's `default_collate`, with padding and lists asked for by field). See
/// docs/any-model.md, "Samples into batches".

#include <torchbus/batch.hpp>

#include <map>
#include <set>
#include <string>
#include <vector>

namespace torchbus {

/// How `collate` treats the fields whose shapes differ between samples, e.g.
/// `CollateOptions().pad("input_ids", 0).as_list("boxes")`.
class CollateOptions {
 public:
  /// Pads the tensor field `name` of every sample with `value` at the end of each dimension to the
  /// largest size among the samples, then stacks them ("data" and "target" may be padded too).
  CollateOptions& pad(std::string name, double value = 0.0);
  /// Keeps the tensor field `name` of each sample as one entry of the batch's list `name`,
  /// whatever its shape (per-image boxes), instead of stacking.
  CollateOptions& as_list(std::string name);

  /// The padding value of each padded field.
  const std::map<std::string, double, std::less<>>& padded() const noexcept { return padded_; }
  /// The fields kept as lists.
  const std::set<std::string, std::less<>>& listed() const noexcept { return listed_; }

 private:
  std::map<std::string, double, std::less<>> padded_;
  std::set<std::string, std::less<>> listed_;
};

/// One batch of `samples` (each a Batch of one sample, its tensors without the batch dimension):
/// every tensor field stacked along a new first dimension (padded first, or kept as a list, where
/// `options` says so); every list field concatenated in sample order (a sample's list holds its
/// entries: a batch list has one entry per entry of every sample). Every sample must have the same
/// fields, with the same dtype, and shapes that are equal unless padded or listed; otherwise a
/// DataError names the field, the first sample that differs and both shapes (or dtypes). No
/// samples is a DataError too.
Batch collate(const std::vector<Batch>& samples, const CollateOptions& options = {});

}  // namespace torchbus
