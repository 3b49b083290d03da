#pragma once

/// \file
/// Class callbacks: subclass Callback and override the `on_<event>` hooks you need.

#include <torchbus/event.hpp>

#include <bitset>
#include <optional>
#include <string>

namespace torch {
namespace serialize {
class OutputArchive;
class InputArchive;
}  // namespace serialize
}  // namespace torch

namespace torchbus {

struct State;
class Trainer;

/// Base of class callbacks. Only the hooks a subclass overrides get connected, so an unused hook
/// costs nothing. The name identifies the callback's state in checkpoints and must be unique.
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
  /// Position among the subscribers of each event (lower runs first).
  int priority() const noexcept { return priority_; }
  /// Sets the priority; takes effect when the callback is added.
  Callback& set_priority(int priority) noexcept;
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
  /// Writes the callback's own state into a checkpoint.
  virtual void save_state(torch::serialize::OutputArchive& /*archive*/) const {}
  /// Restores the state written by `save_state`.
  virtual void load_state(torch::serialize::InputArchive& /*archive*/) {}

#define TORCHBUS_CALLBACK_HOOK(Name, name) \
  /** Called at Event::Name. */            \
  virtual void on_##name(State& /*state*/) {}
  TORCHBUS_FOR_EACH_EVENT(TORCHBUS_CALLBACK_HOOK)
#undef TORCHBUS_CALLBACK_HOOK

 private:
  std::string name_;
  int priority_ = kDefaultPriority;
  std::optional<int> rank_;
};

/// Set of events, indexed by `index_of(event)`.
using EventSet = std::bitset<kEventCount>;

/// The events whose hooks `callback` overrides. Detected from the object's virtual table with
/// GCC; with other compilers every hook counts as overridden (correct, slightly slower).
EventSet overridden_hooks(const Callback& callback);

}  // namespace torchbus
