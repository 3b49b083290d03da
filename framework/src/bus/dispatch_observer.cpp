#include <torchbus/dispatch_observer.hpp>
#include <torchbus/error.hpp>

#include "bus/channels.hpp"

namespace torchbus {

using detail::BusAccess;

void set_dispatch_observer(EventBus& bus, DispatchObserver* observer) {
  auto& installed = BusAccess::channels(bus).observer;
  TORCHBUS_CHECK(observer == nullptr || installed == nullptr || installed == observer, ConfigError,
                 "this bus already has a dispatch observer (one per bus); remove it with "
                 "set_dispatch_observer(bus, nullptr) before installing another");
  installed = observer;
}

DispatchObserver* dispatch_observer(const EventBus& bus) noexcept {
  return BusAccess::channels(bus).observer;
}

std::string subscriber_label(const EventBus& bus, SubscriberId id) {
  const auto& subscribers = BusAccess::channels(bus).subscribers;
  TORCHBUS_CHECK(id < subscribers.size(), ConfigError, "no subscriber has id ", id,
                 " on this bus (it has given out ", subscribers.size(), " ids)");
  const auto& subscriber = *subscribers[id];
  if (!subscriber.name.empty()) return subscriber.name;
  return detail::concat("subscriber #", id, " (priority ", subscriber.placement.priority(), ")");
}

SubscriberId next_subscriber_id(const EventBus& bus) noexcept {
  return BusAccess::channels(bus).subscribers.size();
}

std::string_view channel_name(const EventBus& bus, std::size_t channel) {
  return BusAccess::channels(bus).channel_name(channel);
}

std::vector<SubscriberId> dispatch_order(const EventBus& bus, std::size_t channel) {
  const auto& channels = BusAccess::channels(bus);
  channels.channel_name(channel);  // throws ConfigError for a channel that does not exist
  return detail::resolve_order(channels, channel);
}

}  // namespace torchbus
