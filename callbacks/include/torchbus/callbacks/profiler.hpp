#pragma once

/// \file
/// Profiler: wall time per subscriber and event, per phase of the loop (data, forward, backward,
/// gradient sync, optimizer, evaluation) and the rest of the loop, as a table at ActionEnd.

#include <torch/arg.h>
#include <torchbus/callback.hpp>
#include <torchbus/dispatch_observer.hpp>

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace torchbus {

/// What Profiler reports, e.g. `ProfilerOptions().top_n(5)`.
struct ProfilerOptions {
  /// The callback's name, unique in a trainer: its state's key in checkpoints (give each
  /// instance of a run its own).
  TORCH_ARG(std::string, name) = "profiler";
  /// Log the table through torchbus::logger() (level info) at every ActionEnd.
  TORCH_ARG(bool, log_table) = true;
  /// Subscriber rows in the logged table, the slowest first; the others are summed in one line
  /// (0: every row). `Profiler::rows()` always has every row.
  TORCH_ARG(std::int64_t, top_n) = 10;
  /// Warn once per subscriber, during the run, when its own time exceeds this share of the
  /// action's time so far (checked every `warn_every_steps` steps and at every EpochEnd; 0: never).
  TORCH_ARG(double, warn_share) = 0.2;
  /// Steps between two checks of `warn_share`.
  TORCH_ARG(std::int64_t, warn_every_steps) = 50;

 public:
  /// Throws ConfigError naming the first option that is out of range.
  void validate() const;
};

/// One row of a profile. The seconds of the "phase", "subscriber" and "other" rows add up to the
/// "total" row's.
struct ProfileRow {
  std::string kind;  ///< "total", "phase", "subscriber" or "other"
  /// "action" (total), the phase ("data", "forward", ...), the subscriber's label (a callback's
  /// name or "subscriber #<id> (priority p)"), or "other"
  std::string name;
  std::string event;         ///< the subscriber's event, or the span a phase or the total covers
  std::int64_t calls = 0;    ///< calls of the subscriber, intervals of the phase (0 for "other")
  double total_seconds = 0;  ///< wall time: a subscriber's own time, without nested emissions

  /// Seconds per call (0 without calls).
  double mean_seconds() const noexcept {
    return calls > 0 ? total_seconds / static_cast<double>(calls) : 0.0;
  }
};

/// Measures, during each fit() or evaluate(), the wall time (std::chrono::steady_clock, never a
/// device sync) spent in every subscriber at every event, in the loop's phases (data, forward,
/// backward, gradient_sync under a process group, optimizer, evaluation) and in the rest of the
/// loop ("other"), and at ActionEnd makes
/// `rows()` and logs them as a table. Installs itself as the bus's DispatchObserver (one per bus)
/// and subscribes its timing points at priorities INT_MIN and INT_MAX; add it with Trainer::add.
/// Runs on every rank by default: each rank profiles its own process. Default priority INT_MAX, so
/// that its table is the last output of the action. See docs/builtin-callbacks-profiler.md.
class Profiler : public Callback, public DispatchObserver {
 public:
  /// Default priority: logs the table after every other ActionEnd subscriber.
  static constexpr int kDefaultPriority = std::numeric_limits<int>::max();

  /// A Profiler named by its options; throws ConfigError for invalid options.
  explicit Profiler(ProfilerOptions options = {});

  /// The options it was built with.
  const ProfilerOptions& options() const noexcept { return options_; }
  /// The profile of the last action that ended: the total, the phases that ran, the subscribers
  /// (the slowest first) and "other"; empty before the first ActionEnd.
  const std::vector<ProfileRow>& rows() const noexcept { return rows_; }

  /// Installs the observer and the timing subscriptions; throws ConfigError when the trainer's
  /// bus already has an observer (e.g. another Profiler) or this Profiler was added before.
  void on_added(Trainer& trainer) override;
  /// Logs the table of `rows()` when `log_table` is set.
  void on_action_end(State& state) override;
  /// Adds a subscriber call to the profile (its own time: nested calls are subtracted).
  void on_dispatch(const DispatchTiming& timing) noexcept override;

 private:
  enum LoopPhase : std::size_t {
    kData,
    kForward,
    kBackward,
    kGradientSync,
    kOptimizer,
    kEvaluation,
    kPhaseCount
  };
  /// One phase: intervals measured so far and the one in progress.
  struct PhaseClock {
    bool open = false;
    std::int64_t start = 0;           // ns
    std::int64_t subscribers_at = 0;  // subscriber_ns_ when the interval opened
    std::int64_t calls = 0;
    std::int64_t nanoseconds = 0;
  };
  /// Calls of one subscriber at one event.
  struct Tally {
    std::size_t channel = 0;
    std::int64_t calls = 0;
    std::int64_t nanoseconds = 0;
  };

  void start_action(State& state);
  void end_action();
  void open(LoopPhase phase);
  void close(LoopPhase phase);
  void discard(LoopPhase phase) { phases_[phase].open = false; }
  bool own(SubscriberId id) const noexcept { return id >= own_first_ && id < own_end_; }
  void log_rows() const;
  void warn_about_slow_subscribers();

  ProfilerOptions options_;
  EventBus* bus_ = nullptr;     // of the trainer it was added to
  SubscriberId own_first_ = 0;  // its timing subscriptions: ids [own_first_, own_end_)
  SubscriberId own_end_ = 0;
  bool active_ = false;                  // inside an action, on a rank it runs on
  std::int64_t action_start_ = 0;        // ns
  std::int64_t subscriber_ns_ = 0;       // own time of every subscriber call of the action so far
  std::vector<std::int64_t> nested_ns_;  // by depth: time of calls whose caller is not reported yet
  std::array<PhaseClock, kPhaseCount> phases_{};
  std::vector<std::vector<Tally>> tallies_;  // by subscriber id, then by event
  std::vector<bool> warned_;                 // by subscriber id: warned about by warn_share
  std::vector<ProfileRow> rows_;
};

}  // namespace torchbus
