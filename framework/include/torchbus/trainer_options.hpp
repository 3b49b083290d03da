#pragma once

/// \file
/// TrainerOptions: chainable settings of a Trainer, in the style of LibTorch's options structs.

#include <c10/core/Device.h>
#include <torch/arg.h>
#include <torchbus/batch_limit.hpp>
#include <torchbus/loss_scaler.hpp>
#include <torchbus/precision.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace torchbus {

/// Epoch -> k: batches per optimizer step from that epoch on (see
/// TrainerOptions::accumulation_schedule).
using AccumulationSchedule = std::map<std::int64_t, std::int64_t>;

/// What TrainerOptions::deterministic asks of LibTorch's deterministic algorithms (global to the
/// process: set for each action, put back after it).
enum class Determinism : std::uint8_t {
  Unchanged,  ///< the process's setting stays as it is
  On,         ///< an operation without a deterministic implementation throws; cuDNN deterministic
  WarnOnly,   ///< such an operation warns instead (PyTorch's warn_only=True)
  Off,        ///< nondeterministic algorithms allowed (and cuDNN's), whatever the process set
};

/// The value's name: "unchanged", "on", "warn_only" or "off".
std::string_view to_string(Determinism determinism) noexcept;

/// What a Trainer does, e.g. `TrainerOptions().max_epochs(10).accumulate_grad_batches(4)`.
struct TrainerOptions {
  /// Epochs to train (-1: no limit, then max_steps must be set).
  TORCH_ARG(std::int64_t, max_epochs) = 1;
  /// Optimizer steps to train (-1: no limit).
  TORCH_ARG(std::int64_t, max_steps) = -1;
  /// Epochs an early stop (State::request_early_stop, EarlyStopping) may not end the run before:
  /// it is held until this many epochs have ended (Lightning's min_epochs; 0: none).
  TORCH_ARG(std::int64_t, min_epochs) = 0;
  /// Optimizer steps an early stop may not end the run before (Lightning's min_steps; 0: none).
  TORCH_ARG(std::int64_t, min_steps) = 0;
  /// Batches per optimizer step (k): gradients of k batches are averaged before one step.
  TORCH_ARG(std::int64_t, accumulate_grad_batches) = 1;
  /// k changing at given epochs, e.g. `{{0, 1}, {4, 2}, {8, 4}}` (Lightning's
  /// GradientAccumulationScheduler): each entry's k holds from its epoch on; epochs before the
  /// first entry use accumulate_grad_batches (empty: no schedule).
  TORCH_ARG(AccumulationSchedule, accumulation_schedule) = {};
  /// Batches per training epoch: `BatchLimit::count(n)` or `BatchLimit::fraction(f)` (all: every
  /// batch). The epoch ends after them, a short last window stepping as at the end of the data.
  TORCH_ARG(BatchLimit, limit_train_batches) = {};
  /// Batches per validation pass (fit's validations and evaluate()); see limit_train_batches.
  TORCH_ARG(BatchLimit, limit_val_batches) = {};
  /// The batch field whose first dimension (or list length) counts a batch's samples: the weights
  /// of an evaluation's mean loss and the global batch a resume checks (empty: Batch::samples()'s
  /// rule, the first dimension of `data`, else of `target`, else of the first named field).
  TORCH_ARG(std::string, sample_field) = "";
  /// Batches per test pass (test()); see limit_train_batches.
  TORCH_ARG(BatchLimit, limit_test_batches) = {};
  /// Batches per predict pass (predict()); see limit_train_batches.
  TORCH_ARG(BatchLimit, limit_predict_batches) = {};
  /// A quick check of the whole loop: n > 0 runs one epoch of n training batches and n
  /// validation batches (and n test or predict batches; `fast_dev_run(true)`: 1), overriding
  /// max_epochs, max_steps, the validation schedule, the limits and num_sanity_val_steps; with
  /// State::fast_dev_run set, the subscribers that sit out RunStage::FastDevRun (checkpoints,
  /// writing loggers, the report) are not called, so nothing is written. 0: off.
  TORCH_ARG(std::int64_t, fast_dev_run) = 0;
  /// Validation batches run before the first training batch of a fit that does not resume, with
  /// State::sanity_checking set, so that a bug in the validation path shows at once; nothing of
  /// it remains (metrics rolled back; subscribers that sit out RunStage::SanityCheck, such as the
  /// built-in monitors and writers, are not called). 0: none, -1: a
  /// whole validation pass (within limit_val_batches).
  TORCH_ARG(std::int64_t, num_sanity_val_steps) = 0;
  /// Validate after every n epochs (0: never at epoch end).
  TORCH_ARG(std::int64_t, val_every_n_epochs) = 1;
  /// Also validate after every n optimizer steps (0: never).
  TORCH_ARG(std::int64_t, val_every_n_steps) = 0;
  /// Also validate every this fraction of a training epoch, in (0, 1] (Lightning's float
  /// val_check_interval; 0: never): after the step whose window holds every max(1, floor(f × B))-th
  /// batch of the epoch, B its batches (limit_train_batches' count, else the data's size, which
  /// must then be known). 0.25: four validations an epoch, the last the epoch's own.
  TORCH_ARG(double, val_every_epoch_fraction) = 0.0;
  /// Device the model and every batch are moved to.
  TORCH_ARG(c10::Device, device) = c10::Device(c10::kCPU);
  /// Seed for torch::manual_seed at the start of fit (none: leave the generator alone).
  TORCH_ARG(std::optional<std::uint64_t>, seed) = std::nullopt;
  /// Clip the global gradient norm to this value before each optimizer step (0: off).
  TORCH_ARG(double, gradient_clip_norm) = 0.0;
  /// Clip every gradient element to [-value, value] before each optimizer step (0: off).
  TORCH_ARG(double, gradient_clip_value) = 0.0;
  /// After each optimizer step, release the gradients (undefined, like PyTorch 2's
  /// `zero_grad(set_to_none=True)`) instead of filling them with zeros (LibTorch 1.13's
  /// `zero_grad()`): no kernel per parameter, and the next backward writes fresh gradients.
  TORCH_ARG(bool, set_grads_to_none) = true;
  /// Arithmetic of the forward pass and the loss: Float32, BF16Mixed (autocast to bfloat16) or
  /// FP16Mixed (autocast to float16 with loss scaling, CUDA); see docs/trainer.md, "Precision".
  TORCH_ARG(Precision, precision) = Precision::Float32;
  /// Keep the model's 4-d parameters and 4-d batch data in channels_last (NHWC) memory format,
  /// which oneDNN's convolutions and bfloat16 pooling prefer (docs/trainer.md, "Precision").
  TORCH_ARG(bool, channels_last) = false;
  /// How the loss scale moves under Precision::FP16Mixed (PyTorch GradScaler's defaults).
  TORCH_ARG(LossScalerOptions, loss_scaler) = {};
  /// What makes this run's result ("key=value" lines: data, model, seed, ...), written into every
  /// checkpoint; a checkpoint of another identity is never resumed (empty: no check).
  TORCH_ARG(std::string, run_identity) = "";
  /// Run each action with LibTorch's anomaly detection (Lightning's detect_anomaly): a backward
  /// producing NaN throws naming the operation, whose forward is in the message. Global to the
  /// process while the action runs, and slow: for debugging.
  TORCH_ARG(bool, detect_anomaly) = false;
  /// LibTorch's deterministic algorithms during each action (Lightning's deterministic):
  /// docs/trainer.md, "Reproducibility", says what each value costs.
  TORCH_ARG(Determinism, deterministic) = Determinism::Unchanged;
  /// Connect the subscriptions registered with TORCHBUS_SUBSCRIBE when the Trainer is built
  /// (opt-in: the registry is process-wide).
  TORCH_ARG(bool, use_registered_subscriptions) = false;

 public:
  /// Throws ConfigError naming the first option that is out of range.
  void validate() const;
  /// k of `epoch`: the accumulation schedule's entry at or before it, else
  /// accumulate_grad_batches.
  std::int64_t accumulate_grad_batches_at(std::int64_t epoch) const;
  /// The options a fit runs with: these, with fast_dev_run's overrides applied when it is set.
  TrainerOptions effective() const;
};

}  // namespace torchbus
