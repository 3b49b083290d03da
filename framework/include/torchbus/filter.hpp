#pragma once

/// \file
/// Subscription filters as in Ignite: `every(n)`, `once(n)`, `once({n1, n2})`, `before(n)`,
/// `after(n)` and `when(predicate)`, composed with `|`, `&` and `!` (see docs/filters.md).

#include <torchbus/event.hpp>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <vector>

namespace torchbus {

struct State;

/// What `occurrence` returns for events without a counter.
inline constexpr std::int64_t kNoCounter = -1;

/// 1-based occurrence number of `event` read from State's counters (so that it is the same after a
/// resume), 0 (never passes) at the StepEnd of a step that made no update, or kNoCounter for events
/// that have no counter (action, evaluation, exception and custom events).
std::int64_t occurrence(Event event, const State& state) noexcept;

namespace detail {
struct FilterNode;
}  // namespace detail

/// Decides whether a subscriber runs at an occurrence of its event. Epoch events count epochs,
/// step and optimizer events count steps, batch events count batches since the run began,
/// evaluation batch events count batches of the evaluation; the other events count their own calls.
/// A composed filter computes the occurrence number once per call and every part sees that number.
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
  /// Lets through the listed occurrences; throws ConfigError on an empty list or a value < 1.
  static Filter once(const std::vector<std::int64_t>& occurrences);
  /// Lets through occurrences 1 .. n-1 (Ignite's `before=n`); throws ConfigError when n < 2.
  static Filter before(std::int64_t n);
  /// Lets through occurrences n+1, n+2, ... (Ignite's `after=n`); throws ConfigError when n < 0.
  static Filter after(std::int64_t n);
  /// Lets through the occurrences at which `predicate(state)` is true.
  static Filter when(Predicate predicate);

  /// Lets through what `left` or `right` lets through (a subscriber runs once even if both do).
  friend Filter operator|(const Filter& left, const Filter& right);
  /// Lets through what both `left` and `right` let through.
  friend Filter operator&(const Filter& left, const Filter& right);
  /// Lets through what `filter` does not (a skipped update still never passes a counting filter).
  friend Filter operator!(const Filter& filter);

  /// Whether this filter lets every occurrence through (then the bus skips it).
  bool passes_everything() const noexcept { return kind_ == Kind::All; }

  /// Whether the subscriber runs now; `event` is empty for custom events.
  bool passes(std::optional<Event> event, const State& state);

  /// Calls counted by this filter for events without a counter (saved in checkpoints).
  std::int64_t own_count() const noexcept { return own_count_; }
  /// Restores `own_count()`.
  void set_own_count(std::int64_t count) noexcept { own_count_ = count; }

 private:
  // Every and Once are kept inline (the common, cheapest case); anything else is a shared tree.
  enum class Kind : std::uint8_t { All, Every, Once, Tree };
  Filter(Kind kind, std::int64_t n) : kind_(kind), n_(n) {}
  explicit Filter(std::shared_ptr<const detail::FilterNode> tree);

  /// This filter as a node of a composed tree.
  std::shared_ptr<const detail::FilterNode> node() const;
  /// The occurrence number of this call: State's counter, or the next own count.
  std::int64_t count(std::optional<Event> event, const State& state) noexcept;

  Kind kind_ = Kind::All;
  std::int64_t n_ = 1;
  std::int64_t own_count_ = 0;
  std::shared_ptr<const detail::FilterNode> tree_;  ///< immutable, shared by copies
};

/// Lets through occurrences n, 2n, 3n, ... of the event.
inline Filter every(std::int64_t n) {
  return Filter::every(n);
}
/// Lets through occurrence n of the event only.
inline Filter once(std::int64_t n = 1) {
  return Filter::once(n);
}
/// Lets through the listed occurrences of the event, e.g. `once({1, 10, 100})`.
inline Filter once(std::initializer_list<std::int64_t> occurrences) {
  return Filter::once(std::vector<std::int64_t>(occurrences));
}
/// Lets through the listed occurrences of the event.
inline Filter once(const std::vector<std::int64_t>& occurrences) {
  return Filter::once(occurrences);
}
/// Lets through occurrences 1 .. n-1 of the event.
inline Filter before(std::int64_t n) {
  return Filter::before(n);
}
/// Lets through occurrences n+1, n+2, ... of the event.
inline Filter after(std::int64_t n) {
  return Filter::after(n);
}
/// Lets through the occurrences at which `predicate(state)` holds.
inline Filter when(Filter::Predicate predicate) {
  return Filter::when(std::move(predicate));
}

}  // namespace torchbus
