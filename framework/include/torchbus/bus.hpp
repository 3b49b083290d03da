#pragma once

/// \file
/// EventBus (subscribe) and EventPublisher (publish): one Signals2 signal per built-in event plus
/// named custom events.

#include <torchbus/callback.hpp>
#include <torchbus/connection.hpp>
#include <torchbus/event.hpp>
#include <torchbus/event_list.hpp>
#include <torchbus/filter.hpp>
#include <torchbus/placement.hpp>
#include <torchbus/state.hpp>
#include <torchbus/subscription.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

namespace torchbus {

namespace detail {
/// Live subscriber count per channel (built-in events first, then custom events), read by
/// `EventPublisher::emit` before it dispatches.
struct LiveCounts {
  std::array<std::uint32_t, kEventCount> builtin{};
  std::vector<std::uint32_t> custom;
  std::uint32_t& operator[](std::size_t channel) {
    return channel < kEventCount ? builtin[channel] : custom[channel - kEventCount];
  }
};
struct Channels;
struct BusAccess;
}  // namespace detail

/// Id of a custom event: what subscribing needs. `EventBus::register_event` returns a
/// CustomEventPublisher, which converts to it; `EventBus::custom_event(name)` looks one up.
struct CustomEvent {
  std::size_t id = 0;  ///< position among the bus's custom events
};

class EventBus;

/// Identifies a subscriber of a bus: every hook of a class callback shares the callback's id;
/// every other subscription has its own. Ids count up from 0 and are never reused.
using SubscriberId = std::uint64_t;

/// The publish side of one custom event, returned by `EventBus::register_event` (whoever
/// registers an event decides who may publish it). Converts to the CustomEvent id for subscribing.
/// Must not outlive its bus.
class CustomEventPublisher {
 public:
  CustomEventPublisher() = default;
  /// The event's id.
  CustomEvent event() const noexcept { return event_; }
  /// The event's id, for `bus.on(publisher, slot)`.
  operator CustomEvent() const noexcept { return event_; }  // NOLINT: implicit on purpose
  /// Runs the event's subscribers. With no subscribers this is one branch.
  void emit(State& state) const;

 private:
  friend class EventBus;
  CustomEventPublisher(EventBus& bus, CustomEvent event) : bus_(&bus), event_(event) {}

  EventBus* bus_ = nullptr;
  CustomEvent event_;
};

/// The subscribe side of an event bus (the sink of EnTT's sigh/sink split): subscriptions, class
/// callbacks, custom events, ordering, filters, describing. What only tools need (a dispatch
/// observer for profiling) is in dispatch_observer.hpp; what the trainer's checkpoints and error
/// policies need is private to torchbus. Only its EventPublisher publishes built-in events; a
/// custom event is published through the handle its registration returned. Subscribers of an event
/// run in a stable topological order of their `after` / `before` constraints (on names and roles),
/// ties broken by priority (lower first), then role (in Role's order), then registration order.
/// Not thread-safe: use it from the thread that runs the loop.
class EventBus {
 public:
  /// A subscriber.
  using Slot = std::function<void(State&)>;

  ~EventBus();
  EventBus(const EventBus&) = delete;
  EventBus& operator=(const EventBus&) = delete;

  /// Subscribes `slot` to `events` (one event, or several: `Event::StepEnd | Event::EpochEnd`);
  /// one Connection disconnects them all.
  Connection on(EventList events, Slot slot, Placement placement = {});
  /// Subscribes `slot` to `events` through `filter` (copied per event, each copy counting alone).
  Connection on(EventList events, Filter filter, Slot slot, Placement placement = {});
  /// Subscribes `slot` to a custom event.
  Connection on(CustomEvent event, Slot slot, Placement placement = {});
  /// Subscribes `slot` to a custom event through `filter`.
  Connection on(CustomEvent event, Filter filter, Slot slot, Placement placement = {});
  /// Subscribes `slot` to the built-in or custom event called `name`.
  Connection on(std::string_view name, Slot slot, Placement placement = {});
  /// Subscribes `slot` to the event called `name` through `filter`.
  Connection on(std::string_view name, Filter filter, Slot slot, Placement placement = {});
  /// Connects a subscription made by a decorator helper (see decorators.hpp).
  Connection add(Subscription subscription);
  /// Connects the hooks `callback` overrides, found at compile time from `T` (when the object's
  /// dynamic type is not `T`, e.g. added as shared_ptr<Callback>, every hook is connected). Its
  /// name must be unique on this bus.
  template <typename T>
  CallbackConnection add(std::shared_ptr<T> callback) {
    static_assert(std::is_base_of_v<Callback, T>, "EventBus::add takes a Callback subclass");
    bool exact = false;
    if (callback != nullptr) {
      const T& object = *callback;
      exact = typeid(object) == typeid(T);
    }
    return add_callback(std::move(callback), exact ? overridden_hooks<T>() : EventList::all());
  }
  /// Connects every subscription registered with TORCHBUS_SUBSCRIBE; one to a custom event not
  /// yet registered is connected when `register_event` registers it.
  std::vector<Connection> add_registered();
  /// Disconnects the class callback (or named subscription) called `name` and removes it from the
  /// registry; throws ConfigError naming the callbacks present when there is none.
  void remove(std::string_view name);

  /// Registers a custom event and returns its publish side; throws ConfigError when the name is
  /// taken.
  CustomEventPublisher register_event(std::string name);
  /// The custom event called `name`, for subscribing; throws ConfigError naming the registered
  /// ones otherwise.
  CustomEvent custom_event(std::string_view name) const;
  /// Name of a custom event.
  const std::string& name_of(CustomEvent event) const;

  /// Checks the declared order: throws ConfigError naming a constraint's unknown name (and who
  /// declared it) or the members of a cycle. The Trainer calls it when fit() or evaluate() starts.
  void check_order() const;
  /// The subscribers of `event` in the order they run, one line each (label, role, priority,
  /// constraints).
  std::string describe(Event event) const;
  /// The subscribers of a custom event in the order they run.
  std::string describe(CustomEvent event) const;
  /// Connected subscribers of `event`.
  std::size_t subscriber_count(Event event) const noexcept {
    return live_->builtin[index_of(event)];
  }
  /// Connected subscribers of a custom event.
  std::size_t subscriber_count(CustomEvent event) const;

  /// The class callbacks added and not disconnected, in order.
  const std::vector<std::shared_ptr<Callback>>& callbacks() const noexcept;
  /// The callback called `name`, or nullptr.
  Callback* find_callback(std::string_view name) const noexcept;

  /// The subscribers that threw under a Disable error policy, in the order of their first failure:
  /// those disconnected and those that recovered within their retries.
  const std::vector<SubscriberFailure>& subscriber_failures() const noexcept;
  /// Whether `callback` was disabled by its error policy (it stays added, its state saved).
  bool is_disabled(const Callback& callback) const noexcept;

 private:
  friend class EventPublisher;
  friend class CustomEventPublisher;
  friend struct detail::BusAccess;  // checkpoint, error-policy and dispatch-observer plumbing
  EventBus();

  CallbackConnection add_callback(std::shared_ptr<Callback> callback, EventList hooks);
  Connection subscribe(const std::vector<std::size_t>& channels, Filter filter, Slot slot,
                       Placement placement);
  void attach(SubscriberId id);
  void dispatch(std::size_t channel, State& state);
  void dispatch_guarded(std::size_t channel, State& state);
  void emit_custom(CustomEvent event, State& state);
  std::size_t channel_of(std::string_view name) const;
  std::string describe_channel(std::size_t channel) const;

  std::shared_ptr<detail::Channels> channels_;
  detail::LiveCounts* live_;  // inside *channels_
};

/// The publish side of a bus: owns the EventBus, hands out `bus()` for subscribing, and emits the
/// built-in events. The Trainer holds one; nobody else can publish its built-in events.
class EventPublisher {
 public:
  EventPublisher() = default;

  /// The bus, for subscribing.
  EventBus& bus() noexcept { return bus_; }
  /// The bus, for reading.
  const EventBus& bus() const noexcept { return bus_; }

  /// Runs the subscribers of `event`. With no subscribers this is one branch.
  void emit(Event event, State& state) {
    if (bus_.live_->builtin[index_of(event)] != 0) bus_.dispatch(index_of(event), state);
  }
  /// Runs every subscriber of `event` even if some throw: their errors are logged, not thrown.
  /// The loop uses it for Exception and for the End events after an error.
  void emit_guarded(Event event, State& state) { bus_.dispatch_guarded(index_of(event), state); }

 private:
  EventBus bus_;
};

}  // namespace torchbus
