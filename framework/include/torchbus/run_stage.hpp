#pragma once

/// \file
/// Run stages: parts of a run a subscriber may sit out. Whether it runs during each is declared
/// once, on its Placement or Callback (`skip_during`, `run_during`), else follows its Role; the bus
/// skips its calls there (docs/events.md, "Run stages").

#include <torchbus/role.hpp>

#include <cstdint>

namespace torchbus {

/// A part of a run that a subscriber may sit out (not an optimizer phase: see OptimizerPhase).
enum class RunStage : std::uint8_t {
  /// The validation before training (TrainerOptions::num_sanity_val_steps): the events published
  /// while State::sanity_checking is set, ActionEnd excepted (it closes the action).
  SanityCheck = 1,
  /// A fit or evaluation with TrainerOptions::fast_dev_run: every event while
  /// State::fast_dev_run is set.
  FastDevRun = 2,
};

/// The name of RunStage before it was renamed (docs/events.md, "Run stages").
using Phase [[deprecated("renamed torchbus::RunStage")]] = RunStage;

/// A set of run stages: the bits of RunStage values or-ed together.
using RunStageMask = std::uint8_t;

/// The bit of `stage` in a RunStageMask.
constexpr RunStageMask mask_of(RunStage stage) noexcept {
  return static_cast<RunStageMask>(stage);
}

/// The stages a subscriber of `role` sits out unless it declares otherwise: schedulers and
/// monitors skip the sanity check; loggers, checkpoints and reports skip it and fast dev runs;
/// weight averaging, metrics and unassigned subscribers run in every stage.
constexpr RunStageMask default_skipped_stages(Role role) noexcept {
  switch (role) {
    case Role::Scheduler:
    case Role::Monitor:
      return mask_of(RunStage::SanityCheck);
    case Role::Logger:
    case Role::Checkpoint:
    case Role::Report:
      return mask_of(RunStage::SanityCheck) | mask_of(RunStage::FastDevRun);
    case Role::WeightAveraging:
    case Role::Metrics:
    case Role::Unassigned:
      break;
  }
  return 0;
}

}  // namespace torchbus
