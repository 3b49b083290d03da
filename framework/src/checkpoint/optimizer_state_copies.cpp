#include "checkpoint/optimizer_state_copies.hpp"

#include "checkpoint/optimizer_param_state.hpp"

namespace torchbus::detail {

OptimizerStateCopies::OptimizerStateCopies(torch::optim::Optimizer& optimizer,
                                           TensorCopyPool& copies) {
  std::vector<at::Tensor*> fields;
  for (auto& entry : optimizer.state()) {
    const auto view = view_of(*entry.second);
    if (!view) {
      copied_ = false;
      return;
    }
    for (auto* tensor : view->tensors) {
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
