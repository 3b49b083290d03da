#pragma once

/// \file
/// Phases: parts of a run a subscriber may sit out. Whether it runs during each is declared once,
/// on its Placement or Callback (`skip_during`, `run_during`), else follows its Role; the bus
/// skips its calls there (docs/events.md, "Phases").

#include <torchbus/role.hpp>

#include <cstdint>

namespace torchbus {

/// A part of a run that a subscriber may sit out.
enum class Phase : std::uint8_t {
  /// The validation before training (TrainerOptions::num_sanity_val_steps): the events published
  /// while State::sanity_checking is set, ActionEnd excepted (it closes the action).
  SanityCheck = 1,
  /// A fit or evaluation with TrainerOptions::fast_dev_run: every event while
  /// State::fast_dev_run is set.
  FastDevRun = 2,
};

/// A set of phases: the bits of Phase values or-ed together.
using PhaseMask = std::uint8_t;

/// The bit of `phase` in a PhaseMask.
constexpr PhaseMask mask_of(Phase phase) noexcept {
  return static_cast<PhaseMask>(phase);
}

/// The phases a subscriber of `role` sits out unless it declares otherwise: schedulers and
/// monitors skip the sanity check; loggers, checkpoints and reports skip it and fast dev runs;
/// weight averaging, metrics and unassigned subscribers run in every phase.
constexpr PhaseMask default_skipped_phases(Role role) noexcept {
  switch (role) {
    case Role::Scheduler:
    case Role::Monitor:
      return mask_of(Phase::SanityCheck);
    case Role::Logger:
    case Role::Checkpoint:
    case Role::Report:
      return mask_of(Phase::SanityCheck) | mask_of(Phase::FastDevRun);
    case Role::WeightAveraging:
    case Role::Metrics:
    case Role::Unassigned:
      break;
  }
  return 0;
}

}  // namespace torchbus
