#pragma once

/// \file
/// Placement: where a subscription runs among the subscribers of its event: after or before named
/// subscribers or roles, then by priority, then by role, then in registration order; and the
/// run stages it sits out and what happens when it throws. E.g.
/// `bus.on(Event::StepEnd, fn, torchbus::after("early_stopping").named("my_logger"))`.

#include <torchbus/error_policy.hpp>
#include <torchbus/role.hpp>
#include <torchbus/run_stage.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace torchbus {

/// Ordering of a subscription: an optional name and role others can refer to, the names and roles
/// it must run after or before, and a priority (lower first) that breaks the remaining ties. Also
/// the run stages it sits out (those its role skips by default, unless declared otherwise) and its
/// error policy (its role's default unless declared).
class Placement {
 public:
  /// Priority 0, no name, no constraint.
  Placement() = default;
  /// Priority `priority`, so that `bus.on(event, slot, 5)` reads as before.
  Placement(int priority) : priority_(priority) {}  // NOLINT: implicit on purpose

  /// Names the subscription, so that other subscriptions can be placed after or before it.
  Placement& named(std::string name) {
    name_ = std::move(name);
    return *this;
  }
  /// Runs after the subscriber called `name` (where both subscribe to the event).
  Placement& after(std::string_view name) {
    after_.emplace_back(name);
    return *this;
  }
  /// Runs before the subscriber called `name` (where both subscribe to the event).
  Placement& before(std::string_view name) {
    before_.emplace_back(name);
    return *this;
  }
  /// Runs after every subscriber of role `role` (where they subscribe to the event too).
  Placement& after(Role role) {
    after_roles_.push_back(role);
    return *this;
  }
  /// Runs before every subscriber of role `role`.
  Placement& before(Role role) {
    before_roles_.push_back(role);
    return *this;
  }
  /// Gives the subscription a role, so that `after(role)` / `before(role)` place others around it.
  Placement& with_role(Role role) noexcept {
    role_ = role;
    return *this;
  }
  /// Sets the priority (lower runs first among subscribers that no constraint orders).
  Placement& with_priority(int priority) noexcept {
    priority_ = priority;
    return *this;
  }
  /// Does not run during `stage`, whatever its role's default.
  Placement& skip_during(RunStage stage) noexcept {
    skipped_ |= mask_of(stage);
    kept_ &= static_cast<RunStageMask>(~mask_of(stage));
    return *this;
  }
  /// Runs during `stage`, whatever its role's default.
  Placement& run_during(RunStage stage) noexcept {
    kept_ |= mask_of(stage);
    skipped_ &= static_cast<RunStageMask>(~mask_of(stage));
    return *this;
  }
  /// Handles the subscription's exceptions by `policy`, whatever its role's default.
  Placement& with_error_policy(ErrorPolicy policy) noexcept {
    error_policy_ = policy;
    return *this;
  }

  /// The priority.
  int priority() const noexcept { return priority_; }
  /// The subscription's name, empty when it has none.
  const std::string& name() const noexcept { return name_; }
  /// Names this subscription runs after.
  const std::vector<std::string>& after_names() const noexcept { return after_; }
  /// Names this subscription runs before.
  const std::vector<std::string>& before_names() const noexcept { return before_; }
  /// The subscription's role (Role::Unassigned unless given one).
  Role role() const noexcept { return role_; }
  /// Roles this subscription runs after.
  const std::vector<Role>& after_roles() const noexcept { return after_roles_; }
  /// Roles this subscription runs before.
  const std::vector<Role>& before_roles() const noexcept { return before_roles_; }
  /// The run stages this subscription sits out: as declared, else as its role's default.
  RunStageMask skipped_stages() const noexcept {
    return static_cast<RunStageMask>((default_skipped_stages(role_) | skipped_) & ~kept_);
  }
  /// Whether this subscription runs during `stage`.
  bool runs_during(RunStage stage) const noexcept {
    return (skipped_stages() & mask_of(stage)) == 0;
  }
  /// What happens when the subscription throws: as declared, else as its role's default.
  ErrorPolicy error_policy() const noexcept {
    return error_policy_ ? *error_policy_ : default_error_policy(role_);
  }

 private:
  int priority_ = 0;
  std::string name_;
  std::vector<std::string> after_;
  std::vector<std::string> before_;
  Role role_ = Role::Unassigned;
  std::vector<Role> after_roles_;
  std::vector<Role> before_roles_;
  RunStageMask skipped_ = 0;                 // declared with skip_during
  RunStageMask kept_ = 0;                    // declared with run_during
  std::optional<ErrorPolicy> error_policy_;  // declared with with_error_policy
};

/// A placement after the subscriber called `name` (a callback's or a named subscription's name).
inline Placement after(std::string_view name) {
  return Placement().after(name);
}
/// A placement before the subscriber called `name`.
inline Placement before(std::string_view name) {
  return Placement().before(name);
}
/// A placement after every subscriber of role `role`.
inline Placement after(Role role) {
  return Placement().after(role);
}
/// A placement before every subscriber of role `role`.
inline Placement before(Role role) {
  return Placement().before(role);
}
/// A placement that only gives the subscription a role.
inline Placement with_role(Role role) {
  return Placement().with_role(role);
}
/// A placement that only keeps the subscription from running during `stage`.
inline Placement skip_during(RunStage stage) {
  return Placement().skip_during(stage);
}
/// A placement that only has the subscription run during `stage` (whatever its role's default).
inline Placement run_during(RunStage stage) {
  return Placement().run_during(stage);
}
/// A placement that only sets the subscription's error policy.
inline Placement with_error_policy(ErrorPolicy policy) {
  return Placement().with_error_policy(policy);
}
/// A placement that only names the subscription.
inline Placement named(std::string name) {
  return Placement().named(std::move(name));
}

}  // namespace torchbus
