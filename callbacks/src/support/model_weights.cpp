#include "support/model_weights.hpp"

#include <ATen/core/grad_mode.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torchbus/error.hpp>
#include <torchbus/state.hpp>
#include <torchbus/trainer.hpp>

#include "support/named_optimizer_phase.hpp"

namespace torchbus::detail {

std::vector<at::Tensor> model_weights(torch::nn::Module& model, bool with_buffers) {
  auto weights = model.parameters();
  if (with_buffers) {
    for (const auto& buffer : model.buffers()) weights.push_back(buffer);
  }
  return weights;
}

std::vector<at::Tensor> averaged_weights(const State& state, const std::string& phase,
                                         bool with_buffers, const std::string& owner) {
  if (phase.empty()) {
    TORCHBUS_CHECK(state.model != nullptr, ConfigError, owner, " needs state.model");
    return model_weights(*state.model, with_buffers);
  }
  const auto& named = named_optimizer_phase(state, phase, owner);
  if (named.model()) return model_weights(*named.model(), with_buffers);
  std::vector<at::Tensor> parameters;
  for (const auto& group : named.optimizer()->param_groups()) {
    for (const auto& parameter : group.params()) parameters.push_back(parameter);
  }
  return parameters;
}

std::string weights_mismatch(const std::vector<at::Tensor>& kept,
                             const std::vector<at::Tensor>& weights, const std::string& kept_name) {
  if (kept.size() != weights.size()) {
    return concat(kept_name, " hold ", kept.size(), " tensors, the model has ", weights.size(),
                  " parameters and buffers");
  }
  for (std::size_t i = 0; i < kept.size(); ++i) {
    if (kept[i].sizes() != weights[i].sizes()) {
      return concat("tensor ", i, " of ", kept_name, " has shape ", kept[i].sizes(),
                    ", the model's has ", weights[i].sizes());
    }
    if (kept[i].scalar_type() != weights[i].scalar_type()) {
      return concat("tensor ", i, " of ", kept_name, " is ", kept[i].scalar_type(),
                    ", the model's is ", weights[i].scalar_type());
    }
  }
  return "";
}

Placement after_final_save(const std::string& owner, std::string_view what) {
  return torchbus::after(Role::Checkpoint).after(Role::Report).named(concat(owner, ":", what));
}

void copy_weights(const std::vector<at::Tensor>& from, const std::vector<at::Tensor>& to) {
  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < from.size(); ++i) to[i].detach().copy_(from[i]);
}

c10::List<at::Tensor> copies_of(const std::vector<at::Tensor>& weights) {
  c10::List<at::Tensor> copies;
  copies.reserve(weights.size());
  for (const auto& weight : weights) copies.push_back(weight.detach().clone());
  return copies;
}

}  // namespace torchbus::detail
