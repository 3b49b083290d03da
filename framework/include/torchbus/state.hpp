#pragma once

/// \file
/// The one object every event carries.

#include <c10/core/Device.h>
#include <torchbus/metric_history.hpp>
#include <torchbus/tensor_store.hpp>

#include <cstdint>
#include <exception>
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

class ProcessGroup;

/// Shared state of a run, passed as `State&` to every slot. Counters are plain fields.
struct State {
  // Counters. All are 0-based indices except `step`, which counts completed optimizer steps.
  std::int64_t epoch = 0;            ///< index of the current epoch (after a run: epochs completed)
  std::int64_t step = 0;             ///< optimizer steps completed (at StepEnd: includes this one)
  std::int64_t batch_in_epoch = 0;   ///< index of the current batch within the epoch
  std::int64_t global_batch = 0;     ///< index of the current batch since the run began
  std::int64_t window_position = 0;  ///< index of the current batch in its accumulation window
  std::int64_t window_size = 1;      ///< batches in the current window (k, or fewer at epoch end)
  std::int64_t accumulate_grad_batches = 1;  ///< k: batches per optimizer step
  std::int64_t max_epochs = 1;               ///< epoch limit of the run (-1: none)
  std::int64_t max_steps = -1;               ///< step limit of the run (-1: none)
  std::int64_t eval_batch = 0;               ///< index of the current evaluation batch

  // Ranks.
  int rank = 0;        ///< global rank of this process
  int local_rank = 0;  ///< rank on this machine
  int world_size = 1;  ///< number of processes
  /// The trainer's process group (see distributed.hpp), null when it has none. Use it through
  /// `all_reduce_mean` and `gather`, which also work without one.
  ProcessGroup* process_group = nullptr;

  // What is trained. Owned by the trainer; null outside a run.
  torch::nn::Module* model = nullptr;            ///< the model being trained
  torch::optim::Optimizer* optimizer = nullptr;  ///< its optimizer
  c10::Device device = c10::Device(c10::kCPU);   ///< where model and batches live
  bool training = false;                         ///< true in training batches, false in evaluation

  TensorStore tensors;    ///< tensors by name, scoped (see Scope)
  MetricHistory metrics;  ///< metric name -> (step, epoch, value) series

  // Control.
  bool cancelled = false;       ///< the current batch was cancelled (CancelBatch)
  bool update_skipped = false;  ///< at StepEnd: the step made no optimizer update
  /// At StepEnd: a validation (val_every_n_steps) runs right after this step, before the next.
  bool validation_follows = false;
  /// Set up to BeforeOptimizerStep to discard this step's gradients: no optimizer step, no
  /// AfterOptimizerStep, the step is not counted (update_skipped at StepEnd). Reset every step.
  bool skip_update = false;
  std::exception_ptr error;   ///< the exception escaping the run, set before Exception fires
  std::string error_message;  ///< its what(), for logging

  /// Asks the run to stop at the next step boundary; the first reason given is kept.
  void request_stop(std::string reason);
  /// Whether a stop was requested.
  bool stop_requested() const noexcept { return stop_requested_; }
  /// Why the run stops (empty when it does not).
  const std::string& stop_reason() const noexcept { return stop_reason_; }
  /// Forgets a stop request (at the start of an action).
  void clear_stop() noexcept;

  /// Records `value` in the metric history at the current step and epoch.
  void record_metric(std::string_view name, double value) {
    metrics.record(name, step, epoch, value);
  }
  /// Records a one-element tensor in the metric history at the current step and epoch, no sync.
  void record_metric(std::string_view name, at::Tensor value) {
    metrics.record(name, step, epoch, std::move(value));
  }

 private:
  bool stop_requested_ = false;
  std::string stop_reason_;
};

}  // namespace torchbus
