#pragma once

/// \file
/// EventFlow (private to torchbus_framework): publishes a trainer's events in their nesting.

#include <torchbus/bus.hpp>
#include <torchbus/control.hpp>

#include "bus/control_catch.hpp"
#include "state/writer.hpp"

#include <functional>
#include <vector>

namespace torchbus {

class ProcessGroup;

/// What writes the run's progress (the loops' counters) into State before each emission, so that
/// subscribers read the truth and what they write there changes nothing.
class ProgressPublisher {
 public:
  /// Writes the progress into `state`.
  virtual void publish(State& state) const noexcept = 0;

 protected:
  ~ProgressPublisher() = default;
};

/// Publishes the trainer's built-in events: every Start it opens owes its End, which is published
/// even when an error escapes (after Exception); control exceptions a subscriber throws
/// (StopTraining, CancelEpoch, CancelBatch) become the state's requests.
class EventFlow {
 public:
  EventFlow(EventPublisher& publisher, State& state) : publisher_(publisher), state_(state) {
    open_ends_.reserve(8);  // no allocation while events nest
  }

  /// Publishes `event` (after `progress` wrote its counters into the state); a control signal a
  /// subscriber threw becomes the state's request.
  void fire(Event event);
  /// Sets what writes the run's progress into the state before each emission (must outlive this).
  void set_progress(const ProgressPublisher* progress) noexcept { progress_ = progress; }
  /// Writes the run's progress into the state now (before recording a metric at its counters).
  void publish_progress() const noexcept {
    if (progress_ != nullptr) progress_->publish(state_);
  }
  /// Runs a train or eval step; a control signal it throws becomes the state's request and
  /// cancels the batch (returns false then).
  template <typename Step>
  bool run_step(Step&& step) {
    return detail::catch_control(step, [this](const ControlSignal& signal) {
      apply(signal);
      detail::StateWriter::set_cancelled(state_, true);  // whatever it asked, no loss came back
    });
  }
  /// Publishes `start` and owes `end` (owed even if a subscriber of `start` throws).
  void open(Event start, Event end);
  /// Publishes the innermost End owed.
  void close();

  /// Runs `body` as an action between ActionStart and ActionEnd. An exception escaping it is put
  /// in the state, reported to `group` (when not null), published as Exception, followed by every
  /// End still owed; then it is rethrown.
  void run_action(const std::function<void()>& body, ProcessGroup* group);
  /// Whether an action runs.
  bool running() const noexcept { return running_; }
  /// Throws ConfigError when an action runs.
  void ensure_idle() const;

 private:
  /// The one place a control signal becomes the request its kind names.
  void apply(const ControlSignal& signal);

  EventPublisher& publisher_;
  State& state_;
  const ProgressPublisher* progress_ = nullptr;
  std::vector<Event> open_ends_;  // End events still owed, innermost last
  bool running_ = false;
};

}  // namespace torchbus
