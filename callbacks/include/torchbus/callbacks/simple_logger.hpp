#pragma once

/// \file
/// SimpleLogger: logs named tensors, the learning rate and the step time through the torchbus
/// logger every few optimizer steps.

#include <torch/arg.h>
#include <torchbus/callback.hpp>
#include <torchbus/callbacks/logged_values.hpp>
#include <torchbus/tensor_names.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace torchbus {

/// What a SimpleLogger logs, e.g.
/// `SimpleLoggerOptions().step_freq(10).tensors_to_log({"step_loss"})`.
struct SimpleLoggerOptions {
  /// The callback's name, unique in a trainer: its state's key in checkpoints (give each
  /// instance of a run its own).
  TORCH_ARG(std::string, name) = "simple_logger";
  /// Log at every StepEnd where `state.step % step_freq == 0` (>= 1).
  TORCH_ARG(std::int64_t, step_freq) = 50;
  /// Names of the tensors to log at StepEnd (at least one): the default is the step's loss
  /// (State::step_loss()), other names are tensors of the store (find_step_tensor).
  TORCH_ARG(std::vector<std::string>,
            tensors_to_log) = std::vector<std::string>{std::string(tensor_names::kStepLoss)};
  /// Log the learning rate of the optimizer's first parameter group.
  TORCH_ARG(bool, log_lr) = true;
  /// Log the mean wall time per step since the previous logged step.
  TORCH_ARG(bool, log_step_time) = true;
  /// Significant digits of logged numbers (1 to 17; 17 reproduces a double exactly).
  TORCH_ARG(int, precision) = 6;

 public:
  /// Throws ConfigError naming the first option that is out of range.
  void validate() const;
};

/// Logs, every `step_freq` optimizer steps, one info line through `torchbus::logger()`:
/// `step 50 epoch 0: step_loss=0.693147 lr=0.1 step_time=1.25ms`. One-element tensors are logged as
/// numbers, others as shape and statistics (`logits=[16, 3] mean=.. std=.. min=.. max=..`). Reads
/// tensors (a host sync) only at the steps it logs. Role::Logger, after Role::Metrics.
class SimpleLogger : public Callback {
 public:
  /// A logger named by its options; throws ConfigError for invalid options.
  explicit SimpleLogger(SimpleLoggerOptions options = {});

  /// The options it was built with.
  const SimpleLoggerOptions& options() const noexcept { return options_; }

  /// Starts timing from the action's first epoch.
  void on_action_start(State& state) override;
  /// Remembers where step timing starts (the first epoch of an action, also after a resume).
  void on_epoch_start(State& state) override;
  /// Logs the tensors when `state.step` is a multiple of `step_freq`.
  void on_step_end(State& state) override;

 private:
  using Clock = std::chrono::steady_clock;

  void log_step(State& state);
  void append_tensor(std::string& line, const std::string& name, State& state);
  void append_lr(std::string& line, State& state);

  SimpleLoggerOptions options_;
  Clock::time_point mark_time_;  // when timing last restarted
  std::int64_t mark_step_ = -1;  // state.step then (-1: not yet in this action)
  std::vector<bool> warned_;     // per tensor name: missing or unusable was reported
  StepLearningRate lr_;          // the learning rate of the step a line is written for
  std::string line_;             // reused message buffer
};

}  // namespace torchbus
