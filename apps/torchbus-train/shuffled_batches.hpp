#pragma once

// Batches of a tensor dataset, reshuffled every epoch from a seed, and this rank's share of them.

#include <torchbus/batch_source.hpp>

#include <cstdint>
#include <optional>

namespace train {

/// The rows rank `rank` of `world_size` reads: rows rank, rank + W, rank + 2W, ... of each
/// epoch's order, so that W ranks with batch b see at step s the rows one process with batch W*b
/// sees at step s.
struct Shard {
  int rank = 0;        ///< this rank
  int world_size = 1;  ///< the number of ranks W
  /// Every rank gets as many rows: the order is extended by its first rows up to a multiple of W
  /// (training: every rank steps as often). Otherwise every row is read exactly once and the
  /// ranks' shares differ by at most one row (validation: every sample counted once).
  bool equal_sizes = false;
};

/// Yields batches of (inputs, targets) of this rank's shard in an order drawn from `seed` and the
/// epoch number, so a run with the same seed sees the same batches. With `pin_memory` each batch
/// is gathered into page-locked memory (for a GPU: the copy to it then does not block the host).
/// Undefined targets (data to predict on, without labels) give batches without a target; with
/// `indexed` each batch also holds the rows' indices in the field "index" (PredictionWriter puts
/// the rows of every rank back in order with them).
class ShuffledBatches final : public torchbus::BatchSource {
 public:
  ShuffledBatches(at::Tensor inputs, at::Tensor targets, std::int64_t batch_size, bool shuffle,
                  std::uint64_t seed, Shard shard = {}, bool pin_memory = false,
                  bool indexed = false);
  void start_epoch(std::int64_t epoch) override;
  bool next(torchbus::Batch& batch) override;
  std::int64_t skip(std::int64_t count) override;
  /// Batches per epoch of this rank (a --limit-*-batches fraction is taken of them).
  std::optional<std::int64_t> size() const override { return batches_per_epoch(); }
  /// Batches per epoch of this rank.
  std::int64_t batches_per_epoch() const noexcept;
  /// Rows per epoch of this rank.
  std::int64_t rows_per_epoch() const noexcept { return shard_rows_; }

 private:
  at::Tensor inputs_, targets_, order_;
  std::int64_t batch_size_;
  bool shuffle_;
  bool pin_memory_;
  bool indexed_;
  std::uint64_t seed_;
  Shard shard_;
  std::int64_t shard_rows_;
  std::int64_t offset_ = 0;
};

}  // namespace train
