#pragma once

/// \file
/// A subscription as a value: which event, which filter, which function, which priority.

#include <torchbus/event.hpp>
#include <torchbus/filter.hpp>

#include <functional>
#include <string>
#include <variant>

namespace torchbus {

struct State;

/// What a decorator helper returns and `EventBus::add` connects.
struct Subscription {
  std::variant<Event, std::string> event;  ///< a built-in event or a custom event's name
  Filter filter;                           ///< which occurrences run the slot
  std::function<void(State&)> slot;        ///< the function to run
  int priority = 0;                        ///< lower runs first
};

}  // namespace torchbus
