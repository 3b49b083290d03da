#pragma once

/// \file
/// Timer: step time (raw and exponential moving average), throughput in samples/s, epoch time,
/// and a time limit that stops the run at a step boundary.

#include <torch/arg.h>
#include <torchbus/callback.hpp>
#include <torchbus/tensor_names.hpp>

#include <cstdint>
#include <functional>
#include <string>

namespace torchbus {

/// What Timer measures and when it stops, e.g. `TimerOptions().time_limit(3600).step_freq(50)`.
struct TimerOptions {
  /// The callback's name, unique in a trainer: its state's key in checkpoints (give each
  /// instance of a run its own).
  TORCH_ARG(std::string, name) = "timer";
  /// Stop the run (at the next step boundary) once this many seconds have passed inside fit() and
  /// evaluate() calls, counting time restored from a checkpoint (0: no limit).
  TORCH_ARG(double, time_limit) = 0.0;
  /// Weight of the old value in the moving averages: ema = decay * ema + (1 - decay) * new, in
  /// [0, 1) (0: no averaging).
  TORCH_ARG(double, ema_decay) = 0.9;
  /// Record the step metrics every n-th optimizer step (>= 1).
  TORCH_ARG(std::int64_t, step_freq) = 1;
  /// Tensor whose size(0) is a batch's number of samples ("" or absent: no throughput): by default
  /// State::batch_target(), else a tensor the train step stores (find_step_tensor).
  TORCH_ARG(std::string, samples_from) = std::string(tensor_names::kTarget);
  /// Prefix of the recorded metrics: "<prefix>step_time", "<prefix>step_time_ema",
  /// "<prefix>samples_per_sec", "<prefix>epoch_time".
  TORCH_ARG(std::string, prefix) = "";
  /// Time source in seconds (default: std::chrono::steady_clock); for tests and custom clocks.
  TORCH_ARG(std::function<double()>, clock) = nullptr;

 public:
  /// Throws ConfigError naming the first option that is out of range.
  void validate() const;
};

/// Measures wall-clock time between StepStart and StepEnd without synchronizing the device (on a
/// GPU a single step's time is when the host finished queuing it; the moving average converges to
/// the real step time once the queue is full). Records per step: "step_time" (s), "step_time_ema"
/// (s) and "samples_per_sec" (EMA of samples per step / EMA of step time); per epoch:
/// "epoch_time" (s). With a time limit, requests a stop at StepEnd or EpochEnd once the limit has
/// passed. Never syncs. Role::Metrics.
class Timer : public Callback {
 public:
  /// A Timer named by its options; throws ConfigError for invalid options.
  explicit Timer(TimerOptions options = {});

  /// The options it was built with.
  const TimerOptions& options() const noexcept { return options_; }
  /// Seconds spent in fit() and evaluate() calls so far, restored time included.
  double elapsed() const;
  /// Moving average of the step time in seconds (0 before the first step).
  double step_time_ema() const noexcept { return step_time_ema_; }
  /// Samples per second from the moving averages (0 when unknown).
  double samples_per_second() const noexcept;
  /// Steps measured so far.
  std::int64_t steps_timed() const noexcept { return steps_timed_; }

  /// Starts the action's clock.
  void on_action_start(State& state) override;
  /// Starts the epoch's clock.
  void on_epoch_start(State& state) override;
  /// Starts the step's clock.
  void on_step_start(State& state) override;
  /// Counts the batch's samples.
  void on_batch_end(State& state) override;
  /// Records the step's time and throughput; checks the time limit.
  void on_step_end(State& state) override;
  /// Records the epoch's time; checks the time limit.
  void on_epoch_end(State& state) override;
  /// Adds the action's time to the total.
  void on_action_end(State& state) override;

  /// Writes the elapsed time and the moving averages.
  void save_state(torch::serialize::OutputArchive& archive) const override;
  /// Its state is copies: a background checkpoint serializes it off the training thread.
  bool state_is_snapshot() const override { return true; }
  /// Restores what `save_state` wrote.
  void load_state(torch::serialize::InputArchive& archive) override;

 private:
  double now() const;
  void check_limit(State& state);

  TimerOptions options_;
  double elapsed_before_ = 0.0;  // seconds of finished actions and restored checkpoints
  double action_start_ = 0.0;
  bool in_action_ = false;
  double epoch_start_ = 0.0;
  double step_start_ = 0.0;
  std::int64_t step_samples_ = 0;
  bool samples_known_ = false;
  double step_time_ema_ = 0.0;
  double samples_ema_ = 0.0;
  std::int64_t steps_timed_ = 0;
  bool warned_samples_ = false;
};

}  // namespace torchbus
