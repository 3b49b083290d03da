#pragma once

// torchbus-train's models: an MLP with configurable widths, a small CNN for images.

#include <torch/torch.h>

#include <string>
#include <vector>

namespace train {

/// An MLP over flattened inputs: Linear+ReLU per hidden width, then a Linear to `classes`.
torch::nn::Sequential make_mlp(std::int64_t inputs, const std::vector<std::int64_t>& hidden,
                               std::int64_t classes);

/// The smallest height and width make_cnn takes: it halves them twice (pooling by 2).
constexpr std::int64_t kCnnMinImageSide = 4;

/// A small CNN for [N, 1, H, W] images (H, W >= kCnnMinImageSide): two conv+ReLU+pool blocks,
/// then a Linear to `classes`.
torch::nn::Sequential make_cnn(std::int64_t height, std::int64_t width, std::int64_t classes);

/// Parameters make_mlp(inputs, hidden, classes) would have, counted without building it.
double mlp_parameter_count(std::int64_t inputs, const std::vector<std::int64_t>& hidden,
                           std::int64_t classes);

/// Parameters make_cnn(height, width, classes) would have, counted without building it.
double cnn_parameter_count(std::int64_t height, std::int64_t width, std::int64_t classes);

}  // namespace train
