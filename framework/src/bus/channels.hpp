#pragma once

/// \file
/// The state behind an EventBus (private to torchbus_framework): one Signals2 signal per channel
/// (built-in events first, then custom events), the subscribers by id, the callback registry.

#include <boost/signals2/dummy_mutex.hpp>
#include <boost/signals2/shared_connection_block.hpp>
#include <boost/signals2/signal_type.hpp>
#include <torchbus/bus.hpp>
#include <torchbus/dispatch_observer.hpp>

#include "bus/control_catch.hpp"

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace torchbus::detail {

/// Logs the exception being handled as thrown by a subscriber during `during`.
void log_guarded_error(std::string_view during);

/// Whether `state` is in one of the run stages of `skipped` (one branch: the trainer's flags as
/// bits).
inline bool in_skipped_stage(const State& state, RunStageMask skipped) noexcept {
  const auto current =
      static_cast<RunStageMask>((state.sanity_checking ? mask_of(RunStage::SanityCheck) : 0) |
                                (state.fast_dev_run ? mask_of(RunStage::FastDevRun) : 0));
  return (current & skipped) != 0;
}

/// The run stages a subscriber placed by `placement` sits out on `channel`. ActionStart and
/// ActionEnd belong to the action, never to the sanity check inside it: an exception escaping the
/// sanity check still closes the action at ActionEnd, with State::sanity_checking set.
inline RunStageMask skipped_on(std::size_t channel, const Placement& placement) noexcept {
  auto skipped = placement.skipped_stages();
  if (channel == index_of(Event::ActionStart) || channel == index_of(Event::ActionEnd)) {
    skipped &= static_cast<RunStageMask>(~mask_of(RunStage::SanityCheck));
  }
  return skipped;
}

/// Signals2 combiner. Runs the slots in order; StopTraining/CancelEpoch/CancelBatch end only the
/// slot that threw and are rethrown after the others ran; in guarded mode every error is logged
/// instead.
struct Dispatch {
  using result_type = void;
  const bool* guarded = nullptr;

  template <typename Iterator>
  void operator()(Iterator first, Iterator last) const {
    std::exception_ptr control;
    for (; first != last; ++first) {
      try {
        catch_control([&] { static_cast<void>(*first); },
                      [&](const ControlSignal&) {  // applied by EventFlow once the others ran
                        if (!control) control = std::current_exception();
                      });
      } catch (...) {
        if (!*guarded) throw;
        log_guarded_error("a guarded emission");
      }
    }
    if (control && !*guarded) std::rethrow_exception(control);
  }
};

using Signal = boost::signals2::signal_type<
    void(State&), boost::signals2::keywords::combiner_type<Dispatch>,
    boost::signals2::keywords::group_type<int>,
    boost::signals2::keywords::mutex_type<boost::signals2::dummy_mutex>>::type;

/// A subscriber's presence on one channel.
struct ChannelSlot {
  std::size_t channel = 0;
  Signal::slot_function_type function;  // connected again when the channel is reordered
  boost::signals2::connection connection;
  std::optional<boost::signals2::shared_connection_block> block;  // set once its policy disables it
  std::unique_ptr<Filter> filter;  // this channel's copy, null when it lets everything through
};

/// A subscription or a class callback, by SubscriberId.
struct Subscriber {
  std::string name;  // the callback's or the subscription's name; empty for an unnamed one
  const Callback* callback = nullptr;  // the class callback, while it is connected
  Placement placement;                 // priority, role, after / before (its name is in `name`)
  std::vector<ChannelSlot> slots;
  bool connected = true;
  bool disabled = false;  // disconnected by its error policy; still added (name, state, filters)
  std::uint32_t failures_in_a_row = 0;  // under a Disable policy; reset by a call that returns

  /// Whether its order needs resolve_order: it has a role or an after / before constraint.
  bool constrained() const noexcept {
    return placement.role() != Role::Unassigned || !placement.after_names().empty() ||
           !placement.before_names().empty() || !placement.after_roles().empty() ||
           !placement.before_roles().empty();
  }
};

/// One event's signal and who is on it.
struct Channel {
  std::unique_ptr<Signal> signal;
  bool constrained = false;    // a member has a role or after/before: order by resolve_order
  bool dirty = false;          // constrained and changed since the last reordering
  std::uint32_t emitting = 0;  // emissions of this channel in progress
};

struct Channels {
  bool guarded = false;
  DispatchObserver* observer = nullptr;
  std::uint32_t depth = 0;  // observed subscriber calls in progress
  LiveCounts live;
  std::vector<std::unique_ptr<Channel>> channels;  // built-in events first, then custom events
  std::vector<std::string> custom_names;
  std::vector<std::unique_ptr<Subscriber>> subscribers;  // by SubscriberId
  std::vector<std::shared_ptr<Callback>> callbacks;      // the registry, in order of addition
  std::vector<Subscription> pending_registered;  // registered, waiting for their custom event
  std::vector<SubscriberFailure> failures;       // by first failure (EventBus::subscriber_failures)

  /// Name of a channel ("StepEnd", or the custom event's name).
  std::string_view channel_name(std::size_t channel) const;
  /// A subscriber's name, or "subscriber #<id>".
  std::string short_label(SubscriberId id) const;
  /// The connected subscribers of `channel` (disabled ones included), in registration order.
  std::vector<SubscriberId> members(std::size_t channel) const;
  /// The connected subscriber called `name`, or nullptr.
  const Subscriber* find_named(std::string_view name) const noexcept;
  /// Disconnects subscriber `id` from every channel and removes a callback from the registry.
  void disconnect(SubscriberId id);
  /// Records that subscriber `id` threw the exception being handled during `event` (an event's
  /// name, or a callback hook's) under a Disable policy; logs it, and disables the subscriber when
  /// it has no retry left.
  void record_failure(SubscriberId id, std::string_view event);
  /// The id of the class callback `callback` (also when disabled); none when it is not added.
  std::optional<SubscriberId> id_of(const Callback& callback) const noexcept;
  /// Blocks subscriber `id`'s slots for good (Signals2's shared_connection_block), keeping it
  /// added: its name stays taken, a callback stays in the registry (its state in checkpoints) and
  /// its filters keep their keys.
  void disable(SubscriberId id);
  /// Reconnects the slots of `channel` in their resolved order (not while it is emitted).
  void reorder(std::size_t channel);
};

/// The one door to a bus's private state, for the plumbing functions of bus_plumbing.hpp and
/// dispatch_observer.hpp.
struct BusAccess {
  static Channels& channels(const EventBus& bus) noexcept { return *bus.channels_; }
};

/// The members of `channel` in the order they run: a stable topological order of their
/// after/before constraints (constraints naming a non-member or a role no member has impose
/// nothing), ties broken by priority, then role, then registration order. Throws ConfigError
/// naming the members of a cycle.
std::vector<SubscriberId> resolve_order(const Channels& channels, std::size_t channel);

/// Throws ConfigError when a constraint names no connected subscriber (naming who declared it).
void check_constraint_names(const Channels& channels);

}  // namespace torchbus::detail
