#include <torchbus/error.hpp>
#include <torchbus/event.hpp>

#include <array>
#include <string>

namespace torchbus {
namespace {

constexpr std::array<std::string_view, kEventCount> kNames = {
#define TORCHBUS_EVENT_NAME(Name, name) #Name,
    TORCHBUS_FOR_EACH_EVENT(TORCHBUS_EVENT_NAME)
#undef TORCHBUS_EVENT_NAME
};

constexpr std::array<std::string_view, kEventCount> kSnakeNames = {
#define TORCHBUS_EVENT_SNAKE_NAME(Name, name) #name,
    TORCHBUS_FOR_EACH_EVENT(TORCHBUS_EVENT_SNAKE_NAME)
#undef TORCHBUS_EVENT_SNAKE_NAME
};

}  // namespace

std::string_view to_string(Event event) noexcept {
  return kNames[index_of(event)];
}

std::string_view snake_name(Event event) noexcept {
  return kSnakeNames[index_of(event)];
}

std::optional<Event> find_event(std::string_view name) noexcept {
  for (std::size_t i = 0; i < kEventCount; ++i) {
    if (name == kNames[i] || name == kSnakeNames[i]) return static_cast<Event>(i);
  }
  return std::nullopt;
}

Event event_from_string(std::string_view name) {
  if (auto event = find_event(name)) return *event;
  const std::vector<std::string> valid(kNames.begin(), kNames.end());
  throw ConfigError(detail::concat("unknown event '", name,
                                   "'; expected one of: ", detail::join_or_none(valid),
                                   " (or their snake_case names, e.g. step_end)"));
}

}  // namespace torchbus
