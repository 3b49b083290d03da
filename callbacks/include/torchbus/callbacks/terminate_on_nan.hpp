#pragma once

/// \file
/// TerminateOnNaN: stops the run before a non-finite loss (or tensor, or gradient) updates the
/// weights.

#include <ATen/core/Tensor.h>
#include <c10/core/Event.h>
#include <torch/arg.h>
#include <torchbus/callback.hpp>
#include <torchbus/tensor_names.hpp>

#include <cstdint>
#include <deque>
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
/// gradients, and stops the run at a non-finite value, naming the tensor, batch, step and epoch.
/// Each tensor is checked through a probe on its device: a float32 value finite exactly when the
/// tensor is (a one-element tensor's own value, else its elements times zero, summed).
/// - On the CPU the check is exact: dense CPU tensors of a real type are read in host memory at
///   AfterBackward, the others' probes at BeforeOptimizerStep (no sync on the CPU), and the step
///   of a non-finite value has its update skipped (`state.skip_update`): the weights stay as they
///   were before that step.
/// - On a GPU it never waits for the device: the step's probes are copied to page-locked host
///   memory without blocking and read at a later BeforeOptimizerStep, once the copy is done
///   (usually the next step). The run stops one step (or a few) late: that step's update is
///   skipped, the non-finite step's own was applied (and so is in a checkpoint taken in between).
///   Probes still in flight are waited for at every EpochEnd and ActionEnd (one sync each).
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
  /// Records, without a sync, whether each configured tensor of the batch is finite; first forgets
  /// the probes of an earlier step that ended without reading them (cancelled or skipped), so it
  /// needs no StepStart hook.
  void on_after_backward(State& state) override;
  /// Reads the step's probes (on a GPU: those of earlier steps that have reached the host); on a
  /// non-finite value skips the update and stops.
  void on_before_optimizer_step(State& state) override;
  /// Waits for the probes still in flight (a GPU's) and stops on a non-finite one.
  void on_epoch_end(State& state) override;
  /// Waits for the probes still in flight, so a last step's non-finite value is reported.
  void on_action_end(State& state) override;

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
  /// A GPU step's probes on their way to the host.
  struct InFlight {
    at::Tensor host;            // float32, page-locked, filled by a non-blocking copy
    c10::Event copied;          // recorded after the copy on the device's stream
    std::vector<Check> checks;  // what each probe is about
    std::int64_t step, epoch;   // the step they were computed in
  };
  /// Reports the non-finite value `check` found in `step` and requests a stop; `before_update`: at
  /// BeforeOptimizerStep, whose update it skips.
  void report(State& state, const Check& check, std::int64_t step, std::int64_t epoch,
              bool before_update);
  /// Reads the in-flight probes that have reached the host (all of them, waiting, with `wait`);
  /// returns whether one was not finite (then it has reported it).
  bool read_in_flight(State& state, bool wait);
  /// Forgets probes of batches before the current step's window.
  void forget_earlier_steps(const State& state) noexcept;
  /// Sends this step's probes on a device to the host without waiting for them.
  void send_to_host(const at::Tensor& probes, const State& state);

  TerminateOnNaNOptions options_;
  // One float32 per check of the current step, finite exactly when what it checks is all finite.
  std::vector<at::Tensor> probes_;
  std::vector<Check> checks_;  // what each probe is about
  std::vector<at::Tensor> parameters_;
  std::vector<at::Tensor> gradient_probes_;  // reused per step
  std::deque<InFlight> in_flight_;           // a GPU's probes, oldest first
  std::vector<InFlight> spare_;  // read: their page-locked buffers and events are used again
  std::string reason_;
};

}  // namespace torchbus
