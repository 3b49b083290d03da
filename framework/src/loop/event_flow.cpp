#include <torchbus/control.hpp>
#include <torchbus/distributed.hpp>
#include <torchbus/error.hpp>

#include "loop/event_flow.hpp"
#include "support/exception_text.hpp"

namespace torchbus {
void EventFlow::fire(Event event) {
  publish_progress();
  detail::catch_control(
      [&] { publisher_.emit(event, state_); },
      [&](const ControlSignal& signal) {
        TORCHBUS_CHECK(signal.kind() != ControlKind::BatchCancel || event == Event::BatchStart ||
                           event == Event::BeforeBackward || event == Event::EvalBatchStart ||
                           event == Event::PredictBatchStart,
                       ConfigError, "CancelBatch raised at ", to_string(event),
                       ": a batch can only be cancelled before its backward: at "
                       "BatchStart, in the train, eval or predict step, at BeforeBackward, at "
                       "EvalBatchStart or at PredictBatchStart");
        apply(signal);
      });
}

void EventFlow::apply(const ControlSignal& signal) {
  switch (signal.kind()) {
    case ControlKind::Stop:
      state_.request_stop(signal.reason());
      break;
    case ControlKind::EpochEnd:
      state_.request_epoch_end(signal.reason());
      break;
    case ControlKind::BatchCancel:
      detail::StateWriter::set_cancelled(state_, true);
      break;
  }
}

void EventFlow::open(Event start, Event end) {
  open_ends_.push_back(end);
  fire(start);
}

void EventFlow::close() {
  const Event end = open_ends_.back();
  open_ends_.pop_back();
  fire(end);
}

void EventFlow::ensure_idle() const {
  TORCHBUS_CHECK(!running_, ConfigError,
                 "fit() or evaluate() was called while this trainer is already running one; "
                 "start it from outside its subscribers");
}

void EventFlow::run_action(const std::function<void()>& body, ProcessGroup* group) {
  ensure_idle();
  publisher_.bus().check_order();  // an unknown name or a cycle fails before ActionStart
  running_ = true;
  struct Finish {
    bool& running;
    ~Finish() { running = false; }
  } finish{running_};
  state_.clear_epoch_end();
  detail::StateWriter::set_error(state_, nullptr, "");
  open_ends_.clear();
  try {
    open(Event::ActionStart, Event::ActionEnd);
    body();
    close();
  } catch (...) {
    const auto error = std::current_exception();
    detail::StateWriter::set_error(state_, error, detail::exception_text(error));
    if (group != nullptr) group->report_failure(state_.error_message);
    publisher_.emit_guarded(Event::Exception, state_);
    while (!open_ends_.empty()) {
      const Event end = open_ends_.back();
      open_ends_.pop_back();
      publisher_.emit_guarded(end, state_);
    }
    throw;
  }
}

}  // namespace torchbus
