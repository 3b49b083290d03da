#include "model.hpp"

namespace train {

namespace nn = torch::nn;

nn::Sequential make_mlp(std::int64_t inputs, const std::vector<std::int64_t>& hidden,
                        std::int64_t classes) {
  nn::Sequential model{nn::Flatten()};
  auto width = inputs;
  for (const auto next : hidden) {
    model->push_back(nn::Linear(width, next));
    model->push_back(nn::ReLU());
    width = next;
  }
  model->push_back(nn::Linear(width, classes));
  return model;
}

namespace {
constexpr std::int64_t kConv1Channels = 8;
constexpr std::int64_t kConv2Channels = 16;

double linear_parameters(double inputs, double outputs) {
  return inputs * outputs + outputs;
}
}  // namespace

double mlp_parameter_count(std::int64_t inputs, const std::vector<std::int64_t>& hidden,
                           std::int64_t classes) {
  double count = 0;
  double width = static_cast<double>(inputs);
  for (const auto next : hidden) {
    count += linear_parameters(width, static_cast<double>(next));
    width = static_cast<double>(next);
  }
  return count + linear_parameters(width, static_cast<double>(classes));
}

double cnn_parameter_count(std::int64_t height, std::int64_t width, std::int64_t classes) {
  const double pooled = static_cast<double>((height / 4) * (width / 4));
  return static_cast<double>(kConv1Channels * 9 + kConv1Channels) +
         static_cast<double>(kConv2Channels * kConv1Channels * 9 + kConv2Channels) +
         linear_parameters(kConv2Channels * pooled, static_cast<double>(classes));
}

nn::Sequential make_cnn(std::int64_t height, std::int64_t width, std::int64_t classes) {
  const auto pooled = (height / 4) * (width / 4);
  return nn::Sequential(
      nn::Conv2d(nn::Conv2dOptions(1, kConv1Channels, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
      nn::Conv2d(nn::Conv2dOptions(kConv1Channels, kConv2Channels, 3).padding(1)), nn::ReLU(),
      nn::MaxPool2d(2), nn::Flatten(), nn::Linear(kConv2Channels * pooled, classes));
}

}  // namespace train
