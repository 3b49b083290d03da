#pragma once

/// \file
/// DistributedSampler: each rank a disjoint shard of a torch::data dataset, reshuffled per epoch.

#include <torch/data/samplers/base.h>

#include <c10/util/Optional.h>
#include <cstddef>
#include <vector>

namespace torchbus {

class ProcessGroup;

/// A `torch::data` sampler giving rank r the indices r, r + W, r + 2W, ... of a permutation of
/// the dataset (W ranks), so that step s of W ranks with batch b sees exactly the samples of step
/// s of one process with batch W*b. The permutation is drawn from LibTorch's default CPU generator
/// at every reset, as `RandomSampler` does: the Trainer gives every rank rank 0's generator at
/// each epoch start and restores it on resume, so the shards stay disjoint and resumable. The
/// dataset is padded by repeating its first indices so that every rank gets as many samples
/// (unless `drop_last`). Nothing is drawn before the first reset (a data loader's `begin()`).
class DistributedSampler : public torch::data::samplers::Sampler<> {
 public:
  /// Shards `dataset_size` indices over `world_size` ranks for rank `rank`.
  DistributedSampler(std::size_t dataset_size, int rank, int world_size, bool shuffle = true,
                     bool drop_last = false);
  /// Shards `dataset_size` indices over the ranks of `group` (one rank without a group).
  DistributedSampler(std::size_t dataset_size, const ProcessGroup* group, bool shuffle = true,
                     bool drop_last = false);

  /// Draws the epoch's permutation (or the identity without shuffle) and takes this rank's shard.
  void reset(c10::optional<std::size_t> new_size = c10::nullopt) override;
  /// The next at most `batch_size` indices of this rank's shard.
  c10::optional<std::vector<std::size_t>> next(std::size_t batch_size) override;
  /// Writes the shard and the position in it.
  void save(torch::serialize::OutputArchive& archive) const override;
  /// Restores what `save` wrote.
  void load(torch::serialize::InputArchive& archive) override;

  /// Indices this rank gets per epoch.
  std::size_t shard_size() const noexcept;

 private:
  std::size_t dataset_size_;
  int rank_;
  int world_size_;
  bool shuffle_;
  bool drop_last_;
  std::vector<std::size_t> shard_;
  std::size_t position_ = 0;
};

}  // namespace torchbus
