#include <spdlog/spdlog.h>
#include <torchbus/bus.hpp>
#include <torchbus/decorators.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>

#include "bus/channels.hpp"
#include "bus/plumbing.hpp"
#include "support/exception_text.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

namespace torchbus {
namespace detail {

void log_guarded_error(std::string_view during) {
  logger()->error("a subscriber threw during {}: {}", during,
                  exception_text(std::current_exception()));
}

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
  RunStageMask skipped;  // the run stages it sits out on this channel

  void operator()(State& state) {
    if (in_skipped_stage(state, skipped)) return;
    observed(*channels, channel, id, [&] { slot(state); });
  }
};

/// A subscription behind a filter, as stored in its Signals2 slot; only the calls the filter lets
/// through are observed. The filter lives in the subscriber's ChannelSlot (one copy per channel),
/// where checkpoints read its count. The filter counts every call, also one the subscriber's run
/// stages then skip (as when a subscriber returned early by hand): its count does not depend on
/// them.
struct FilteredSlot {
  Filter* filter;
  EventBus::Slot slot;
  std::optional<Event> event;  // empty for custom events
  Channels* channels;
  std::size_t channel;
  SubscriberId id;
  RunStageMask skipped;

  void operator()(State& state) {
    if (filter->passes(event, state) && !in_skipped_stage(state, skipped)) {
      observed(*channels, channel, id, [&] { slot(state); });
    }
  }
};

/// A subscription under a Disable error policy, wrapped around its slot: its failures after
/// ActionStart are recorded (and end its subscription when it has no retry left) instead of
/// propagating.
struct IsolatedSlot {
  Signal::slot_function_type call;
  Channels* channels;
  std::size_t channel;
  SubscriberId id;

  void operator()(State& state) {
    try {
      call(state);
      channels->subscribers[id]->failures_in_a_row = 0;
    } catch (...) {
      if (handling_control_signal()) throw;  // a request, not a failure
      // At ActionStart nothing has run yet: a subscriber that cannot start (an unwritable folder,
      // an unreachable server) fails the action at once, whatever its policy.
      if (channel == index_of(Event::ActionStart)) throw;
      channels->record_failure(id, channels->channel_name(channel));
    }
  }
};

/// Wraps `slot`'s function in an IsolatedSlot when `placement`'s error policy does not propagate.
void apply_error_policy(ChannelSlot& slot, const Placement& placement, Channels& channels,
                        SubscriberId id) {
  if (placement.error_policy().propagates()) return;
  slot.function = IsolatedSlot{std::move(slot.function), &channels, slot.channel, id};
}

/// Connects `function` to `channel` at the back of group `group`.
boost::signals2::connection connect_slot(Channel& channel, int group,
                                         const Signal::slot_function_type& function) {
  return channel.signal->connect(group, function, boost::signals2::at_back);
}

}  // namespace

std::string_view Channels::channel_name(std::size_t channel) const {
  if (channel < kEventCount) return to_string(static_cast<Event>(channel));
  TORCHBUS_CHECK(channel - kEventCount < custom_names.size(), ConfigError, "channel ", channel,
                 " is neither a built-in event nor a registered custom event");
  return custom_names[channel - kEventCount];
}

std::string Channels::short_label(SubscriberId id) const {
  const auto& name = subscribers[id]->name;
  return name.empty() ? concat("subscriber #", id) : name;
}

std::vector<SubscriberId> Channels::members(std::size_t channel) const {
  std::vector<SubscriberId> found;
  for (SubscriberId id = 0; id < subscribers.size(); ++id) {
    const auto& subscriber = *subscribers[id];
    if (!subscriber.connected) continue;
    for (const auto& slot : subscriber.slots) {
      if (slot.channel == channel) found.push_back(id);
    }
  }
  return found;
}

const Subscriber* Channels::find_named(std::string_view name) const noexcept {
  for (const auto& subscriber : subscribers) {
    if (subscriber->connected && subscriber->name == name) return subscriber.get();
  }
  return nullptr;
}

void Channels::disconnect(SubscriberId id) {
  auto& subscriber = *subscribers[id];
  if (!subscriber.connected) return;
  subscriber.connected = false;
  for (auto& slot : subscriber.slots) {
    slot.block.reset();
    slot.connection.disconnect();
    slot.function.clear();  // releases what the subscription captured
    auto& channel = *channels[slot.channel];
    channel.dirty = channel.constrained;
    if (!subscriber.disabled) --live[slot.channel];
  }
  if (subscriber.callback != nullptr) {
    callbacks.erase(std::find_if(callbacks.begin(), callbacks.end(), [&](const auto& callback) {
      return callback.get() == subscriber.callback;
    }));
    subscriber.callback = nullptr;
  }
}

void Channels::record_failure(SubscriberId id, std::string_view event) {
  auto& subscriber = *subscribers[id];
  const auto label = short_label(id);
  const auto error = exception_text(std::current_exception());
  auto found = std::find_if(failures.begin(), failures.end(),
                            [&](const SubscriberFailure& f) { return f.subscriber == label; });
  if (found == failures.end()) {
    failures.push_back(SubscriberFailure{label, std::string(event), error, 0, false});
    found = failures.end() - 1;
  }
  ++found->failures;
  const auto retries = static_cast<std::uint32_t>(subscriber.placement.error_policy().retries());
  if (++subscriber.failures_in_a_row <= retries) {
    logger()->warn("{} threw during {} (failure {} in a row; disabled at {}): {}", label, event,
                   subscriber.failures_in_a_row, retries + 1, error);
    return;
  }
  logger()->error(
      "{} threw during {} and is disabled for the rest of the run (its error "
      "policy; the run goes on): {}",
      label, event, error);
  found->disabled = true;
  disable(id);
}

std::optional<SubscriberId> Channels::id_of(const Callback& callback) const noexcept {
  for (SubscriberId id = 0; id < subscribers.size(); ++id) {
    if (subscribers[id]->callback == &callback) return id;
  }
  return std::nullopt;
}

void Channels::disable(SubscriberId id) {
  auto& subscriber = *subscribers[id];
  if (subscriber.disabled) return;
  subscriber.disabled = true;
  for (auto& slot : subscriber.slots) {
    slot.block.emplace(slot.connection);  // reordering leaves it where it is, blocked
    --live[slot.channel];
  }
}

void Channels::reorder(std::size_t index) {
  auto& channel = *channels[index];
  const auto order = resolve_order(*this, index);
  int position = 0;
  for (const auto id : order) {
    if (subscribers[id]->disabled) continue;
    auto& slots = subscribers[id]->slots;
    auto& slot = *std::find_if(slots.begin(), slots.end(),
                               [&](const ChannelSlot& s) { return s.channel == index; });
    slot.connection.disconnect();
    slot.connection = connect_slot(channel, position++, slot.function);
  }
  channel.dirty = false;
}

}  // namespace detail

void CustomEventPublisher::emit(State& state) const {
  TORCHBUS_CHECK(bus_ != nullptr, ConfigError,
                 "this CustomEventPublisher is empty; EventBus::register_event returns one");
  bus_->emit_custom(event_, state);
}

EventBus::EventBus() : channels_(std::make_shared<detail::Channels>()) {
  live_ = &channels_->live;
  for (std::size_t i = 0; i < kEventCount; ++i) {
    channels_->channels.push_back(std::make_unique<detail::Channel>());
    channels_->channels.back()->signal =
        std::make_unique<detail::Signal>(detail::Dispatch{&channels_->guarded});
  }
}

EventBus::~EventBus() = default;

Connection EventBus::subscribe(const std::vector<std::size_t>& channel_indices, Filter filter,
                               Slot slot, Placement placement) {
  TORCHBUS_CHECK(static_cast<bool>(slot), ConfigError, "cannot subscribe an empty function");
  TORCHBUS_CHECK(!channel_indices.empty(), ConfigError, "cannot subscribe to an empty event list");
  auto& channels = *channels_;
  const auto& name = placement.name();
  TORCHBUS_CHECK(name.empty() || channels.find_named(name) == nullptr, ConfigError,
                 "a subscriber named '", name,
                 "' is already connected; callbacks and named subscriptions share one namespace");
  const SubscriberId id = channels.subscribers.size();
  auto subscriber = std::make_unique<detail::Subscriber>();
  subscriber->name = name;
  subscriber->placement = std::move(placement);
  for (const auto index : channel_indices) {
    detail::ChannelSlot entry;
    entry.channel = index;
    const auto skipped = detail::skipped_on(index, subscriber->placement);
    if (filter.passes_everything()) {
      entry.function = detail::PlainSlot{slot, &channels, index, id, skipped};
    } else {
      entry.filter = std::make_unique<Filter>(filter);
      const auto event =
          index < kEventCount ? std::optional(static_cast<Event>(index)) : std::nullopt;
      entry.function =
          detail::FilteredSlot{entry.filter.get(), slot, event, &channels, index, id, skipped};
    }
    detail::apply_error_policy(entry, subscriber->placement, channels, id);
    subscriber->slots.push_back(std::move(entry));
  }
  channels.subscribers.push_back(std::move(subscriber));
  attach(id);
  return Connection(channels_, id);
}

void EventBus::attach(SubscriberId id) {
  auto& channels = *channels_;
  auto& subscriber = *channels.subscribers[id];
  for (auto& slot : subscriber.slots) {
    auto& channel = *channels.channels[slot.channel];
    channel.constrained = channel.constrained || subscriber.constrained();
    channel.dirty = channel.constrained;  // reordered before the next emission
    slot.connection = detail::connect_slot(channel, subscriber.placement.priority(), slot.function);
    ++(*live_)[slot.channel];
  }
}

Connection EventBus::on(EventList events, Slot slot, Placement placement) {
  return on(events, Filter{}, std::move(slot), std::move(placement));
}

Connection EventBus::on(EventList events, Filter filter, Slot slot, Placement placement) {
  std::vector<std::size_t> indices;
  for (std::size_t i = 0; i < kEventCount; ++i) {
    if (events.contains(static_cast<Event>(i))) indices.push_back(i);
  }
  return subscribe(indices, std::move(filter), std::move(slot), std::move(placement));
}

Connection EventBus::on(CustomEvent event, Slot slot, Placement placement) {
  return on(event, Filter{}, std::move(slot), std::move(placement));
}

Connection EventBus::on(CustomEvent event, Filter filter, Slot slot, Placement placement) {
  TORCHBUS_CHECK(event.id < channels_->custom_names.size(), ConfigError, "custom event id ",
                 event.id, " is not registered on this bus (", channels_->custom_names.size(),
                 " registered)");
  return subscribe({kEventCount + event.id}, std::move(filter), std::move(slot),
                   std::move(placement));
}

Connection EventBus::on(std::string_view name, Slot slot, Placement placement) {
  return on(name, Filter{}, std::move(slot), std::move(placement));
}

Connection EventBus::on(std::string_view name, Filter filter, Slot slot, Placement placement) {
  return subscribe({channel_of(name)}, std::move(filter), std::move(slot), std::move(placement));
}

Connection EventBus::add(Subscription subscription) {
  if (const auto* events = std::get_if<EventList>(&subscription.event)) {
    return on(*events, std::move(subscription.filter), std::move(subscription.slot),
              std::move(subscription.placement));
  }
  return on(std::get<std::string>(subscription.event), std::move(subscription.filter),
            std::move(subscription.slot), std::move(subscription.placement));
}

CallbackConnection EventBus::add_callback(std::shared_ptr<Callback> callback, EventList hooks) {
  TORCHBUS_CHECK(callback != nullptr, ConfigError, "cannot add a null callback");
  hooks = hooks.without(callback->unused_hooks());
  auto& channels = *channels_;
  const auto name = callback->name();
  TORCHBUS_CHECK(channels.find_named(name) == nullptr, ConfigError, "a callback named '", name,
                 "' is already added; callback names identify their state in checkpoints and "
                 "must be unique (give one a name through Callback(name))");
  const SubscriberId id = channels.subscribers.size();
  auto subscriber = std::make_unique<detail::Subscriber>();
  subscriber->name = name;
  subscriber->callback = callback.get();
  subscriber->placement = callback->placement();
  auto* state = &channels;
#define TORCHBUS_HOOK_SLOT(Name, name)                                                    \
  if (hooks.contains(Event::Name)) {                                                      \
    detail::ChannelSlot entry;                                                            \
    entry.channel = index_of(Event::Name);                                                \
    const auto skipped = detail::skipped_on(entry.channel, subscriber->placement);        \
    entry.function = [target = callback, state, id, skipped](State& s) {                  \
      if (!target->runs_on(s.rank) || detail::in_skipped_stage(s, skipped)) return;       \
      detail::observed(*state, index_of(Event::Name), id, [&] { target->on_##name(s); }); \
    };                                                                                    \
    detail::apply_error_policy(entry, subscriber->placement, *state, id);                 \
    subscriber->slots.push_back(std::move(entry));                                        \
  }
  TORCHBUS_FOR_EACH_EVENT(TORCHBUS_HOOK_SLOT)
#undef TORCHBUS_HOOK_SLOT
  const auto connected_hooks = subscriber->slots.size();
  channels.subscribers.push_back(std::move(subscriber));
  attach(id);
  channels.callbacks.push_back(std::move(callback));
  return CallbackConnection(Connection(channels_, id), connected_hooks);
}

std::vector<Connection> EventBus::add_registered() {
  std::vector<Connection> connections;
  for (const auto& subscription : registered_subscriptions()) {
    const auto* custom = std::get_if<std::string>(&subscription.event);
    const auto& names = channels_->custom_names;
    if (custom && !find_event(*custom) &&
        std::find(names.begin(), names.end(), *custom) == names.end()) {
      channels_->pending_registered.push_back(subscription);  // connected when registered
    } else {
      connections.push_back(add(subscription));
    }
  }
  return connections;
}

void EventBus::remove(std::string_view name) {
  auto& channels = *channels_;
  for (SubscriberId id = 0; id < channels.subscribers.size(); ++id) {
    const auto& subscriber = *channels.subscribers[id];
    if (subscriber.connected && subscriber.name == name) {
      channels.disconnect(id);
      return;
    }
  }
  std::vector<std::string> present;
  for (const auto& callback : channels.callbacks) present.push_back(callback->name());
  throw ConfigError(detail::concat("cannot remove '", name,
                                   "': no callback or named subscription has that name; callbacks "
                                   "present: ",
                                   detail::join_or_none(present)));
}

CustomEventPublisher EventBus::register_event(std::string name) {
  TORCHBUS_CHECK(!name.empty(), ConfigError, "a custom event needs a non-empty name");
  TORCHBUS_CHECK(!find_event(name), ConfigError, "cannot register custom event '", name,
                 "': it is the name of a built-in event");
  auto& channels = *channels_;
  auto& names = channels.custom_names;
  TORCHBUS_CHECK(std::find(names.begin(), names.end(), name) == names.end(), ConfigError,
                 "custom event '", name, "' is already registered on this bus");
  names.push_back(std::move(name));
  channels.channels.push_back(std::make_unique<detail::Channel>());
  channels.channels.back()->signal =
      std::make_unique<detail::Signal>(detail::Dispatch{&channels.guarded});
  live_->custom.push_back(0);
  const CustomEvent event{names.size() - 1};
  auto& pending = channels.pending_registered;
  auto waiting = std::stable_partition(pending.begin(), pending.end(), [&](const Subscription& s) {
    return std::get<std::string>(s.event) != names.back();
  });
  std::vector<Subscription> ready(std::make_move_iterator(waiting),
                                  std::make_move_iterator(pending.end()));
  pending.erase(waiting, pending.end());
  for (auto& subscription : ready) add(std::move(subscription));
  return CustomEventPublisher(*this, event);
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

void EventBus::emit_custom(CustomEvent event, State& state) {
  TORCHBUS_CHECK(event.id < live_->custom.size(), ConfigError, "custom event id ", event.id,
                 " is not registered on this bus");
  if (live_->custom[event.id] != 0) dispatch(kEventCount + event.id, state);
}

void EventBus::dispatch(std::size_t index, State& state) {
  auto& channel = *channels_->channels[index];
  if (channel.dirty && channel.emitting == 0) channels_->reorder(index);
  ++channel.emitting;
  struct Done {
    std::uint32_t& emitting;
    ~Done() { --emitting; }
  } done{channel.emitting};
  (*channel.signal)(state);
}

void EventBus::dispatch_guarded(std::size_t index, State& state) {
  if ((*live_)[index] == 0) return;
  auto& guarded = channels_->guarded;
  const bool was_guarded = std::exchange(guarded, true);
  try {
    auto& channel = *channels_->channels[index];
    if (channel.dirty && channel.emitting == 0) {
      try {
        channels_->reorder(index);
      } catch (const ConfigError& error) {
        logger()->error("a guarded emission of {} runs its subscribers in their last order: {}",
                        channels_->channel_name(index), error.what());
        channel.dirty = false;
      }
    }
    dispatch(index, state);
  } catch (...) {
    guarded = was_guarded;
    throw;
  }
  guarded = was_guarded;
}

void EventBus::check_order() const {
  detail::check_constraint_names(*channels_);
  for (std::size_t index = 0; index < channels_->channels.size(); ++index) {
    if (channels_->channels[index]->constrained) detail::resolve_order(*channels_, index);
  }
}

std::string EventBus::describe(Event event) const {
  return describe_channel(index_of(event));
}

std::string EventBus::describe(CustomEvent event) const {
  TORCHBUS_CHECK(event.id < channels_->custom_names.size(), ConfigError, "custom event id ",
                 event.id, " is not registered on this bus");
  return describe_channel(kEventCount + event.id);
}

std::string EventBus::describe_channel(std::size_t index) const {
  const auto& channels = *channels_;
  const auto order = detail::resolve_order(channels, index);
  auto text = detail::concat(channels.channel_name(index), ": ", order.size(),
                             order.size() == 1 ? " subscriber" : " subscribers",
                             order.empty() ? "" : ", in the order they run:", "\n");
  // "a, b, role Metrics": the names and roles of one side of a placement's constraints.
  const auto targets = [](std::vector<std::string> names, const std::vector<Role>& roles) {
    for (const auto role : roles) names.push_back(detail::concat("role ", to_string(role)));
    return detail::join_or_none(names);
  };
  std::size_t position = 0;
  for (const auto id : order) {
    const auto& placement = channels.subscribers[id]->placement;
    text += detail::concat("  ", ++position, ". ", channels.short_label(id), " (");
    if (placement.role() != Role::Unassigned)
      text += detail::concat(to_string(placement.role()), ", ");
    text += detail::concat("priority ", placement.priority());
    if (!placement.after_names().empty() || !placement.after_roles().empty()) {
      text += ", after " + targets(placement.after_names(), placement.after_roles());
    }
    if (!placement.before_names().empty() || !placement.before_roles().empty()) {
      text += ", before " + targets(placement.before_names(), placement.before_roles());
    }
    text += ")\n";
  }
  return text;
}

std::size_t EventBus::subscriber_count(CustomEvent event) const {
  return event.id < live_->custom.size() ? live_->custom[event.id] : 0;
}

const std::vector<std::shared_ptr<Callback>>& EventBus::callbacks() const noexcept {
  return channels_->callbacks;
}

bool EventBus::is_disabled(const Callback& callback) const noexcept {
  const auto id = channels_->id_of(callback);
  return id && channels_->subscribers[*id]->disabled;
}

Callback* EventBus::find_callback(std::string_view name) const noexcept {
  for (const auto& callback : channels_->callbacks) {
    if (callback->name() == name) return callback.get();
  }
  return nullptr;
}

const std::vector<SubscriberFailure>& EventBus::subscriber_failures() const noexcept {
  return channels_->failures;
}

namespace detail {

bool run_callback_hook(EventBus& bus, const Callback& callback, std::string_view what,
                       const std::function<void()>& hook) {
  auto& channels = BusAccess::channels(bus);
  const auto id = channels.id_of(callback);
  if (!id || channels.subscribers[*id]->placement.error_policy().propagates()) {
    hook();
    return true;
  }
  try {
    hook();
    channels.subscribers[*id]->failures_in_a_row = 0;
    return true;
  } catch (...) {
    channels.record_failure(*id, what);
    return false;
  }
}

namespace {
/// Calls `visit(key, filter)` for the filter of every connected filtered subscription, keyed as
/// `filter_counts` documents.
template <typename Visit>
void for_each_filter(Channels& channels, Visit&& visit) {
  for (std::size_t index = 0; index < channels.channels.size(); ++index) {
    std::size_t position = 0;
    for (const auto id : channels.members(index)) {
      auto& subscriber = *channels.subscribers[id];
      for (auto& slot : subscriber.slots) {
        if (slot.channel != index || slot.filter == nullptr) continue;
        const auto event = channels.channel_name(index);
        auto key = subscriber.name.empty()        ? concat(event, "#", position)
                   : subscriber.slots.size() == 1 ? subscriber.name
                                                  : concat(subscriber.name, "@", event);
        visit(key, *slot.filter);
        ++position;
      }
    }
  }
}
}  // namespace

FilterCounts filter_counts(const EventBus& bus) {
  FilterCounts counts;
  for_each_filter(BusAccess::channels(bus), [&](std::string& key, const Filter& filter) {
    counts.emplace_back(std::move(key), filter.own_count());
  });
  return counts;
}

void restore_filter_counts(EventBus& bus, const FilterCounts& counts) {
  for_each_filter(BusAccess::channels(bus), [&](const std::string& key, Filter& filter) {
    const auto found = std::find_if(counts.begin(), counts.end(),
                                    [&](const auto& entry) { return entry.first == key; });
    if (found != counts.end()) filter.set_own_count(found->second);
  });
}

}  // namespace detail
}  // namespace torchbus
