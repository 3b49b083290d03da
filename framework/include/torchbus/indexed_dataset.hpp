#pragma once

/// \file
/// IndexedDataset: a torch::data dataset whose samples carry their index, so that predictions
/// gathered from several ranks are put back in the input's order (PredictionWriter).

#include <torch/data/datasets/base.h>
#include <torch/types.h>
#include <torchbus/batch.hpp>

#include <cstdint>
#include <string>
#include <utility>

namespace torchbus {

/// Wraps a `torch::data` dataset: sample i is the dataset's sample i as a Batch (its data, target
/// and, for a dataset of Batch samples, its named fields) with the field `field` (default
/// "index") set to `i` as a 0-dimensional int64 tensor; `collate` stacks the indices to [N].
template <typename Dataset>
class IndexedDataset
    : public torch::data::datasets::Dataset<IndexedDataset<Dataset>, torchbus::Batch> {
 public:
  /// Wraps `dataset`, naming the index field `field`.
  explicit IndexedDataset(Dataset dataset, std::string field = "index")
      : dataset_(std::move(dataset)), field_(std::move(field)) {}

  /// Sample `index` of the dataset, with its index.
  torchbus::Batch get(std::size_t index) override {
    torchbus::Batch sample(dataset_.get(index));
    sample.set(field_, torch::tensor(static_cast<std::int64_t>(index), torch::kLong));
    return sample;
  }
  /// The dataset's size.
  torch::optional<std::size_t> size() const override { return dataset_.size(); }

 private:
  Dataset dataset_;
  std::string field_;
};

}  // namespace torchbus
