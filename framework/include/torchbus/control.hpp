#pragma once

/// \file
/// Control-flow signals a slot or a train step may throw (see docs/events.md for what still fires).

#include <exception>
#include <string>
#include <utility>

namespace torchbus {

/// What a ControlSignal asks of the run.
enum class ControlKind {
  Stop,         ///< StopTraining: `state.request_stop(reason)`
  EpochEnd,     ///< CancelEpoch: `state.request_epoch_end(reason)`
  BatchCancel,  ///< CancelBatch: `state.cancelled = true` (up to BeforeBackward)
};

/// The base of StopTraining, CancelEpoch and CancelBatch: a request thrown rather than set on the
/// state. The trainer catches it by this type and turns it into the request its kind names.
class ControlSignal : public std::exception {
 public:
  /// What it asks for.
  ControlKind kind() const noexcept { return kind_; }
  /// Why (the stop's or epoch end's reason).
  const std::string& reason() const noexcept { return reason_; }
  const char* what() const noexcept override { return reason_.c_str(); }

 protected:
  ControlSignal(ControlKind kind, std::string reason) : kind_(kind), reason_(std::move(reason)) {}

 private:
  ControlKind kind_;
  std::string reason_;
};

/// Ends the run at the next step boundary, like `state.request_stop(reason)`.
class StopTraining : public ControlSignal {
 public:
  /// A stop with the reason recorded in `State::stop_reason()`.
  explicit StopTraining(std::string reason = "StopTraining")
      : ControlSignal(ControlKind::Stop, std::move(reason)) {}
};

/// Ends the current epoch at the next batch boundary, like `state.request_epoch_end(reason)`:
/// the step in progress applies the batches it has, then the epoch's validation and EpochEnd.
class CancelEpoch : public ControlSignal {
 public:
  /// An epoch end with the reason recorded in `State::epoch_end_reason()`.
  explicit CancelEpoch(std::string reason = "CancelEpoch")
      : ControlSignal(ControlKind::EpochEnd, std::move(reason)) {}
};

/// Skips the rest of the current batch: no backward for it. Valid up to BeforeBackward.
class CancelBatch : public ControlSignal {
 public:
  CancelBatch() : ControlSignal(ControlKind::BatchCancel, "CancelBatch") {}
};

}  // namespace torchbus
