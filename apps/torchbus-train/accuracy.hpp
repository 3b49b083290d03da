#pragma once

// Classification accuracy of training epochs and evaluations, recorded in the metric history.

#include <torchbus/torchbus.hpp>

namespace train {

/// Counts correct argmax predictions from the batch's output and target (State::batch_output(),
/// batch_target()) without a host sync
/// per batch; records "train_accuracy" at EpochEnd and "val_accuracy" at EvalEnd, over the
/// samples of every rank when the trainer has a process group (one all-reduce each).
/// The training epoch's tally goes into checkpoints: an epoch that one process wrote and one or
/// several ranks resume mid-way records the accuracy over all its batches, as the uninterrupted
/// run does. A checkpoint of several ranks holds rank 0's tally only, so an epoch they wrote and
/// anyone resumes is counted from the resume on.
class Accuracy : public torchbus::Callback {
 public:
  /// A metric producer (Role::Metrics): runs before monitors, schedulers and loggers.
  Accuracy();
  /// The training epoch's correct predictions and samples so far.
  void save_state(torch::serialize::OutputArchive& archive) const override;
  /// Restores what `save_state` wrote.
  void load_state(torch::serialize::InputArchive& archive) override;
  /// Keeps the restored tally for an epoch resumed mid-way from a one-process checkpoint.
  void on_load_checkpoint(const torchbus::Checkpoint& checkpoint) override;
  void on_epoch_start(torchbus::State& state) override;
  void on_batch_end(torchbus::State& state) override;
  void on_epoch_end(torchbus::State& state) override;
  void on_eval_start(torchbus::State& state) override;
  void on_eval_batch_end(torchbus::State& state) override;
  void on_eval_end(torchbus::State& state) override;

 private:
  struct Tally {
    at::Tensor correct;
    std::int64_t seen = 0;
    void reset();
    void add(const torchbus::State& state);
    void record(torchbus::State& state, std::string_view name);
  };
  Tally train_, eval_;
  bool resumed_mid_epoch_ = false;  // the next EpochStart continues the restored tally
};

}  // namespace train
