#pragma once

/// \file
/// Subscription filters `every(n)`, `once(n)` and `when(predicate)`, as in Ignite.

#include <torchbus/event.hpp>

#include <cstdint>
#include <functional>
#include <optional>

namespace torchbus {

struct State;

/// What `occurrence` returns for events without a counter.
inline constexpr std::int64_t kNoCounter = -1;

/// 1-based occurrence number of `event` read from State's counters (so that it is the same after a
/// resume), 0 (never passes) at the StepEnd of a step that made no update, or kNoCounter for events
/// that have no counter (action, evaluation, exception and custom events).
std::int64_t occurrence(Event event, const State& state) noexcept;

/// Decides whether a subscriber runs at an occurrence of its event. Epoch events count epochs,
/// step and optimizer events count steps, batch events count batches since the run began,
/// evaluation batch events count batches of the evaluation; the other events count their own calls.
class Filter {
 public:
  /// A test on the state, for `when`.
  using Predicate = std::function<bool(const State&)>;

  /// A filter that lets every occurrence through.
  Filter() = default;

  /// Lets through occurrences n, 2n, 3n, ...; throws ConfigError when n < 1.
  static Filter every(std::int64_t n);
  /// Lets through occurrence n only; throws ConfigError when n < 1.
  static Filter once(std::int64_t n);
  /// Lets through the occurrences at which `predicate(state)` is true.
  static Filter when(Predicate predicate);

  /// Whether this filter lets every occurrence through (then the bus skips it).
  bool passes_everything() const noexcept { return kind_ == Kind::All; }

  /// Whether the subscriber runs now; `event` is empty for custom events.
  bool passes(std::optional<Event> event, const State& state);

  /// Calls counted by this filter for events without a counter (saved in checkpoints).
  std::int64_t own_count() const noexcept { return own_count_; }
  /// Restores `own_count()`.
  void set_own_count(std::int64_t count) noexcept { own_count_ = count; }

 private:
  enum class Kind : std::uint8_t { All, Every, Once, When };
  Filter(Kind kind, std::int64_t n) : kind_(kind), n_(n) {}

  Kind kind_ = Kind::All;
  std::int64_t n_ = 1;
  std::int64_t own_count_ = 0;
  Predicate predicate_;
};

/// Lets through occurrences n, 2n, 3n, ... of the event.
inline Filter every(std::int64_t n) {
  return Filter::every(n);
}
/// Lets through occurrence n of the event only.
inline Filter once(std::int64_t n = 1) {
  return Filter::once(n);
}
/// Lets through the occurrences at which `predicate(state)` holds.
inline Filter when(Filter::Predicate predicate) {
  return Filter::when(std::move(predicate));
}

}  // namespace torchbus
