#pragma once

/// \file
/// TerminateOnNaN: stops the run before a non-finite loss (or tensor, or gradient) updates the
/// weights.

#include <ATen/core/Tensor.h>
#include <torch/arg.h>
#include <torchbus/callback.hpp>
#include <torchbus/tensor_names.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace torchbus {

/// What TerminateOnNaN checks, e.g. `TerminateOnNaNOptions().tensors({"loss", "output"})`.
struct TerminateOnNaNOptions {
  /// The callback's name, unique in a trainer: its state's key in checkpoints (give each
  /// instance of a run its own).
  TORCH_ARG(std::string, name) = "terminate_on_nan";
  /// Names of batch tensors checked after every backward: the names of tensor_names.hpp are the
  /// batch's loss, output and target (State::batch_loss(), ...), any other a tensor the train step
  /// stores (find_step_tensor); each must be there at AfterBackward.
  TORCH_ARG(std::vector<std::string>, tensors) = {std::string(tensor_names::kLoss)};
  /// Also check every parameter's gradient before the optimizer step.
  TORCH_ARG(bool, check_gradients) = false;
};

/// Checks the configured tensors of every batch (at AfterBackward, no sync) and, optionally, the
/// gradients; at BeforeOptimizerStep reads one flag for the whole step (one host sync per step).
/// Dense CPU tensors of a real type are checked directly in host memory at AfterBackward (no tensor
/// op, nothing left to read), so with the default (the batch loss) on the CPU a step costs no sync.
/// A non-finite value skips that step's update (`state.skip_update`), so the weights stay as they
/// were before the step, and requests a stop naming the tensor, batch, step and epoch.
/// Role::Monitor, after Role::Metrics and before Role::Scheduler (a NaN stops the run before a
/// scheduler reads it).
class TerminateOnNaN : public Callback {
 public:
  /// A TerminateOnNaN named by its options.
  explicit TerminateOnNaN(TerminateOnNaNOptions options = {});

  /// The options it was built with.
  const TerminateOnNaNOptions& options() const noexcept { return options_; }
  /// Whether it has stopped a run (kept in checkpoints).
  bool triggered() const noexcept { return !reason_.empty(); }
  /// The stop reason it gave, empty when it has not triggered.
  const std::string& reason() const noexcept { return reason_; }

  /// Caches the model's parameters (when checking gradients).
  void on_action_start(State& state) override;
  /// Forgets the flags of an interrupted step.
  void on_step_start(State& state) override;
  /// Records, without a sync, whether each configured tensor of the batch is finite.
  void on_after_backward(State& state) override;
  /// Reads the step's flags (one sync); on a non-finite value skips the update and stops.
  void on_before_optimizer_step(State& state) override;

  /// Writes whether it triggered and why.
  void save_state(torch::serialize::OutputArchive& archive) const override;
  /// Its state is copies: a background checkpoint serializes it off the training thread.
  bool state_is_snapshot() const override { return true; }
  /// Restores what `save_state` wrote.
  void load_state(torch::serialize::InputArchive& archive) override;

 private:
  struct Check {
    std::size_t tensor;         // index into options_.tensors()
    std::int64_t global_batch;  // the batch it was computed on
  };
  TerminateOnNaNOptions options_;
  std::vector<at::Tensor> flags_;  // one bool tensor per check of the current step
  std::vector<Check> checks_;      // what each flag is about
  std::vector<at::Tensor> parameters_;
  std::vector<at::Tensor> gradient_flags_;  // reused per step
  std::string reason_;
};

}  // namespace torchbus
