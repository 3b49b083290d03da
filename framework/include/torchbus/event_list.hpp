#pragma once

/// \file
/// EventList: a set of built-in events, written `Event::StepEnd | Event::EpochEnd`, for one
/// subscription to several events.

#include <torchbus/event.hpp>

#include <cstdint>

namespace torchbus {

/// A set of built-in events (a bitset indexed by `index_of(event)`).
class EventList {
 public:
  /// The empty list.
  constexpr EventList() = default;
  /// The list holding `event` alone.
  constexpr EventList(Event event) noexcept : bits_(bit(event)) {}  // NOLINT: implicit on purpose

  /// Every built-in event.
  static constexpr EventList all() noexcept {
    EventList list;
    list.bits_ = (std::uint32_t{1} << kEventCount) - 1;
    return list;
  }

  /// Whether `event` is in the list.
  constexpr bool contains(Event event) const noexcept { return (bits_ & bit(event)) != 0; }
  /// Whether the list holds no event.
  constexpr bool empty() const noexcept { return bits_ == 0; }
  /// Number of events in the list.
  constexpr std::size_t size() const noexcept {
    std::size_t count = 0;
    for (auto bits = bits_; bits != 0; bits &= bits - 1) ++count;
    return count;
  }

  /// The events of this list that `other` does not hold.
  constexpr EventList without(EventList other) const noexcept {
    EventList list;
    list.bits_ = bits_ & ~other.bits_;
    return list;
  }

  /// Adds the events of `other`.
  constexpr EventList& operator|=(EventList other) noexcept {
    bits_ |= other.bits_;
    return *this;
  }
  /// The events of both lists.
  friend constexpr EventList operator|(EventList a, EventList b) noexcept { return a |= b; }
  /// Whether both lists hold the same events.
  friend constexpr bool operator==(EventList a, EventList b) noexcept { return a.bits_ == b.bits_; }
  /// Whether the lists differ.
  friend constexpr bool operator!=(EventList a, EventList b) noexcept { return !(a == b); }

 private:
  static_assert(kEventCount < 32, "EventList keeps its events in 32 bits");
  static constexpr std::uint32_t bit(Event event) noexcept {
    return std::uint32_t{1} << index_of(event);
  }

  std::uint32_t bits_ = 0;
};

/// The list of both events, e.g. `Event::StepEnd | Event::EpochEnd`.
constexpr EventList operator|(Event a, Event b) noexcept {
  return EventList(a) | EventList(b);
}

}  // namespace torchbus
