#pragma once

/// \file
/// What the trainer's checkpoints and error policies need from a bus (private to
/// torchbus_framework; its tests use it too): the filters' counts, and callback hooks run under
/// their callback's error policy.

#include <torchbus/bus.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace torchbus::detail {

/// Filter counts by subscription key (see `filter_counts`).
using FilterCounts = std::vector<std::pair<std::string, std::int64_t>>;

/// The own counts of the filters of `bus`'s connected subscriptions (for checkpoints), keyed by
/// the subscription's name (`<name>@<event>` when it names several events), else by
/// `<event>#<i>`: its position among the filtered subscriptions of the event, in registration
/// order.
FilterCounts filter_counts(const EventBus& bus);

/// Restores counts saved by `filter_counts` into the subscriptions with the same keys (the other
/// keys are ignored).
void restore_filter_counts(EventBus& bus, const FilterCounts& counts);

/// Runs `hook`, a call of `callback` outside the events (`what`: e.g. "on_save_checkpoint"),
/// under the callback's error policy: when the policy disables, a failure is recorded as one
/// during `what` (disabling the callback when no retry is left) instead of propagating. Returns
/// whether the hook returned.
bool run_callback_hook(EventBus& bus, const Callback& callback, std::string_view what,
                       const std::function<void()>& hook);

}  // namespace torchbus::detail
