#pragma once

/// \file
/// Class callbacks: subclass Callback and override the `on_<event>` hooks you need.

#include <torchbus/event.hpp>
#include <torchbus/event_list.hpp>
#include <torchbus/placement.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace torch {
namespace serialize {
class OutputArchive;
class InputArchive;
}  // namespace serialize
}  // namespace torch

namespace torchbus {

struct Checkpoint;
struct State;
class Trainer;

/// Base of class callbacks. Only the hooks a subclass overrides get connected, so an unused hook
/// costs nothing. The name identifies the callback's state in checkpoints, must be unique, and is
/// what other subscribers name in `after(name)` / `before(name)`; its role is what they name in
/// `after(role)` / `before(role)`, and decides the run stages its hooks sit out (run_stage.hpp).
class Callback {
 public:
  /// Priority of a callback that does not choose one (lower runs first).
  static constexpr int kDefaultPriority = 0;

  /// A callback named after its type, at the default priority.
  Callback() = default;
  /// A callback called `name` at `priority`.
  explicit Callback(std::string name, int priority = kDefaultPriority);
  virtual ~Callback() = default;
  Callback(const Callback&) = default;
  Callback& operator=(const Callback&) = default;

  /// The name given at construction, or the callback's type name.
  std::string name() const;
  /// Position among the subscribers of each event that no constraint orders (lower runs first).
  int priority() const noexcept { return placement_.priority(); }
  /// Sets the priority; takes effect when the callback is added.
  Callback& set_priority(int priority) noexcept;
  /// What the callback does (Role::Unassigned unless it chose a role).
  Role role() const noexcept { return placement_.role(); }
  /// Sets the role; takes effect when the callback is added.
  Callback& set_role(Role role) noexcept;
  /// Runs every hook after the subscriber called `name` (on the events both subscribe to); takes
  /// effect when the callback is added.
  Callback& after(std::string_view name);
  /// Runs every hook before the subscriber called `name`; takes effect when the callback is added.
  Callback& before(std::string_view name);
  /// Runs every hook after every subscriber of role `role`; takes effect when the callback is
  /// added.
  Callback& after(Role role);
  /// Runs every hook before every subscriber of role `role`; takes effect when it is added.
  Callback& before(Role role);
  /// Keeps every hook from running during `stage`, whatever the role's default; takes effect when
  /// the callback is added.
  Callback& skip_during(RunStage stage) noexcept;
  /// Runs the hooks during `stage`, whatever the role's default; takes effect when it is added.
  Callback& run_during(RunStage stage) noexcept;
  /// Handles the hooks' exceptions by `policy`, whatever the role's default; takes effect when the
  /// callback is added.
  Callback& set_error_policy(ErrorPolicy policy) noexcept;
  /// What happens when a hook throws (as declared, else as the role's default).
  ErrorPolicy error_policy() const noexcept { return placement_.error_policy(); }
  /// Whether the hooks run during `stage` (as declared, else as the role's default).
  bool runs_during(RunStage stage) const noexcept { return placement_.runs_during(stage); }
  /// The priority, role, after/before constraints, run stages and error policy (the placement's
  /// name is unused).
  const Placement& placement() const noexcept { return placement_; }
  /// Runs this callback only on the process of global rank `rank`.
  Callback& run_on_rank(int rank);
  /// Runs this callback on every rank (the default).
  Callback& run_on_every_rank() noexcept;
  /// The only rank this callback runs on, or nothing for every rank.
  std::optional<int> rank() const noexcept { return rank_; }
  /// Whether the callback runs on the process of global rank `rank`.
  bool runs_on(int rank) const noexcept { return !rank_ || *rank_ == rank; }

  /// Called when the callback is added to `trainer`: read options, set up.
  virtual void on_added(Trainer& /*trainer*/) {}
  /// Hooks this callback overrides that never act with its options (e.g. a logger that keeps batch
  /// values at BatchEnd only when its options name one): they are not connected, so they cost
  /// nothing. Asked once, when the callback is added to a bus. Default: none.
  virtual EventList unused_hooks() const { return {}; }
  /// Writes the callback's own state into a checkpoint.
  virtual void save_state(torch::serialize::OutputArchive& /*archive*/) const {}
  /// Whether what `save_state` writes stays as written when training goes on (tensors it changes
  /// in place later written as copies): then a background checkpoint serializes it later, off the
  /// training thread. False (the default): it is serialized as soon as it is written.
  virtual bool state_is_snapshot() const { return false; }
  /// Restores the state written by `save_state`.
  virtual void load_state(torch::serialize::InputArchive& /*archive*/) {}
  /// Called when the trainer takes a checkpoint, before any callback's state goes into it: finish
  /// what the checkpoint must cover, e.g. flush files (see docs/callbacks.md).
  virtual void on_save_checkpoint(const Checkpoint& /*checkpoint*/) {}
  /// Called after the trainer restored a checkpoint, every callback's `load_state` included.
  virtual void on_load_checkpoint(const Checkpoint& /*checkpoint*/) {}

#define TORCHBUS_CALLBACK_HOOK(Name, name) \
  /** Called at Event::Name. */            \
  virtual void on_##name(State& /*state*/) {}
  TORCHBUS_FOR_EACH_EVENT(TORCHBUS_CALLBACK_HOOK)
#undef TORCHBUS_CALLBACK_HOOK

 private:
  std::string name_;
  Placement placement_{kDefaultPriority};
  std::optional<int> rank_;
};

namespace detail {
// OverridesHook_<name><T>: false when `&T::on_<name>` is still Callback's own hook, true when a
// class between Callback and T overrides it (or hides it, or makes it inaccessible).
#define TORCHBUS_OVERRIDES_HOOK(Name, name)                                                        \
  template <typename T, typename = void>                                                           \
  struct OverridesHook_##name : std::true_type {};                                                 \
  template <typename T>                                                                            \
  struct OverridesHook_##name<T, std::void_t<decltype(&T::on_##name)>>                             \
      : std::bool_constant<!std::is_same_v<decltype(&T::on_##name), void (Callback::*)(State&)>> { \
  };
TORCHBUS_FOR_EACH_EVENT(TORCHBUS_OVERRIDES_HOOK)
#undef TORCHBUS_OVERRIDES_HOOK
}  // namespace detail

/// The events whose hooks class `T` overrides, found at compile time (an object whose dynamic type
/// is a subclass of `T` may override more: `EventBus::add` then connects every hook).
template <typename T>
constexpr EventList overridden_hooks() noexcept {
  static_assert(std::is_base_of_v<Callback, T>, "overridden_hooks<T> needs a Callback subclass");
  EventList hooks;
#define TORCHBUS_ADD_OVERRIDDEN_HOOK(Name, name) \
  if (detail::OverridesHook_##name<T>::value) hooks |= Event::Name;
  TORCHBUS_FOR_EACH_EVENT(TORCHBUS_ADD_OVERRIDDEN_HOOK)
#undef TORCHBUS_ADD_OVERRIDDEN_HOOK
  return hooks;
}

}  // namespace torchbus
