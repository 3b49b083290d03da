#include <torch/torch.h>
#include <torchbus/distributed.hpp>
#include <torchbus/distributed_sampler.hpp>
#include <torchbus/error.hpp>

#include <algorithm>

namespace torchbus {

DistributedSampler::DistributedSampler(std::size_t dataset_size, int rank, int world_size,
                                       bool shuffle, bool drop_last)
    : dataset_size_(dataset_size),
      rank_(rank),
      world_size_(world_size),
      shuffle_(shuffle),
      drop_last_(drop_last) {
  TORCHBUS_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, ConfigError,
                 "DistributedSampler: rank ", rank, " is not in [0, world size ", world_size, ")");
  TORCHBUS_CHECK(dataset_size >= static_cast<std::size_t>(world_size) || !drop_last, ConfigError,
                 "DistributedSampler: ", dataset_size, " samples cannot be shared by ", world_size,
                 " ranks with drop_last (every rank would get none)");
}

DistributedSampler::DistributedSampler(std::size_t dataset_size, const ProcessGroup* group,
                                       bool shuffle, bool drop_last)
    : DistributedSampler(dataset_size, group ? group->rank() : 0, group ? group->world_size() : 1,
                         shuffle, drop_last) {}

std::size_t DistributedSampler::shard_size() const noexcept {
  const auto ranks = static_cast<std::size_t>(world_size_);
  return drop_last_ ? dataset_size_ / ranks : (dataset_size_ + ranks - 1) / ranks;
}

void DistributedSampler::reset(c10::optional<std::size_t> new_size) {
  if (new_size) dataset_size_ = *new_size;
  std::vector<std::int64_t> order(dataset_size_);
  if (shuffle_ && dataset_size_ > 0) {
    const auto permutation =
        torch::randperm(static_cast<std::int64_t>(dataset_size_), torch::kLong);
    std::copy_n(permutation.data_ptr<std::int64_t>(), dataset_size_, order.begin());
  } else {
    for (std::size_t i = 0; i < dataset_size_; ++i) order[i] = static_cast<std::int64_t>(i);
  }
  const auto count = shard_size();
  shard_.resize(count);
  for (std::size_t j = 0; j < count; ++j) {
    const auto position =
        static_cast<std::size_t>(rank_) + j * static_cast<std::size_t>(world_size_);
    shard_[j] = dataset_size_ == 0 ? 0 : static_cast<std::size_t>(order[position % dataset_size_]);
  }
  position_ = 0;
}

c10::optional<std::vector<std::size_t>> DistributedSampler::next(std::size_t batch_size) {
  if (position_ >= shard_.size()) return c10::nullopt;
  const auto end = std::min(shard_.size(), position_ + batch_size);
  std::vector<std::size_t> batch(shard_.begin() + static_cast<std::ptrdiff_t>(position_),
                                 shard_.begin() + static_cast<std::ptrdiff_t>(end));
  position_ = end;
  return batch;
}

void DistributedSampler::save(torch::serialize::OutputArchive& archive) const {
  std::vector<std::int64_t> shard(shard_.begin(), shard_.end());
  archive.write("shard", torch::tensor(shard, torch::kLong), /*is_buffer=*/true);
  archive.write("position", torch::tensor(static_cast<std::int64_t>(position_), torch::kLong),
                /*is_buffer=*/true);
}

void DistributedSampler::load(torch::serialize::InputArchive& archive) {
  at::Tensor shard;
  at::Tensor position;
  archive.read("shard", shard, /*is_buffer=*/true);
  archive.read("position", position, /*is_buffer=*/true);
  shard = shard.to(torch::kLong).contiguous();
  shard_.assign(shard.data_ptr<std::int64_t>(), shard.data_ptr<std::int64_t>() + shard.numel());
  position_ = static_cast<std::size_t>(position.item<std::int64_t>());
  TORCHBUS_CHECK(position_ <= shard_.size(), CheckpointError,
                 "DistributedSampler state is corrupt: position ", position_,
                 " is past the shard's ", shard_.size(), " indices");
}

}  // namespace torchbus
