#pragma once

/// \file
/// Where batches come from: any range of batches, adapted to one small interface.

#include <torch/data/example.h>
#include <torchbus/batch.hpp>
#include <torchbus/collate.hpp>

#include <cstdint>
#include <iterator>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace torchbus {

/// A resettable stream of batches; one pass is one epoch.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  /// Starts a new pass over the data; `epoch` is the index of the training epoch (0 for
  /// evaluations), for sources whose order depends on it.
  virtual void start_epoch(std::int64_t epoch) = 0;
  /// Writes the next batch into `batch`; returns false at the end of the pass.
  virtual bool next(Batch& batch) = 0;
  /// Skips up to `count` batches (resuming mid-epoch); returns how many were skipped. The default
  /// reads and drops them; sources that can seek should override it.
  virtual std::int64_t skip(std::int64_t count);
  /// Batches in one pass, when known (a fraction in TrainerOptions::limit_train_batches or
  /// limit_val_batches needs it); the default: unknown.
  virtual std::optional<std::int64_t> size() const { return std::nullopt; }
};

namespace detail {
/// Stacks unstacked examples (a `torch::data` loader without the Stack transform).
Batch stack_examples(const std::vector<torch::data::Example<>>& examples);

inline Batch to_batch(const Batch& batch) {
  return batch;
}
inline Batch to_batch(const torch::data::Example<>& example) {
  return Batch(example);
}
inline Batch to_batch(const std::vector<torch::data::Example<>>& examples) {
  return stack_examples(examples);
}
inline Batch to_batch(const std::vector<Batch>& samples) {
  return collate(samples);
}
inline Batch to_batch(const std::pair<at::Tensor, at::Tensor>& pair) {
  return Batch(pair.first, pair.second);
}

/// Whether `std::size` tells how many elements a `Range` has (a std::vector, an array, ...).
template <typename Range, typename = void>
struct HasSize : std::false_type {};
template <typename Range>
struct HasSize<Range, std::void_t<decltype(std::size(std::declval<const Range&>()))>>
    : std::true_type {};
}  // namespace detail

/// A BatchSource over any range whose elements are batches (`Batch`, `Example<>`,
/// `std::pair<Tensor, Tensor>`) or vectors of samples to stack (`std::vector<Example<>>`, a
/// `torch::data` loader without `Stack<>`; `std::vector<Batch>`, collated with `collate`'s
/// defaults): a `torch::data` data loader, a `std::vector` of batches, ...
template <typename Range>
class RangeSource final : public BatchSource {
 public:
  /// Reads from `range`, which must outlive this source.
  explicit RangeSource(Range& range) : range_(range) {}

  void start_epoch(std::int64_t /*epoch*/) override {
    end_.reset();
    current_.reset();
    current_.emplace(std::begin(range_));
    end_.emplace(std::end(range_));
  }

  bool next(Batch& batch) override {
    if (!current_ || *current_ == *end_) return false;
    batch = detail::to_batch(**current_);
    ++*current_;
    return true;
  }

  /// The range's size when `std::size` knows it (a std::vector of batches), else unknown (a
  /// torch::data loader).
  std::optional<std::int64_t> size() const override {
    if constexpr (detail::HasSize<Range>::value) {
      return static_cast<std::int64_t>(std::size(range_));
    } else {
      return std::nullopt;
    }
  }

 private:
  Range& range_;
  std::optional<decltype(std::begin(std::declval<Range&>()))> current_;
  std::optional<decltype(std::end(std::declval<Range&>()))> end_;
};

}  // namespace torchbus
