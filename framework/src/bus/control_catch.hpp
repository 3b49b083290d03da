#pragma once

/// \file
/// The one place the framework catches the control exceptions (`StopTraining`, `CancelEpoch`,
/// `CancelBatch`, all a `ControlSignal`); each caller says what a signal means where it lands
/// (private to torchbus_framework).

#include <torchbus/control.hpp>

namespace torchbus::detail {

/// Runs `body`. A ControlSignal escaping it is handed to `on_signal`, which runs inside the
/// handler (so `std::current_exception()` is that signal and `throw;` rethrows it), and the call
/// returns false; anything else propagates. Returns true when `body` returned.
template <typename Body, typename OnSignal>
bool catch_control(Body&& body, OnSignal&& on_signal) {
  try {
    body();
    return true;
  } catch (const ControlSignal& signal) {
    on_signal(signal);
    return false;
  }
}

/// Inside a `catch (...)`: whether the exception being handled is a ControlSignal.
inline bool handling_control_signal() {
  try {
    throw;
  } catch (const ControlSignal&) {
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace torchbus::detail
