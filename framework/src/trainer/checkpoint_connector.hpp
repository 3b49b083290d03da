#pragma once

/// \file
/// How a trainer's checkpoint is composed of its parts' states (private to torchbus_framework).

#include <torchbus/bus.hpp>
#include <torchbus/checkpoint_snapshot.hpp>
#include <torchbus/trainer_options.hpp>

#include "checkpoint/tensor_copy_pool.hpp"
#include "loop/fit_loop.hpp"
#include "loop/optimization_step.hpp"

#include <filesystem>
#include <string>

namespace torch {
namespace nn {
class Module;
}
namespace optim {
class Optimizer;
}
}  // namespace torch

namespace torchbus {

/// The parts of a trainer whose states a checkpoint holds, one section each (checkpoint_io.cpp
/// lists them): FitLoop (position, the epoch's order, the run's end, k) and OptimizationStep (the
/// loss scales, the optimizer phases and their steps) save and read their own; the model's tensors,
/// the optimizers, the generators, the options, the metric history, the filters' counts and the
/// callbacks' states have theirs in checkpoint_sections.hpp.
struct CheckpointParts {
  FitLoop& fit;
  OptimizationStep& step;
  torch::nn::Module& module;
  const std::vector<OptimizerPhase>& phases;  ///< each phase's optimizer
  EventBus& bus;
  State& state;
  const TrainerOptions& options;   ///< as configured (not a fast_dev_run's overrides)
  detail::TensorCopyPool& copies;  ///< the buffers of TensorCapture::Copies
};

/// How a captured checkpoint holds the run's tensors.
enum class TensorCapture {
  References,  ///< the live tensors: serialize before training goes on
  Copies,      ///< copies (the model's, the optimizer's state, callbacks' snapshot states), written
               ///< into CheckpointParts::copies's buffers
};

/// A checkpoint of `parts` now, after every callback's on_save_checkpoint was told `path`. With
/// TensorCapture::Copies it stays what it was when training goes on: its bytes can be made later,
/// on another thread (a callback whose state is not a snapshot, or an optimizer whose state type
/// is unknown, is serialized at once).
CheckpointSnapshot capture_checkpoint(const CheckpointParts& parts,
                                      const std::filesystem::path& path, TensorCapture capture);

/// Reads the checkpoint at `path`, validates every part's entries, then applies them (nothing
/// changes before everything is validated; a failing optimizer state is put back), then calls
/// every callback's on_load_checkpoint. Any failure is a CheckpointError naming the file.
void load_checkpoint(const CheckpointParts& parts, const std::filesystem::path& path);

/// Loads `path`, or the newest checkpoint of directory `path` that loads (the others are skipped
/// with a warning naming why); throws CheckpointError listing them when none does.
void resume_from_checkpoint(const CheckpointParts& parts, const std::filesystem::path& path);

}  // namespace torchbus
