#include <spdlog/fmt/fmt.h>
#include <spdlog/fmt/ranges.h>  // fmt::join (in fmt/format.h before fmt 11)
#include <spdlog/spdlog.h>
#include <torch/optim/optimizer.h>
#include <torchbus/batch.hpp>
#include <torchbus/callback.hpp>
#include <torchbus/callbacks/logged_values.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/state.hpp>
#include <torchbus/tensor_names.hpp>

#include <ATen/core/Tensor.h>

namespace torchbus {
namespace {

/// Why `tensor` (present) is not one real number: undefined, complex, empty or not a scalar.
std::string what_is_wrong(const std::string& name, const at::Tensor& tensor) {
  if (!tensor.defined()) return fmt::format("tensor '{}' is undefined", name);
  const char* kind = tensor.is_complex()   ? "complex"
                     : tensor.numel() == 0 ? "empty"
                                           : "not a scalar";
  return fmt::format("tensor '{}' of shape [{}] is {}", name, fmt::join(tensor.sizes(), ", "),
                     kind);
}

/// The typed value of `state` that `name` stands for, or null when `name` is a tensor of the store.
const at::Tensor* typed_value(const State& state, std::string_view name) noexcept {
  if (name == tensor_names::kLoss) return &state.batch_loss();
  if (name == tensor_names::kStepLoss) return &state.step_loss();
  if (name == tensor_names::kOutput) return &state.batch_output();
  if (name == tensor_names::kTarget) return &state.batch_target();
  return nullptr;
}

}  // namespace

const at::Tensor* find_step_tensor(const State& state, std::string_view name) noexcept {
  if (const at::Tensor* typed = typed_value(state, name)) return typed->defined() ? typed : nullptr;
  if (const at::Tensor* stored = state.tensors.find(name)) return stored;
  const Batch* batch = state.batch();
  return batch != nullptr && batch->has(name) ? &batch->get(name) : nullptr;
}

std::vector<std::string> step_tensor_names(const State& state) {
  std::vector<std::string> names;
  for (const auto name : {tensor_names::kLoss, tensor_names::kStepLoss, tensor_names::kOutput,
                          tensor_names::kTarget}) {
    if (find_step_tensor(state, name) != nullptr) names.emplace_back(name);
  }
  for (auto& name : state.tensors.names()) {
    if (typed_value(state, name) == nullptr) names.push_back(std::move(name));
  }
  if (const Batch* batch = state.batch()) {
    const auto add_field = [&](std::string_view name) {
      if (typed_value(state, name) == nullptr && !state.tensors.contains(name)) {
        names.emplace_back(name);
      }
    };
    if (batch->data.defined()) add_field("data");
    for (const auto& [name, tensor] : batch->tensors()) add_field(name);
  }
  return names;
}

std::optional<double> learning_rate_or_warn_once(const State& state, bool& warned,
                                                 const WarningSource& source,
                                                 std::string_view consequence) {
  std::string problem;
  if (state.optimizer == nullptr || state.optimizer->param_groups().empty()) {
    problem = "the optimizer has no parameter group";
  } else {
    try {
      return state.optimizer->param_groups()[0].options().get_lr();
    } catch (const std::exception& error) {
      problem = detail::first_line(error);
    }
  }
  if (!warned) {
    warned = true;
    logger()->warn("{} '{}': cannot read the learning rate ({}); {} (reported once)", source.kind,
                   source.callback.name(), problem, consequence);
  }
  return std::nullopt;
}

bool names_optimizer_phase(const State& state, std::string_view phase) noexcept {
  return phase.empty() ? state.optimizer_phase == 0 : state.optimizer_phase_name == phase;
}

std::optional<double> StepLearningRate::read(const State& state, const WarningSource& source,
                                             std::string_view consequence) {
  if (const auto rate = state.step_learning_rate()) return rate;
  if (warned_) return std::nullopt;  // it could not be read: reported once, not tried again
  return learning_rate_or_warn_once(state, warned_, source, consequence);
}

void warn_tensor_not_logged(const State& state, const std::string& name, const at::Tensor* tensor,
                            const WarningSource& source, std::string_view consequence) {
  const std::string problem =
      tensor == nullptr ? fmt::format("no tensor named '{}' at step {} (present: {})", name,
                                      state.step, detail::join_or_none(step_tensor_names(state)))
                        : fmt::format("{} at step {}", what_is_wrong(name, *tensor), state.step);
  logger()->warn("{} '{}': {}; {} (reported once)", source.kind, source.callback.name(), problem,
                 consequence);
}

}  // namespace torchbus
