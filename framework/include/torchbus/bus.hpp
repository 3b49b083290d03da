#pragma once

/// \file
/// EventBus: one Signals2 signal per built-in event plus named custom events.

#include <torchbus/callback.hpp>
#include <torchbus/connection.hpp>
#include <torchbus/event.hpp>
#include <torchbus/filter.hpp>
#include <torchbus/state.hpp>
#include <torchbus/subscription.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace torchbus {

namespace detail {
/// Live subscriber count per channel (built-in events first, then custom events). Shared with the
/// connections so that disconnecting through a handle keeps the count exact.
struct LiveCounts {
  std::array<std::uint32_t, kEventCount> builtin{};
  std::vector<std::uint32_t> custom;
  std::uint32_t& operator[](std::size_t channel) {
    return channel < kEventCount ? builtin[channel] : custom[channel - kEventCount];
  }
};
struct Channels;
}  // namespace detail

/// Id of a custom event, returned by `EventBus::register_event`.
struct CustomEvent {
  std::size_t id = 0;  ///< position among the bus's custom events
};

/// Identifies a subscriber of a bus in dispatch reports: every hook of a class callback shares the
/// callback's id; every other subscription has its own. Ids count up from 0 and are never reused.
using SubscriberId = std::uint64_t;

/// One subscriber call, as reported to a DispatchObserver.
struct DispatchTiming {
  /// The event: `index_of(event)` for a built-in one, `kEventCount + CustomEvent::id` for a custom
  /// one (`EventBus::channel_name` gives its name).
  std::size_t channel = 0;
  SubscriberId subscriber = 0;   ///< who ran (`EventBus::subscriber_label` gives a readable name)
  std::int64_t nanoseconds = 0;  ///< steady_clock time of the call, nested emissions included
  std::uint32_t depth = 0;  ///< 0 for a call from the loop, n + 1 inside an observed depth-n call
};

/// Receives the duration of every subscriber call of a bus: install one with
/// `EventBus::set_observer`. Without an observer the bus reads no clock.
class DispatchObserver {
 public:
  virtual ~DispatchObserver() = default;
  /// Called after each subscriber call, also when it threw (the exception then propagates as
  /// usual). Calls nested inside it are reported before it. Must not throw.
  virtual void on_dispatch(const DispatchTiming& timing) noexcept = 0;
};

/// Publishes events to subscribers ordered by priority (lower first), then registration order.
/// Not thread-safe: connect, disconnect and emit from the thread that runs the loop.
class EventBus {
 public:
  /// A subscriber.
  using Slot = std::function<void(State&)>;

  EventBus();
  ~EventBus();
  EventBus(const EventBus&) = delete;
  EventBus& operator=(const EventBus&) = delete;

  /// Subscribes `slot` to `event`.
  Connection on(Event event, Slot slot, int priority = 0);
  /// Subscribes `slot` to `event`, run when `filter` lets the occurrence through.
  Connection on(Event event, Filter filter, Slot slot, int priority = 0);
  /// Subscribes `slot` to a custom event.
  Connection on(CustomEvent event, Slot slot, int priority = 0);
  /// Subscribes `slot` to a custom event through `filter`.
  Connection on(CustomEvent event, Filter filter, Slot slot, int priority = 0);
  /// Subscribes `slot` to the built-in or custom event called `name`.
  Connection on(std::string_view name, Slot slot, int priority = 0);
  /// Subscribes `slot` to the event called `name` through `filter`.
  Connection on(std::string_view name, Filter filter, Slot slot, int priority = 0);
  /// Connects a subscription made by a decorator helper (see decorators.hpp).
  Connection add(Subscription subscription);
  /// Connects the hooks `callback` overrides at its priority; its name must be unique on this bus.
  CallbackConnection add(std::shared_ptr<Callback> callback);
  /// Connects every subscription registered with TORCHBUS_SUBSCRIBE; one to a custom event not
  /// yet registered is connected when `register_event` registers it.
  std::vector<Connection> add_registered();

  /// Registers a custom event; throws ConfigError when the name is taken.
  CustomEvent register_event(std::string name);
  /// The custom event called `name`; throws ConfigError naming the registered ones otherwise.
  CustomEvent custom_event(std::string_view name) const;
  /// Name of a custom event.
  const std::string& name_of(CustomEvent event) const;

  /// Runs the subscribers of `event`. With no subscribers this is one branch.
  void emit(Event event, State& state) {
    if (live_->builtin[index_of(event)] != 0) dispatch(index_of(event), state);
  }
  /// Runs the subscribers of a custom event.
  void emit(CustomEvent event, State& state);
  /// Runs the subscribers of the built-in or custom event called `name`.
  void emit(std::string_view name, State& state);

  /// Runs every subscriber of `event` even if some throw: their errors are logged, not thrown.
  /// The loop uses it for Exception and for the End events after an error.
  void emit_guarded(Event event, State& state);

  /// Connected subscribers of `event`.
  std::size_t subscriber_count(Event event) const noexcept {
    return live_->builtin[index_of(event)];
  }
  /// Connected subscribers of a custom event.
  std::size_t subscriber_count(CustomEvent event) const;

  /// The class callbacks added, in order.
  const std::vector<std::shared_ptr<Callback>>& callbacks() const noexcept { return callbacks_; }
  /// The callback called `name`, or nullptr.
  Callback* find_callback(std::string_view name) const noexcept;

  /// Installs `observer` (not owned; nullptr removes it), which then gets the time of every
  /// subscriber call. One per bus: throws ConfigError when another one is installed.
  void set_observer(DispatchObserver* observer);
  /// The installed observer, or nullptr.
  DispatchObserver* observer() const noexcept;
  /// Readable name of a subscriber: a class callback's name, else "subscriber #<id> (priority p)".
  std::string subscriber_label(SubscriberId id) const;
  /// The id the next subscription (or class callback) will get.
  SubscriberId next_subscriber_id() const noexcept;
  /// Name of a channel of DispatchTiming: the built-in event's name (e.g. "StepEnd") or the custom
  /// event's.
  std::string_view channel_name(std::size_t channel) const;

 private:
  Connection connect(std::size_t channel, std::optional<Event> event, Filter filter, Slot slot,
                     int priority);
  Connection connect(std::size_t channel, Slot slot, int priority);
  void dispatch(std::size_t channel, State& state);
  std::size_t channel_of(std::string_view name) const;

  std::shared_ptr<detail::LiveCounts> live_;
  std::unique_ptr<detail::Channels> channels_;
  std::vector<std::shared_ptr<Callback>> callbacks_;
  std::vector<Subscription> pending_registered_;  // registered, waiting for their custom event
};

}  // namespace torchbus
