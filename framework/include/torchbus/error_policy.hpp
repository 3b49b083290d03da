#pragma once

/// \file
/// Error policies: what the bus does when a subscriber throws. Propagate ends the emission and
/// the run, as any exception in the loop; Disable logs the error with the subscriber's name and
/// the event, and after the allowed retries disconnects the subscriber while the run goes on. Each
/// subscription declares one on its Placement or Callback, else follows its Role (loggers and
/// reports disable, everything else propagates). docs/events.md, "When a subscriber throws".

#include <torchbus/role.hpp>

#include <cstdint>
#include <string>

namespace torchbus {

/// What the bus does when a subscriber's call throws. The loop's control exceptions (StopTraining,
/// CancelEpoch, CancelBatch) are no failures and always pass; so does a failure at ActionStart,
/// before anything ran (a subscriber that cannot start fails the action at once).
class ErrorPolicy {
 public:
  /// The exception propagates: the emission stops and the run fails (Exception, then End events).
  static constexpr ErrorPolicy propagate() noexcept { return ErrorPolicy(false, 0); }
  /// The exception is logged and the run goes on; the subscriber is disconnected at its failure
  /// number `retries + 1` in a row (a call that returns resets the count). Throws ConfigError for
  /// a negative `retries`.
  static ErrorPolicy disable(int retries = 0);

  /// Whether the exception propagates.
  constexpr bool propagates() const noexcept { return !disables_; }
  /// Failures in a row that are logged and forgiven before the subscriber is disconnected.
  constexpr int retries() const noexcept { return retries_; }

  /// Two policies are equal when they do the same.
  friend constexpr bool operator==(ErrorPolicy a, ErrorPolicy b) noexcept {
    return a.disables_ == b.disables_ && a.retries_ == b.retries_;
  }
  friend constexpr bool operator!=(ErrorPolicy a, ErrorPolicy b) noexcept { return !(a == b); }

 private:
  friend ErrorPolicy default_error_policy(Role role) noexcept;
  constexpr ErrorPolicy(bool disables, int retries) noexcept
      : disables_(disables), retries_(retries) {}

  bool disables_;
  int retries_;
};

/// The policy of a subscriber of `role` that declares none: loggers (progress display included)
/// and reports disable at their first failure, so that a full disk or an unreachable tracker does
/// not end a run; checkpoints, monitors, schedulers, metrics, weight averaging and unassigned
/// subscribers propagate (a run that cannot save, or that would go on with wrong values, fails).
ErrorPolicy default_error_policy(Role role) noexcept;

/// A subscriber that threw under a Disable policy, as the bus recorded it.
struct SubscriberFailure {
  std::string subscriber;     ///< its label (`EventBus::subscriber_label`)
  std::string event;          ///< the event of its first failure
  std::string first_error;    ///< what its first failure said
  std::int64_t failures = 0;  ///< calls that threw
  bool disabled = false;      ///< whether it was disconnected (else it recovered before)
};

}  // namespace torchbus
