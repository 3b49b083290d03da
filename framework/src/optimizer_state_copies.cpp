#include "optimizer_state_copies.hpp"

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <optional>

namespace torchbus::detail {
namespace {

using namespace torch::optim;

/// The tensors of a known optimizer's per-parameter state; nothing for an unknown type.
std::optional<std::vector<at::Tensor*>> state_tensors(OptimizerParamState& state) {
  if (auto* sgd = dynamic_cast<SGDParamState*>(&state)) {
    return std::vector<at::Tensor*>{&sgd->momentum_buffer()};
  }
  if (auto* adam = dynamic_cast<AdamParamState*>(&state)) {
    return std::vector<at::Tensor*>{&adam->exp_avg(), &adam->exp_avg_sq(), &adam->max_exp_avg_sq()};
  }
  if (auto* adamw = dynamic_cast<AdamWParamState*>(&state)) {
    return std::vector<at::Tensor*>{&adamw->exp_avg(), &adamw->exp_avg_sq(),
                                    &adamw->max_exp_avg_sq()};
  }
  if (auto* adagrad = dynamic_cast<AdagradParamState*>(&state)) {
    return std::vector<at::Tensor*>{&adagrad->sum()};
  }
  if (auto* rmsprop = dynamic_cast<RMSpropParamState*>(&state)) {
    return std::vector<at::Tensor*>{&rmsprop->square_avg(), &rmsprop->momentum_buffer(),
                                    &rmsprop->grad_avg()};
  }
  return std::nullopt;
}

}  // namespace

OptimizerStateCopies::OptimizerStateCopies(Optimizer& optimizer, TensorCopyPool& copies) {
  std::vector<at::Tensor*> fields;
  for (auto& entry : optimizer.state()) {
    auto tensors = state_tensors(*entry.second);
    if (!tensors) {
      copied_ = false;
      return;
    }
    for (auto* tensor : *tensors) {
      if (tensor->defined()) fields.push_back(tensor);
    }
  }
  fields_ = std::move(fields);
  originals_.reserve(fields_.size());
  for (auto* field : fields_) {
    originals_.push_back(*field);
    *field = copies.copy_of(*field);
  }
}

OptimizerStateCopies::~OptimizerStateCopies() {
  for (std::size_t i = 0; i < fields_.size(); ++i) *fields_[i] = std::move(originals_[i]);
}

}  // namespace torchbus::detail
