#pragma once

/// \file
/// The checkpoint sections of the trainer's parts that are not loops (private to
/// torchbus_framework): the model's tensors, the optimizers, the generators, the metric history,
/// the filters' counts, the callbacks' states and the options the run used. FitLoop and
/// OptimizationStep save and read their own; checkpoint_io.cpp lists them all.

#include <torchbus/bus.hpp>
#include <torchbus/metric_history.hpp>
#include <torchbus/optimizer_phase.hpp>
#include <torchbus/trainer_options.hpp>

#include "checkpoint/section.hpp"

#include <vector>

namespace torch::nn {
class Module;
}

namespace torchbus {

/// The model's parameters and buffers by name; read checks every name, shape and dtype.
CheckpointSection model_section(torch::nn::Module& module);

/// Each phase's optimizer state, type and parameter group sizes. Applying loads them all, or puts
/// back the states they had and rethrows when one cannot take its state.
CheckpointSection optimizers_section(const std::vector<OptimizerPhase>& phases);

/// The states of the generators (CPU, and each CUDA device's), put back when applied.
CheckpointSection generators_section();

/// The options the run used, as text: a resume with other options logs the checkpoint's.
CheckpointSection options_section(const TrainerOptions& options);

/// Every series of the metric history.
CheckpointSection metrics_section(MetricHistory& history);

/// The own counts of the bus's filters (absent from checkpoints of earlier versions).
CheckpointSection filter_counts_section(EventBus& bus);

/// Each class callback's state. A callback's state cannot be checked without loading it: read
/// loads them (a callback whose load_state throws fails the checkpoint), so this section is read
/// last, once every other section was checked.
CheckpointSection callbacks_section(EventBus& bus);

}  // namespace torchbus
