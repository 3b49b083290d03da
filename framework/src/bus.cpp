#include <spdlog/spdlog.h>
#include <boost/signals2/dummy_mutex.hpp>
#include <boost/signals2/signal_type.hpp>
#include <torchbus/bus.hpp>
#include <torchbus/control.hpp>
#include <torchbus/decorators.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>

#include <algorithm>
#include <chrono>
#include <utility>

namespace torchbus {
namespace detail {
namespace {

void log_guarded_error(std::string_view during) {
  try {
    throw;
  } catch (const std::exception& error) {
    logger()->error("a subscriber threw during {}: {}", during, error.what());
  } catch (...) {
    logger()->error("a subscriber threw a non-standard exception during {}", during);
  }
}

/// Signals2 combiner. Runs the slots in order; StopTraining/CancelBatch end only the slot that
/// threw and are rethrown after the others ran; in guarded mode every error is logged instead.
struct Dispatch {
  using result_type = void;
  const bool* guarded = nullptr;

  template <typename Iterator>
  void operator()(Iterator first, Iterator last) const {
    std::exception_ptr control;
    for (; first != last; ++first) {
      try {
        static_cast<void>(*first);
      } catch (const StopTraining&) {
        if (!control) control = std::current_exception();
      } catch (const CancelBatch&) {
        if (!control) control = std::current_exception();
      } catch (...) {
        if (!*guarded) throw;
        log_guarded_error("a guarded emission");
      }
    }
    if (control && !*guarded) std::rethrow_exception(control);
  }
};

namespace signals2 = boost::signals2;
using Signal = signals2::signal_type<void(State&), signals2::keywords::combiner_type<Dispatch>,
                                     signals2::keywords::group_type<int>,
                                     signals2::keywords::mutex_type<signals2::dummy_mutex>>::type;

}  // namespace

/// Who a subscriber id stands for, for `EventBus::subscriber_label`.
struct SubscriberInfo {
  const Callback* callback = nullptr;  // a class callback, or nullptr for a plain subscription
  int priority = 0;
};

struct Channels {
  bool guarded = false;
  DispatchObserver* observer = nullptr;
  std::uint32_t depth = 0;                       // observed subscriber calls in progress
  std::vector<std::unique_ptr<Signal>> signals;  // built-in events first, then custom events
  std::vector<std::string> custom_names;
  std::vector<SubscriberInfo> subscribers;  // by SubscriberId

  void add_signal() { signals.push_back(std::make_unique<Signal>(Dispatch{&guarded})); }
  SubscriberId add_subscriber(const Callback* callback, int priority) {
    subscribers.push_back({callback, priority});
    return subscribers.size() - 1;
  }
};

namespace {

/// Reports an observed call that started at `start` to the observer installed now, if any.
void report(Channels& channels, std::size_t channel, SubscriberId id,
            std::chrono::steady_clock::time_point start) noexcept {
  const auto elapsed = std::chrono::steady_clock::now() - start;
  --channels.depth;
  if (auto* observer = channels.observer) {
    observer->on_dispatch(DispatchTiming{
        channel, id, std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count(),
        channels.depth});
  }
}

/// Runs `call` timed, reporting it also when it throws.
template <typename Call>
void run_observed(Channels& channels, std::size_t channel, SubscriberId id, Call&& call) {
  const auto start = std::chrono::steady_clock::now();
  ++channels.depth;
  try {
    call();
  } catch (...) {
    report(channels, channel, id, start);
    throw;
  }
  report(channels, channel, id, start);
}

/// Runs one subscriber call; with no observer installed this adds one branch to the call.
template <typename Call>
void observed(Channels& channels, std::size_t channel, SubscriberId id, Call&& call) {
  if (channels.observer == nullptr) {
    call();
  } else {
    run_observed(channels, channel, id, std::forward<Call>(call));
  }
}

/// A plain subscription as stored in its Signals2 slot.
struct PlainSlot {
  EventBus::Slot slot;
  Channels* channels;
  std::size_t channel;
  SubscriberId id;

  void operator()(State& state) {
    observed(*channels, channel, id, [&] { slot(state); });
  }
};

/// A subscription behind a filter, as stored in its Signals2 slot; only the calls the filter lets
/// through are observed.
struct FilteredSlot {
  Filter filter;
  EventBus::Slot slot;
  std::optional<Event> event;  // empty for custom events
  Channels* channels;
  std::size_t channel;
  SubscriberId id;

  void operator()(State& state) {
    if (filter.passes(event, state)) observed(*channels, channel, id, [&] { slot(state); });
  }
};

}  // namespace
}  // namespace detail

EventBus::EventBus()
    : live_(std::make_shared<detail::LiveCounts>()),
      channels_(std::make_unique<detail::Channels>()) {
  for (std::size_t i = 0; i < kEventCount; ++i) channels_->add_signal();
}

EventBus::~EventBus() = default;

namespace {
template <typename Function>
boost::signals2::connection connect_slot(detail::Signal& signal, int priority,
                                         Function&& function) {
  return signal.connect(priority, std::forward<Function>(function), boost::signals2::at_back);
}
}  // namespace

Connection EventBus::connect(std::size_t channel, Slot slot, int priority) {
  TORCHBUS_CHECK(static_cast<bool>(slot), ConfigError, "cannot subscribe an empty function");
  auto& channels = *channels_;
  const auto id = channels.add_subscriber(nullptr, priority);
  auto connection = connect_slot(*channels.signals[channel], priority,
                                 detail::PlainSlot{std::move(slot), &channels, channel, id});
  ++(*live_)[channel];
  return Connection(std::move(connection), live_, channel);
}

Connection EventBus::connect(std::size_t channel, std::optional<Event> event, Filter filter,
                             Slot slot, int priority) {
  if (filter.passes_everything()) return connect(channel, std::move(slot), priority);
  TORCHBUS_CHECK(static_cast<bool>(slot), ConfigError, "cannot subscribe an empty function");
  auto& channels = *channels_;
  const auto id = channels.add_subscriber(nullptr, priority);
  auto connection = connect_slot(
      *channels.signals[channel], priority,
      detail::FilteredSlot{std::move(filter), std::move(slot), event, &channels, channel, id});
  ++(*live_)[channel];
  return Connection(std::move(connection), live_, channel);
}

Connection EventBus::on(Event event, Slot slot, int priority) {
  return connect(index_of(event), std::move(slot), priority);
}

Connection EventBus::on(Event event, Filter filter, Slot slot, int priority) {
  return connect(index_of(event), event, std::move(filter), std::move(slot), priority);
}

Connection EventBus::on(CustomEvent event, Slot slot, int priority) {
  return on(event, Filter{}, std::move(slot), priority);
}

Connection EventBus::on(CustomEvent event, Filter filter, Slot slot, int priority) {
  TORCHBUS_CHECK(event.id < channels_->custom_names.size(), ConfigError, "custom event id ",
                 event.id, " is not registered on this bus (", channels_->custom_names.size(),
                 " registered)");
  return connect(kEventCount + event.id, std::nullopt, std::move(filter), std::move(slot),
                 priority);
}

Connection EventBus::on(std::string_view name, Slot slot, int priority) {
  return on(name, Filter{}, std::move(slot), priority);
}

Connection EventBus::on(std::string_view name, Filter filter, Slot slot, int priority) {
  const auto channel = channel_of(name);
  const auto event =
      channel < kEventCount ? std::optional(static_cast<Event>(channel)) : std::nullopt;
  return connect(channel, event, std::move(filter), std::move(slot), priority);
}

Connection EventBus::add(Subscription subscription) {
  if (const auto* event = std::get_if<Event>(&subscription.event)) {
    return on(*event, std::move(subscription.filter), std::move(subscription.slot),
              subscription.priority);
  }
  return on(std::get<std::string>(subscription.event), std::move(subscription.filter),
            std::move(subscription.slot), subscription.priority);
}

CallbackConnection EventBus::add(std::shared_ptr<Callback> callback) {
  TORCHBUS_CHECK(callback != nullptr, ConfigError, "cannot add a null callback");
  const auto name = callback->name();
  TORCHBUS_CHECK(find_callback(name) == nullptr, ConfigError, "a callback named '", name,
                 "' is already added; callback names identify their state in checkpoints and "
                 "must be unique (give one a name through Callback(name))");
  const auto hooks = overridden_hooks(*callback);
  std::vector<Connection> connections;
  auto* channels = channels_.get();
  const int priority = callback->priority();
  const auto id = channels->add_subscriber(callback.get(), priority);
#define TORCHBUS_CONNECT_HOOK(Name, name)                                                   \
  if (hooks.test(index_of(Event::Name))) {                                                  \
    auto connection = connect_slot(*channels->signals[index_of(Event::Name)], priority,     \
                                   [target = callback.get(), channels, id](State& state) {  \
                                     if (!target->runs_on(state.rank)) return;              \
                                     detail::observed(*channels, index_of(Event::Name), id, \
                                                      [&] { target->on_##name(state); });   \
                                   });                                                      \
    ++(*live_)[index_of(Event::Name)];                                                      \
    connections.emplace_back(std::move(connection), live_, index_of(Event::Name));          \
  }
  TORCHBUS_FOR_EACH_EVENT(TORCHBUS_CONNECT_HOOK)
#undef TORCHBUS_CONNECT_HOOK
  callbacks_.push_back(std::move(callback));
  return CallbackConnection(std::move(connections));
}

std::vector<Connection> EventBus::add_registered() {
  std::vector<Connection> connections;
  for (const auto& subscription : registered_subscriptions()) {
    const auto* custom = std::get_if<std::string>(&subscription.event);
    const auto& names = channels_->custom_names;
    if (custom && !find_event(*custom) &&
        std::find(names.begin(), names.end(), *custom) == names.end()) {
      pending_registered_.push_back(subscription);  // connected when the event is registered
    } else {
      connections.push_back(add(subscription));
    }
  }
  return connections;
}

CustomEvent EventBus::register_event(std::string name) {
  TORCHBUS_CHECK(!name.empty(), ConfigError, "a custom event needs a non-empty name");
  TORCHBUS_CHECK(!find_event(name), ConfigError, "cannot register custom event '", name,
                 "': it is the name of a built-in event");
  auto& names = channels_->custom_names;
  TORCHBUS_CHECK(std::find(names.begin(), names.end(), name) == names.end(), ConfigError,
                 "custom event '", name, "' is already registered on this bus");
  names.push_back(std::move(name));
  channels_->add_signal();
  live_->custom.push_back(0);
  const CustomEvent event{names.size() - 1};
  auto waiting = std::stable_partition(
      pending_registered_.begin(), pending_registered_.end(),
      [&](const Subscription& s) { return std::get<std::string>(s.event) != names.back(); });
  for (auto it = waiting; it != pending_registered_.end(); ++it) add(std::move(*it));
  pending_registered_.erase(waiting, pending_registered_.end());
  return event;
}

CustomEvent EventBus::custom_event(std::string_view name) const {
  const auto& names = channels_->custom_names;
  const auto found = std::find(names.begin(), names.end(), name);
  TORCHBUS_CHECK(found != names.end(), ConfigError, "unknown custom event '", name,
                 "'; registered custom events: ", detail::join_or_none(names),
                 " (register one with EventBus::register_event)");
  return CustomEvent{static_cast<std::size_t>(found - names.begin())};
}

const std::string& EventBus::name_of(CustomEvent event) const {
  return channels_->custom_names.at(event.id);
}

std::size_t EventBus::channel_of(std::string_view name) const {
  if (auto event = find_event(name)) return index_of(*event);
  return kEventCount + custom_event(name).id;
}

void EventBus::emit(CustomEvent event, State& state) {
  TORCHBUS_CHECK(event.id < live_->custom.size(), ConfigError, "custom event id ", event.id,
                 " is not registered on this bus");
  if (live_->custom[event.id] != 0) dispatch(kEventCount + event.id, state);
}

void EventBus::emit(std::string_view name, State& state) {
  const auto channel = channel_of(name);
  if ((*live_)[channel] != 0) dispatch(channel, state);
}

void EventBus::dispatch(std::size_t channel, State& state) {
  (*channels_->signals[channel])(state);
}

void EventBus::emit_guarded(Event event, State& state) {
  if (live_->builtin[index_of(event)] == 0) return;
  const bool was_guarded = std::exchange(channels_->guarded, true);
  (*channels_->signals[index_of(event)])(state);
  channels_->guarded = was_guarded;
}

std::size_t EventBus::subscriber_count(CustomEvent event) const {
  return event.id < live_->custom.size() ? live_->custom[event.id] : 0;
}

void EventBus::set_observer(DispatchObserver* observer) {
  auto& installed = channels_->observer;
  TORCHBUS_CHECK(observer == nullptr || installed == nullptr || installed == observer, ConfigError,
                 "this bus already has a dispatch observer (one per bus); remove it with "
                 "set_observer(nullptr) before installing another");
  installed = observer;
}

DispatchObserver* EventBus::observer() const noexcept {
  return channels_->observer;
}

std::string EventBus::subscriber_label(SubscriberId id) const {
  const auto& subscribers = channels_->subscribers;
  TORCHBUS_CHECK(id < subscribers.size(), ConfigError, "no subscriber has id ", id,
                 " on this bus (it has given out ", subscribers.size(), " ids)");
  const auto& info = subscribers[id];
  if (info.callback != nullptr) return info.callback->name();
  return detail::concat("subscriber #", id, " (priority ", info.priority, ")");
}

SubscriberId EventBus::next_subscriber_id() const noexcept {
  return channels_->subscribers.size();
}

std::string_view EventBus::channel_name(std::size_t channel) const {
  if (channel < kEventCount) return to_string(static_cast<Event>(channel));
  const auto& names = channels_->custom_names;
  TORCHBUS_CHECK(channel - kEventCount < names.size(), ConfigError, "channel ", channel,
                 " is neither a built-in event nor a registered custom event");
  return names[channel - kEventCount];
}

Callback* EventBus::find_callback(std::string_view name) const noexcept {
  for (const auto& callback : callbacks_) {
    if (callback->name() == name) return callback.get();
  }
  return nullptr;
}

}  // namespace torchbus
