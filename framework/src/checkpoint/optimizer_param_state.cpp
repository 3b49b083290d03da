#include "checkpoint/optimizer_param_state.hpp"

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torchbus/checkpoint.hpp>
#include <torchbus/error.hpp>
#include <torchbus/optimizer_state.hpp>

#include "interop/libtorch_compat.hpp"

namespace torchbus::detail {

using namespace torch::optim;

std::optional<ParamStateView> view_of(OptimizerParamState& state) {
  if (auto* sgd = dynamic_cast<SGDParamState*>(&state)) {
    return ParamStateView{{&sgd->momentum_buffer()}, std::nullopt};
  }
  if (auto* adam = dynamic_cast<AdamParamState*>(&state)) {
    return ParamStateView{{&adam->exp_avg(), &adam->exp_avg_sq(), &adam->max_exp_avg_sq()},
                          adam->step()};
  }
  if (auto* adamw = dynamic_cast<AdamWParamState*>(&state)) {
    return ParamStateView{{&adamw->exp_avg(), &adamw->exp_avg_sq(), &adamw->max_exp_avg_sq()},
                          adamw->step()};
  }
  if (auto* adagrad = dynamic_cast<AdagradParamState*>(&state)) {
    return ParamStateView{{&adagrad->sum()}, adagrad->step()};
  }
  if (auto* rmsprop = dynamic_cast<RMSpropParamState*>(&state)) {
    return ParamStateView{
        {&rmsprop->square_avg(), &rmsprop->momentum_buffer(), &rmsprop->grad_avg()},
        rmsprop->step()};
  }
  return std::nullopt;
}

std::string param_state_mismatch(Optimizer& optimizer) {
  std::size_t index = 0;  // of the parameter, counted over the groups
  for (auto& group : optimizer.param_groups()) {
    for (const auto& parameter : group.params()) {
      auto* state = optimizer_state_of(optimizer, parameter);
      const auto view = state == nullptr ? std::nullopt : view_of(*state);
      if (view && view->step && (*view->step < 0 || *view->step > kMaxCheckpointCount)) {
        return concat("parameter ", index, " has step ", *view->step, " (expected 0 to 2^62)");
      }
      for (const auto* tensor : view ? view->tensors : std::vector<at::Tensor*>{}) {
        if (tensor->defined() && (tensor->sizes() != parameter.sizes() ||
                                  tensor->scalar_type() != parameter.scalar_type())) {
          return concat("parameter ", index, " (", parameter.sizes(), " ", parameter.scalar_type(),
                        ") has a state tensor of ", tensor->sizes(), " ", tensor->scalar_type());
        }
      }
      ++index;
    }
  }
  return "";
}

}  // namespace torchbus::detail
