#pragma once

/// \file
/// The built-in events of the training protocol (see docs/events.md for their order).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

/// X-macro over every built-in event: X(EnumName, snake_name). The one list that the enum, the
/// names, the `Callback::on_<name>` hooks and the `on_<name>` decorator helpers are generated from.
#define TORCHBUS_FOR_EACH_EVENT(X)              \
  X(ActionStart, action_start)                  \
  X(ProcessGroupStart, process_group_start)     \
  X(EpochStart, epoch_start)                    \
  X(StepStart, step_start)                      \
  X(BatchStart, batch_start)                    \
  X(BeforeBackward, before_backward)            \
  X(AfterBackward, after_backward)              \
  X(BatchEnd, batch_end)                        \
  X(BeforeOptimizerStep, before_optimizer_step) \
  X(AfterOptimizerStep, after_optimizer_step)   \
  X(StepEnd, step_end)                          \
  X(EvalStart, eval_start)                      \
  X(EvalBatchStart, eval_batch_start)           \
  X(EvalBatchEnd, eval_batch_end)               \
  X(EvalEnd, eval_end)                          \
  X(PredictStart, predict_start)                \
  X(PredictBatchStart, predict_batch_start)     \
  X(PredictBatchEnd, predict_batch_end)         \
  X(PredictEnd, predict_end)                    \
  X(EpochEnd, epoch_end)                        \
  X(ActionEnd, action_end)                      \
  X(Exception, exception)

namespace torchbus {

/// A built-in event of the training protocol.
enum class Event : std::uint8_t {
#define TORCHBUS_EVENT_ENUMERATOR(Name, name) Name,
  TORCHBUS_FOR_EACH_EVENT(TORCHBUS_EVENT_ENUMERATOR)
#undef TORCHBUS_EVENT_ENUMERATOR
};

/// Number of built-in events.
inline constexpr std::size_t kEventCount = static_cast<std::size_t>(Event::Exception) + 1;

/// Position of an event in `[0, kEventCount)`.
constexpr std::size_t index_of(Event event) noexcept {
  return static_cast<std::size_t>(event);
}

/// The event's CamelCase name, e.g. "StepEnd".
std::string_view to_string(Event event) noexcept;

/// The event's snake_case name, e.g. "step_end" (as in `Callback::on_step_end`).
std::string_view snake_name(Event event) noexcept;

/// The event named `name` (CamelCase or snake_case), or nothing.
std::optional<Event> find_event(std::string_view name) noexcept;

/// The event named `name`; throws ConfigError listing every valid name otherwise.
Event event_from_string(std::string_view name);

}  // namespace torchbus
