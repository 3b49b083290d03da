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

nn::Sequential make_cnn(std::int64_t height, std::int64_t width, std::int64_t classes) {
  const auto pooled = (height / 4) * (width / 4);
  return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 8, 3).padding(1)), nn::ReLU(),
                        nn::MaxPool2d(2), nn::Conv2d(nn::Conv2dOptions(8, 16, 3).padding(1)),
                        nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
                        nn::Linear(16 * pooled, classes));
}

}  // namespace train
