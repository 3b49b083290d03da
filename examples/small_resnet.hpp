#pragma once

/// \file
/// A small ResNet for 32x32 images: ResNet-18's shape at a quarter of its width. The distributed
/// example trains it (`--model resnet`) and the loop benchmark measures it;
/// benchmarks/python_loop.py's `ResNet` is the same module in Python (same layers in the same
/// order, so the same initialisation under the same seed).

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

/// A ResNet basic block: two 3x3 convolutions with batch norm, and a shortcut (a strided 1x1
/// convolution with batch norm where the shape changes).
struct BasicBlockImpl : torch::nn::Module {
  BasicBlockImpl(std::int64_t in, std::int64_t out, std::int64_t stride)
      : conv1(register_module(
            "conv1",
            torch::nn::Conv2d(
                torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)))),
        bn1(register_module("bn1", torch::nn::BatchNorm2d(out))),
        conv2(register_module(
            "conv2",
            torch::nn::Conv2d(torch::nn::Conv2dOptions(out, out, 3).padding(1).bias(false)))),
        bn2(register_module("bn2", torch::nn::BatchNorm2d(out))) {
    if (stride != 1 || in != out) {
      shortcut_conv = register_module(
          "shortcut_conv",
          torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)));
      shortcut_bn = register_module("shortcut_bn", torch::nn::BatchNorm2d(out));
    }
  }
  /// relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)).
  at::Tensor forward(const at::Tensor& input) {
    auto x = torch::relu(bn1->forward(conv1->forward(input)));
    x = bn2->forward(conv2->forward(x));
    return torch::relu(
        x + (shortcut_conv ? shortcut_bn->forward(shortcut_conv->forward(input)) : input));
  }
  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::Conv2d conv2;
  torch::nn::BatchNorm2d bn2;
  torch::nn::Conv2d shortcut_conv{nullptr};
  torch::nn::BatchNorm2d shortcut_bn{nullptr};
};
TORCH_MODULE(BasicBlock);

/// ResNet-18's shape for 3x32x32 images at widths 16, 32, 64, 128: a 3x3 stem, four stages of two
/// basic blocks (the last three halving the resolution), global average pooling and a linear
/// classifier.
struct SmallResnetImpl : torch::nn::Module {
  explicit SmallResnetImpl(std::int64_t classes)
      : stem(register_module(
            "stem",
            torch::nn::Conv2d(torch::nn::Conv2dOptions(3, kWidths[0], 3).padding(1).bias(false)))),
        stem_bn(register_module("stem_bn", torch::nn::BatchNorm2d(kWidths[0]))),
        fc(register_module("fc", torch::nn::Linear(kWidths[3], classes))) {
    std::int64_t in = kWidths[0];
    for (std::size_t stage = 0; stage < 4; ++stage) {
      for (int block = 0; block < 2; ++block) {
        const std::int64_t stride = stage > 0 && block == 0 ? 2 : 1;
        blocks.push_back(
            register_module("block" + std::to_string(stage) + "_" + std::to_string(block),
                            BasicBlock(in, kWidths[stage], stride)));
        in = kWidths[stage];
      }
    }
  }
  /// Class scores, N x classes, of N x 3 x 32 x 32 images.
  at::Tensor forward(const at::Tensor& input) {
    auto x = torch::relu(stem_bn->forward(stem->forward(input)));
    for (auto& block : blocks) x = block->forward(x);
    return fc->forward(torch::flatten(torch::adaptive_avg_pool2d(x, {1, 1}), 1));
  }
  static constexpr std::int64_t kWidths[4] = {16, 32, 64, 128};
  torch::nn::Conv2d stem;
  torch::nn::BatchNorm2d stem_bn;
  std::vector<BasicBlock> blocks;
  torch::nn::Linear fc;
};
TORCH_MODULE(SmallResnet);
