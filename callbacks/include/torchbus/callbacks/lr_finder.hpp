#pragma once

/// \file
/// The learning-rate range test (Lightning's `Tuner.lr_find`, fastai's `lr_find`): a short fit
/// that raises the learning rate step by step, records the loss, and suggests the learning rate
/// where the loss falls fastest; the model and optimizer are restored afterwards.

#include <torch/arg.h>
#include <torchbus/batch_source.hpp>
#include <torchbus/state.hpp>
#include <torchbus/trainer.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <type_traits>
#include <vector>

namespace torchbus {

/// How the learning rate goes from min_lr to max_lr over the sweep.
enum class LRSweepMode {
  Exponential,  ///< lr_i = min_lr * (max_lr / min_lr)^(i / (n - 1)): equal steps of log(lr)
  Linear,       ///< lr_i = min_lr + (max_lr - min_lr) * i / (n - 1)
};

/// What the range test sweeps, e.g. `LRFinderOptions().min_lr(1e-6).max_lr(1).num_steps(200)`.
struct LRFinderOptions {
  /// Learning rate of the first step (> 0).
  TORCH_ARG(double, min_lr) = 1e-7;
  /// Learning rate of the last step (> min_lr, finite).
  TORCH_ARG(double, max_lr) = 10.0;
  /// Optimizer steps of the sweep, one learning rate each (>= 2).
  TORCH_ARG(std::int64_t, num_steps) = 100;
  /// Exponential (the default, as Lightning and fastai) or linear steps.
  TORCH_ARG(LRSweepMode, mode) = LRSweepMode::Exponential;
  /// Weight of the newest loss in the smoothed loss, in (0, 1] (1: no smoothing):
  /// smoothed_i = smoothing * loss_i + (1 - smoothing) * smoothed_(i-1), smoothed_0 = loss_0.
  TORCH_ARG(double, smoothing) = 0.05;
  /// Stop the sweep once the smoothed loss exceeds this multiple of the best smoothed loss so
  /// far (> 1; none: sweep to max_lr). A non-finite smoothed loss always stops it.
  TORCH_ARG(std::optional<double>, divergence_threshold) = 4.0;
  /// Points left out at the start of the suggestion's search (>= 0; Lightning's skip_begin).
  TORCH_ARG(std::int64_t, skip_begin) = 10;
  /// Points left out at the end of the suggestion's search (>= 0; Lightning's skip_end).
  TORCH_ARG(std::int64_t, skip_end) = 1;

 public:
  /// Throws ConfigError naming the first option that is out of range.
  void validate() const;
};

/// What a range test measured: one point per optimizer step of the sweep.
struct LRFinderResult {
  std::vector<double> lrs;              ///< learning rate of each step
  std::vector<double> losses;           ///< the step's training loss (State::step_loss())
  std::vector<double> smoothed_losses;  ///< exponential moving average of `losses`
  /// Index of the suggested point: the steepest descent of the smoothed loss (none: too few
  /// finite points after skip_begin and skip_end).
  std::optional<std::size_t> suggestion_index;
  /// The suggested learning rate, `lrs[*suggestion_index]`.
  std::optional<double> suggestion;
  /// The sweep stopped early because the smoothed loss diverged.
  bool diverged = false;

  /// Writes `step,lr,loss,smoothed_loss` rows (a header, then one row per point, numbers with
  /// 17 significant digits) to `path`, atomically; throws Error when it cannot.
  void write_csv(const std::filesystem::path& path) const;

  /// Reads back what write_csv wrote: the points, with `diverged` and the suggestion decided again
  /// under `options` (divergence_threshold, skip_begin, skip_end); throws Error naming the file and
  /// line when it cannot be read or is not such a table.
  static LRFinderResult read_csv(const std::filesystem::path& path,
                                 const LRFinderOptions& options = {});
};

/// The learning rate of sweep step `index` (0-based) under `options`; the first is exactly
/// min_lr, the last (num_steps - 1) exactly max_lr.
double sweep_learning_rate(const LRFinderOptions& options, std::int64_t index);

/// Index of the steepest descent of `losses` against log10(`lrs`): the minimum of the gradient
/// (numpy.gradient: second-order central differences inside, one-sided at the ends, for uneven
/// spacing) over the points left after dropping `skip_begin` points at the start, `skip_end` at
/// the end and every non-finite loss; none when fewer than two remain. Ties go to the first.
std::optional<std::size_t> steepest_descent_index(const std::vector<double>& lrs,
                                                  const std::vector<double>& losses,
                                                  std::int64_t skip_begin, std::int64_t skip_end);

/// Runs the range test on `trainer` with `train`: fit() (repeated while the data or the
/// trainer's max_steps/max_epochs end it early) with the learning rate of every parameter group
/// set at each StepStart (last, after any scheduler) and the step's loss read at StepEnd (one host
/// sync per step), until num_steps points are recorded, the loss diverges or another subscriber
/// stops the run. Afterwards the model's parameters and buffers, the optimizer's state and every
/// parameter group's options (learning rates) are what they were, bit for bit, and so are the
/// module's training mode and the default CPU generator's state; its subscriptions are gone, also
/// when an exception escapes (rethrown). The trainer's other subscribers see the sweep as fit()
/// calls: run it on a trainer without checkpoints or loggers (or before adding them), and before
/// `resume_from` (the sweep's first fit() would consume it). Throws ConfigError for invalid
/// options, a trainer with a process group (the ranks' losses differ; sweep in one process), or
/// while the trainer runs.
LRFinderResult find_learning_rate_source(Trainer& trainer, BatchSource& train,
                                         const LRFinderOptions& options = {});

/// Runs the range test on `trainer` with `train` (a torch::data loader or any range of batches);
/// see find_learning_rate_source.
template <typename TrainData>
LRFinderResult find_learning_rate(Trainer& trainer, TrainData&& train,
                                  const LRFinderOptions& options = {}) {
  RangeSource<std::remove_reference_t<TrainData>> source(train);
  return find_learning_rate_source(trainer, source, options);
}

}  // namespace torchbus
