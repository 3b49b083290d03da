#pragma once

// The callbacks and subscriptions of a training run of torchbus-train beyond those that steer it
// (steering.hpp): its outputs (loggers, report, checkpoints) and its own subscriptions.

#include "flags.hpp"
#include "summary.hpp"

#include <torchbus/callbacks/lr_finder.hpp>
#include <torchbus/trainer.hpp>

#include <cstdint>
#include <optional>

namespace train {

/// The learning-rate range test of a --find-lr run, as its outputs show it.
struct LrSweep {
  const std::optional<torchbus::LRFinderResult>& found;  ///< the sweep (none: no --find-lr)
  bool recorded = false;        ///< read back from OUT (--resume), not swept again
  bool writes_outputs = false;  ///< this rank writes OUT
};

/// The outputs of a training run: the default callbacks (loggers, report, progress) with the run's
/// options shown in the report and TensorBoard, the LR sweep's file and chart, and checkpoints.
void add_outputs(torchbus::Trainer& trainer, const Flags& flags, bool resuming,
                 const JsonObject& run_options, int world_size, const LrSweep& lr_sweep);
/// A stop signal (SIGINT, SIGTERM, SIGHUP, SIGUSR1) received stops `trainer` at the next step
/// boundary, as an interruption.
void stop_at_signals(torchbus::Trainer& trainer);
/// The run's own subscriptions: the samples it trains (counted into `samples`), the stop signals
/// at step boundaries, a log line per epoch.
void subscribe_run(torchbus::Trainer& trainer, std::int64_t& samples);

}  // namespace train
