#include <torch/torch.h>
#include <torchbus/error.hpp>
#include <torchbus/loss_scaler.hpp>

#include <algorithm>
#include <cmath>

namespace torchbus {

void LossScalerOptions::validate() const {
  TORCHBUS_CHECK(std::isfinite(init_scale()) && init_scale() > 0.0, ConfigError,
                 "LossScalerOptions::init_scale must be a positive finite number, got ",
                 init_scale());
  TORCHBUS_CHECK(std::isfinite(growth_factor()) && growth_factor() > 1.0, ConfigError,
                 "LossScalerOptions::growth_factor must be > 1, got ", growth_factor());
  TORCHBUS_CHECK(backoff_factor() > 0.0 && backoff_factor() < 1.0, ConfigError,
                 "LossScalerOptions::backoff_factor must be in (0, 1), got ", backoff_factor());
  TORCHBUS_CHECK(growth_interval() >= 1, ConfigError,
                 "LossScalerOptions::growth_interval must be >= 1, got ", growth_interval());
}

LossScaler::LossScaler(LossScalerOptions options) : options_(options) {
  options_.validate();
  scale_ = options_.init_scale();
}

at::Tensor LossScaler::scale(const at::Tensor& loss) const {
  return loss * scale_;
}

bool LossScaler::unscale(const std::vector<at::Tensor>& parameters) {
  std::vector<at::Tensor> gradients;
  for (const auto& parameter : parameters) {
    if (parameter.grad().defined()) gradients.push_back(parameter.grad());
  }
  if (gradients.empty()) return false;
  const auto device = gradients.front().device();
  const bool one_cuda_device = device.is_cuda() && std::all_of(gradients.begin(), gradients.end(),
                                                               [&](const at::Tensor& gradient) {
                                                                 return gradient.device() == device;
                                                               });
  if (one_cuda_device) {
    // One fused kernel for all gradients, as GradScaler (CUDA only in LibTorch 1.13).
    auto found_inf = torch::zeros({1}, torch::TensorOptions(device).dtype(torch::kFloat));
    const auto inverse = torch::full({1}, 1.0 / scale_, found_inf.options());
    at::_amp_foreach_non_finite_check_and_unscale_(gradients, found_inf, inverse);
    return found_inf.item<float>() != 0.0F;
  }
  auto all_finite = torch::ones({}, torch::kBool);
  for (auto& gradient : gradients) {
    gradient.mul_(1.0 / scale_);
    all_finite = all_finite.logical_and(torch::isfinite(gradient).all().cpu());
  }
  return !all_finite.item<bool>();
}

void LossScaler::update(bool found_inf) {
  if (found_inf) {
    scale_ *= options_.backoff_factor();
    growth_tracker_ = 0;
    return;
  }
  if (++growth_tracker_ == options_.growth_interval()) {
    const auto grown = scale_ * options_.growth_factor();
    if (std::isfinite(grown)) scale_ = grown;  // as GradScaler: never grow to inf
    growth_tracker_ = 0;
  }
}

void LossScaler::restore(double scale, std::int64_t growth_tracker) {
  TORCHBUS_CHECK(std::isfinite(scale) && scale > 0.0 && growth_tracker >= 0 &&
                     growth_tracker < options_.growth_interval(),
                 CheckpointError, "a saved loss scale must be positive and finite with a growth ",
                 "tracker in [0, ", options_.growth_interval(), "), got scale ", scale,
                 " and tracker ", growth_tracker);
  scale_ = scale;
  growth_tracker_ = growth_tracker;
}

}  // namespace torchbus
