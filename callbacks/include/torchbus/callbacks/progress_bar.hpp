#pragma once

/// \file
/// ProgressBar: a live progress bar per epoch on a terminal, periodic log lines elsewhere.

#include <torch/arg.h>
#include <torchbus/callback.hpp>

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace torchbus {

/// How a ProgressBar writes.
enum class ProgressBarMode : std::uint8_t {
  Auto,   ///< `Bar` when stdout is a terminal (and no stream was given), else `Plain`
  Bar,    ///< a bar redrawn in place (carriage return) on the output stream
  Plain,  ///< one line through `torchbus::logger()` every `refresh_every_batches` batches
};

/// A stream a ProgressBar draws on (an alias so that TORCH_ARG's `const T&` is a const pointer).
using ProgressStream = std::ostream*;

/// What a ProgressBar shows, e.g. `ProgressBarOptions().metrics_to_show({"val_loss"})`.
struct ProgressBarOptions {
  /// The callback's name, unique in a trainer: its state's key in checkpoints (give each
  /// instance of a run its own).
  TORCH_ARG(std::string, name) = "progress_bar";
  /// Bar or plain lines (Auto: bar only on a terminal).
  TORCH_ARG(ProgressBarMode, mode) = ProgressBarMode::Auto;
  /// Where the bar is drawn (nullptr: std::cout). A stream given here is used as a terminal.
  TORCH_ARG(ProgressStream, stream) = nullptr;
  /// Bar mode: redraws per second at most (> 0).
  TORCH_ARG(double, refresh_rate) = 10.0;
  /// Plain mode: a line every this many batches of an epoch (>= 1), and one at its end.
  TORCH_ARG(std::int64_t, refresh_every_batches) = 50;
  /// Batches per epoch, if known (none: learned from the first complete epoch).
  TORCH_ARG(std::optional<std::int64_t>, total_batches) = std::nullopt;
  /// Metrics (latest value in the metric history, else a one-element tensor of the store) shown
  /// after the loss.
  TORCH_ARG(std::vector<std::string>, metrics_to_show) = {};
  /// Characters of the bar itself (>= 1).
  TORCH_ARG(int, bar_width) = 30;

 public:
  /// Throws ConfigError naming the first option that is out of range.
  void validate() const;
};

/// Shows training progress per epoch: batches done (of the total when known), rate, ETA (when the
/// total is known), the latest step loss and `metrics_to_show`. Runs on rank 0 only by default.
/// Reads the loss and metrics (a host sync) only when it draws. Role::Logger, after Role::Metrics.
class ProgressBar : public Callback {
 public:
  /// A progress bar named by its options; throws ConfigError for invalid options.
  explicit ProgressBar(ProgressBarOptions options = {});

  /// The options it was built with.
  const ProgressBarOptions& options() const noexcept { return options_; }
  /// The mode in use: `Bar` or `Plain` (Auto is resolved at construction).
  ProgressBarMode mode() const noexcept { return mode_; }

  /// Forgets the epoch length learned in an earlier action.
  void on_action_start(State& state) override;
  /// Starts the epoch's clock and counter.
  void on_epoch_start(State& state) override;
  /// Redraws the bar or writes a plain line when due.
  void on_batch_end(State& state) override;
  /// Draws the epoch's final state (bar: ends its line).
  void on_epoch_end(State& state) override;

 private:
  using Clock = std::chrono::steady_clock;

  void format(State& state, std::int64_t done, bool final);
  void draw_bar();
  void append_value(const char* name, double value);

  ProgressBarOptions options_;
  ProgressBarMode mode_;
  std::ostream* out_;
  Clock::duration redraw_interval_;
  Clock::time_point epoch_start_;
  Clock::time_point next_draw_;
  Clock::time_point last_batch_end_;
  std::optional<std::int64_t> learned_total_;  // batches of the last complete epoch
  std::int64_t total_ = -1;                    // this epoch's total (-1: unknown)
  std::int64_t seen_ = 0;                      // batches ended since EpochStart
  std::string line_;                           // reused output buffer
};

}  // namespace torchbus
