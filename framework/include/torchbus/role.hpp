#pragma once

/// \file
/// Roles: what a subscriber does for the run. `after(Role::Metrics)` orders a subscriber after
/// every subscriber of that role; a role nobody has imposes nothing. Among subscribers that no
/// constraint orders and that share a priority, roles run in the order they are listed here.

#include <cstdint>
#include <string_view>

namespace torchbus {

/// What a subscriber does, in the order the run's pipeline runs them when nothing else decides.
enum class Role : std::uint8_t {
  WeightAveraging,  ///< swaps averaged weights in and out: EMA, SWA
  Metrics,          ///< records metrics: ClassificationMetrics, GradientStats, Timer
  Unassigned,       ///< declares no role: your lambdas and callbacks, unless you give them one
  Scheduler,        ///< changes hyper-parameters: LearningRateScheduler
  Monitor,          ///< reads metrics and acts: TerminateOnNaN, AllPredictionsSame, EarlyStopping
  Logger,           ///< writes metrics out: SimpleLogger, CsvLogger, TensorBoardLogger, ProgressBar
  Checkpoint,       ///< saves the run: ModelCheckpoint
  Report,           ///< summarises the run: RunReport
};

/// The role's name as `describe` prints it, e.g. "Metrics".
std::string_view to_string(Role role) noexcept;

}  // namespace torchbus
