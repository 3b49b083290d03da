#pragma once

/// \file
/// Watching a bus dispatch, for profiling tools (the built-in Profiler): the time of every
/// subscriber call, who ran and on which channel. Training code does not need it.

#include <torchbus/bus.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace torchbus {

/// One subscriber call, as reported to a DispatchObserver.
struct DispatchTiming {
  /// The event: `index_of(event)` for a built-in one, `kEventCount + CustomEvent::id` for a custom
  /// one (`channel_name` gives its name).
  std::size_t channel = 0;
  SubscriberId subscriber = 0;   ///< who ran (`subscriber_label` gives a readable name)
  std::int64_t nanoseconds = 0;  ///< steady_clock time of the call, nested emissions included
  std::uint32_t depth = 0;  ///< 0 for a call from the loop, n + 1 inside an observed depth-n call
};

/// Receives the duration of every subscriber call of a bus: install one with
/// `set_dispatch_observer`. Without an observer the bus reads no clock.
class DispatchObserver {
 public:
  virtual ~DispatchObserver() = default;
  /// Called after each subscriber call, also when it threw (the exception then propagates as
  /// usual). Calls nested inside it are reported before it. Must not throw.
  virtual void on_dispatch(const DispatchTiming& timing) noexcept = 0;
};

/// Installs `observer` on `bus` (not owned; nullptr removes it), which then gets the time of every
/// subscriber call. One per bus: throws ConfigError when another one is installed.
void set_dispatch_observer(EventBus& bus, DispatchObserver* observer);
/// The observer installed on `bus`, or nullptr.
DispatchObserver* dispatch_observer(const EventBus& bus) noexcept;
/// Readable name of a subscriber of `bus`: a class callback's or named subscription's name, else
/// "subscriber #<id> (priority p)".
std::string subscriber_label(const EventBus& bus, SubscriberId id);
/// The id the next subscription (or class callback) of `bus` will get.
SubscriberId next_subscriber_id(const EventBus& bus) noexcept;
/// Name of a channel of DispatchTiming: the built-in event's name (e.g. "StepEnd") or the custom
/// event's.
std::string_view channel_name(const EventBus& bus, std::size_t channel);
/// The subscribers of a channel of `bus` in the order they run.
std::vector<SubscriberId> dispatch_order(const EventBus& bus, std::size_t channel);

}  // namespace torchbus
