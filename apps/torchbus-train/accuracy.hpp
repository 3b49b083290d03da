#pragma once

// Classification accuracy of training epochs and evaluations, recorded in the metric history.

#include <torchbus/torchbus.hpp>

namespace train {

/// Counts correct argmax predictions from the batch's output and target (State::batch_output(),
/// batch_target()) without a host sync
/// per batch; records "train_accuracy" at EpochEnd and "val_accuracy" at EvalEnd, over the
/// samples of every rank when the trainer has a process group (one all-reduce each).
class Accuracy : public torchbus::Callback {
 public:
  /// A metric producer (Role::Metrics): runs before monitors, schedulers and loggers.
  Accuracy();
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
};

}  // namespace train
