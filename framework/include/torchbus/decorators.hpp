#pragma once

/// \file
/// Decorator-like helpers that turn a free function or lambda into a subscription, e.g.
/// `bus.add(torchbus::on_step_end(every(100), log_loss));`, and TORCHBUS_SUBSCRIBE, which
/// registers one at namespace scope so that every Trainer connects it (as NeMo's @on_step_end).

#include <torchbus/subscription.hpp>

#include <string>
#include <utility>
#include <vector>

namespace torchbus {

/// A subscription of `slot` to `events` (one event, or several: `Event::StepEnd |
/// Event::EpochEnd`).
inline Subscription on(EventList events, std::function<void(State&)> slot,
                       Placement placement = {}) {
  return Subscription{events, Filter{}, std::move(slot), std::move(placement)};
}
/// A subscription of `slot` to `events` through `filter` (a copy per event, each counting alone).
inline Subscription on(EventList events, Filter filter, std::function<void(State&)> slot,
                       Placement placement = {}) {
  return Subscription{events, std::move(filter), std::move(slot), std::move(placement)};
}
/// A subscription of `slot` to the custom event called `name`.
inline Subscription on(std::string name, std::function<void(State&)> slot,
                       Placement placement = {}) {
  return Subscription{std::move(name), Filter{}, std::move(slot), std::move(placement)};
}
/// A subscription of `slot` to the custom event called `name` through `filter`.
inline Subscription on(std::string name, Filter filter, std::function<void(State&)> slot,
                       Placement placement = {}) {
  return Subscription{std::move(name), std::move(filter), std::move(slot), std::move(placement)};
}

#define TORCHBUS_DECORATOR(Name, name)                                                        \
  /** A subscription of `slot` to Event::Name. */                                             \
  inline Subscription on_##name(std::function<void(State&)> slot, Placement placement = {}) { \
    return on(Event::Name, std::move(slot), std::move(placement));                            \
  }                                                                                           \
  /** A subscription of `slot` to Event::Name through `filter`. */                            \
  inline Subscription on_##name(Filter filter, std::function<void(State&)> slot,              \
                                Placement placement = {}) {                                   \
    return on(Event::Name, std::move(filter), std::move(slot), std::move(placement));         \
  }
TORCHBUS_FOR_EACH_EVENT(TORCHBUS_DECORATOR)
#undef TORCHBUS_DECORATOR

/// Subscriptions registered with TORCHBUS_SUBSCRIBE, in registration order.
const std::vector<Subscription>& registered_subscriptions();

/// Adds `subscription` to the registry; returns true (for use in a static initializer).
bool register_subscription(Subscription subscription);

}  // namespace torchbus

#define TORCHBUS_DETAIL_CONCAT_INNER(a, b) a##b
#define TORCHBUS_DETAIL_CONCAT(a, b) TORCHBUS_DETAIL_CONCAT_INNER(a, b)

/// Registers a subscription at namespace scope, e.g.
/// `TORCHBUS_SUBSCRIBE(torchbus::on_step_end(torchbus::every(10), log_loss));`
/// A Trainer built with `TrainerOptions::use_registered_subscriptions(true)`, and
/// `EventBus::add_registered`, connect the registered subscriptions.
#define TORCHBUS_SUBSCRIBE(...)                                                               \
  [[maybe_unused]] static const bool TORCHBUS_DETAIL_CONCAT(torchbus_subscribed_, __LINE__) = \
      ::torchbus::register_subscription(__VA_ARGS__)
