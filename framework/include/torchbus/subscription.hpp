#pragma once

/// \file
/// A subscription as a value: which events, which filter, which function, where in the order.

#include <torchbus/event_list.hpp>
#include <torchbus/filter.hpp>
#include <torchbus/placement.hpp>

#include <functional>
#include <string>
#include <variant>

namespace torchbus {

struct State;

/// What a decorator helper returns and `EventBus::add` connects.
struct Subscription {
  std::variant<EventList, std::string> event;  ///< built-in events or a custom event's name
  Filter filter;                               ///< which occurrences run the slot (per event)
  std::function<void(State&)> slot;            ///< the function to run
  Placement placement;                         ///< name, after / before, priority
};

}  // namespace torchbus
