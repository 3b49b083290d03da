#pragma once

/// \file
/// Control-flow signals a slot or a train step may throw (see docs/events.md for what still fires).

#include <exception>
#include <string>
#include <utility>

namespace torchbus {

/// Ends the run at the next step boundary, like `state.request_stop(reason)`.
class StopTraining : public std::exception {
 public:
  /// A stop with the reason recorded in `State::stop_reason()`.
  explicit StopTraining(std::string reason = "StopTraining") : reason_(std::move(reason)) {}
  /// Why the run stops.
  const std::string& reason() const noexcept { return reason_; }
  const char* what() const noexcept override { return reason_.c_str(); }

 private:
  std::string reason_;
};

/// Ends the current epoch at the next batch boundary, like `state.request_epoch_end(reason)`:
/// the step in progress applies the batches it has, then the epoch's validation and EpochEnd.
class CancelEpoch : public std::exception {
 public:
  /// An epoch end with the reason recorded in `State::epoch_end_reason()`.
  explicit CancelEpoch(std::string reason = "CancelEpoch") : reason_(std::move(reason)) {}
  /// Why the epoch ends.
  const std::string& reason() const noexcept { return reason_; }
  const char* what() const noexcept override { return reason_.c_str(); }

 private:
  std::string reason_;
};

/// Skips the rest of the current batch: no backward for it. Valid up to BeforeBackward.
class CancelBatch : public std::exception {
 public:
  const char* what() const noexcept override { return "CancelBatch"; }
};

}  // namespace torchbus
