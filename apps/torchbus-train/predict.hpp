#pragma once

// --predict: every sample of the data through the given weights, OUT/predictions.csv in the data's
// order (on one rank or several).

#include "dataset.hpp"
#include "flags.hpp"

#include <torch/torch.h>
#include <torchbus/distributed.hpp>

#include <memory>

namespace train {

/// Predicts every sample of `data` with `model` on the ranks of `group` (each its shard); rank 0
/// writes OUT/predictions.csv atomically: index, class, probability_0..C-1 and, when the data has
/// labels, label. A stop signal ends it at the next batch with 128+N, writing nothing. Returns the
/// exit code.
int predict(const Flags& flags, const torch::nn::Sequential& model, const HeldOut& data,
            const std::shared_ptr<torchbus::ProcessGroup>& group, const c10::Device& device);

}  // namespace train
