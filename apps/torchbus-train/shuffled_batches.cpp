#include "shuffled_batches.hpp"

#include <torch/torch.h>

namespace train {
namespace {

/// Rows of rank `shard.rank` among `rows`, as Shard describes.
std::int64_t rows_of_shard(std::int64_t rows, const Shard& shard) {
  const std::int64_t world = shard.world_size;
  if (shard.equal_sizes) return (rows + world - 1) / world;
  return rows / world + (shard.rank < rows % world ? 1 : 0);
}

}  // namespace

ShuffledBatches::ShuffledBatches(at::Tensor inputs, at::Tensor targets, std::int64_t batch_size,
                                 bool shuffle, std::uint64_t seed, Shard shard, bool pin_memory,
                                 bool indexed)
    : inputs_(std::move(inputs)),
      targets_(std::move(targets)),
      batch_size_(batch_size),
      shuffle_(shuffle),
      pin_memory_(pin_memory),
      indexed_(indexed),
      seed_(seed),
      shard_(shard),
      shard_rows_(rows_of_shard(inputs_.size(0), shard)) {}

void ShuffledBatches::start_epoch(std::int64_t epoch) {
  offset_ = 0;
  const auto rows = inputs_.size(0);
  if (shuffle_) {
    auto generator = at::detail::createCPUGenerator(seed_ + static_cast<std::uint64_t>(epoch));
    order_ = at::randperm(rows, generator, at::kLong);
  } else {
    order_ = at::arange(rows, at::kLong);
  }
  if (shard_.world_size > 1) {
    const auto positions = at::arange(shard_.rank, shard_.rank + shard_rows_ * shard_.world_size,
                                      shard_.world_size, at::kLong);
    order_ = order_.index_select(0, positions.remainder(rows));
  }
}

bool ShuffledBatches::next(torchbus::Batch& batch) {
  const auto rows = order_.size(0);
  if (offset_ >= rows) return false;
  const auto indices = order_.slice(0, offset_, std::min(rows, offset_ + batch_size_));
  const auto gather = [&](const at::Tensor& from) {
    if (!pin_memory_) return from.index_select(0, indices);
    auto shape = from.sizes().vec();
    shape[0] = indices.size(0);
    // A fresh page-locked block per batch: LibTorch's host allocator reuses one only once the
    // copies reading it are done.
    auto pinned = at::empty(shape, from.options().pinned_memory(true));
    return at::index_select_out(pinned, from, 0, indices);
  };
  batch.data = gather(inputs_);
  batch.target = targets_.defined() ? gather(targets_) : at::Tensor();
  if (indexed_) batch.set("index", indices);
  offset_ += batch_size_;
  return true;
}

std::int64_t ShuffledBatches::skip(std::int64_t count) {
  const auto available = std::max<std::int64_t>(0, batches_per_epoch() - offset_ / batch_size_);
  const auto skipped = std::min(count, available);
  offset_ += skipped * batch_size_;
  return skipped;
}

std::int64_t ShuffledBatches::batches_per_epoch() const noexcept {
  // Rounded up without rows + batch_size - 1, which overflows for a batch size near 2^63.
  return shard_rows_ / batch_size_ + (shard_rows_ % batch_size_ != 0 ? 1 : 0);
}

}  // namespace train
