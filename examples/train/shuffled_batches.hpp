#pragma once

// Batches of a tensor dataset, reshuffled every epoch from a seed.

#include <torchbus/batch_source.hpp>

#include <cstdint>

namespace train {

/// Yields batches of (inputs, targets) in an order drawn from `seed` and the epoch number, so a
/// run with the same seed sees the same batches.
class ShuffledBatches final : public torchbus::BatchSource {
 public:
  ShuffledBatches(at::Tensor inputs, at::Tensor targets, std::int64_t batch_size, bool shuffle,
                  std::uint64_t seed);
  void start_epoch(std::int64_t epoch) override;
  bool next(torchbus::Batch& batch) override;
  std::int64_t skip(std::int64_t count) override;
  /// Batches per epoch.
  std::int64_t batches_per_epoch() const noexcept;

 private:
  at::Tensor inputs_, targets_, order_;
  std::int64_t batch_size_;
  bool shuffle_;
  std::uint64_t seed_;
  std::int64_t offset_ = 0;
};

}  // namespace train
