#pragma once

// The toy problem the small examples train on: 3 Gaussian classes in 2-D, and a tiny MLP.

#include <torch/torch.h>
#include <torchbus/batch_source.hpp>

#include <vector>

namespace toy {

/// `count` batches of 16 points from 3 well-separated classes.
inline std::vector<torchbus::Batch> batches(int count = 32) {
  torch::manual_seed(0);
  const auto centres = torch::tensor({{2.0f, 0.0f}, {-2.0f, 2.0f}, {-2.0f, -2.0f}});
  std::vector<torchbus::Batch> out;
  for (int i = 0; i < count; ++i) {
    const auto target = torch::randint(3, {16}, torch::kLong);
    out.emplace_back(centres.index_select(0, target) + torch::randn({16, 2}) * 0.5, target);
  }
  return out;
}

/// A 2-16-3 MLP.
inline torch::nn::Sequential model() {
  return torch::nn::Sequential(torch::nn::Linear(2, 16), torch::nn::ReLU(),
                               torch::nn::Linear(16, 3));
}

/// Cross-entropy, the loss of every example.
inline at::Tensor loss(const at::Tensor& output, const at::Tensor& target) {
  return torch::nn::functional::cross_entropy(output, target);
}

}  // namespace toy
