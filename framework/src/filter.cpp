#include <torchbus/error.hpp>
#include <torchbus/filter.hpp>
#include <torchbus/state.hpp>

namespace torchbus {

std::int64_t occurrence(Event event, const State& state) noexcept {
  switch (event) {
    case Event::EpochStart:
    case Event::EpochEnd:
      return state.epoch + 1;
    case Event::StepStart:
    case Event::BeforeOptimizerStep:
    case Event::AfterOptimizerStep:
      return state.step + 1;
    case Event::StepEnd:
      return state.update_skipped ? 0 : state.step;
    case Event::BatchStart:
    case Event::BeforeBackward:
    case Event::AfterBackward:
    case Event::BatchEnd:
      return state.global_batch + 1;
    case Event::EvalBatchStart:
    case Event::EvalBatchEnd:
      return state.eval_batch + 1;
    case Event::ActionStart:
    case Event::ProcessGroupStart:
    case Event::ActionEnd:
    case Event::EvalStart:
    case Event::EvalEnd:
    case Event::Exception:
      return kNoCounter;
  }
  return kNoCounter;
}

Filter Filter::every(std::int64_t n) {
  TORCHBUS_CHECK(n >= 1, ConfigError, "every(n) needs n >= 1 (run at occurrences n, 2n, ...), got ",
                 n);
  return Filter(Kind::Every, n);
}

Filter Filter::once(std::int64_t n) {
  TORCHBUS_CHECK(n >= 1, ConfigError,
                 "once(n) needs n >= 1 (the 1-based occurrence to run at), got ", n);
  return Filter(Kind::Once, n);
}

Filter Filter::when(Predicate predicate) {
  TORCHBUS_CHECK(static_cast<bool>(predicate), ConfigError,
                 "when(predicate) needs a callable predicate, got an empty function");
  Filter filter(Kind::When, 1);
  filter.predicate_ = std::move(predicate);
  return filter;
}

bool Filter::passes(std::optional<Event> event, const State& state) {
  if (kind_ == Kind::All) return true;
  if (kind_ == Kind::When) return predicate_(state);
  std::int64_t count = event ? occurrence(*event, state) : kNoCounter;
  if (count == kNoCounter) count = ++own_count_;
  return count > 0 && (kind_ == Kind::Every ? count % n_ == 0 : count == n_);
}

}  // namespace torchbus
