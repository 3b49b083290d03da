#pragma once

// The run's set-up from its flags: the model, the optimizer and the loss, the trainer's options
// and this rank's batches, each checked before anything is written.

#include "dataset.hpp"
#include "flags.hpp"
#include "shuffled_batches.hpp"

#include <torch/torch.h>
#include <torchbus/torchbus.hpp>

#include <memory>
#include <string>
#include <vector>

namespace train {

/// The optimizer --optimizer names, at --lr (SGD with momentum 0.9).
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const Flags& flags,
                                                        const std::vector<at::Tensor>& parameters);
/// Whether the run trains the CNN: --model cnn, or --model auto on images.
bool uses_cnn(const Flags& flags, const Dataset& data);
/// The network --model and --hidden describe for `data`. One that does not fit the data is a
/// UsageError or DataError naming why, one larger than this machine's memory too.
torch::nn::Sequential make_model(const Flags& flags, const Dataset& data);
/// The loss of a classification: cross entropy of the logits against the class indices.
at::Tensor classification_loss(const at::Tensor& output, const at::Tensor& target);
/// The loss of a regression: the mean squared error of the outputs [N, 1] against the values.
at::Tensor regression_loss(const at::Tensor& output, const at::Tensor& target);
/// The loss of every trainer of the run, by --task.
torchbus::Trainer::LossFunction loss_of(const Flags& flags);
/// The metrics of every evaluation of the run, by --task: the accuracy (train_ and val_ or test_
/// accuracy), or RegressionMetrics (val_mse, val_mae, val_rmse, val_r2, ...).
void add_task_metrics(torchbus::Trainer& trainer, const Flags& flags);
/// The trainer's options as the flags give them (the run's identity is set once OUT is read).
torchbus::TrainerOptions trainer_options(const Flags& flags, const c10::Device& device);

/// This rank's shards of the data, in batches of --batch-size on every rank.
struct RankBatches {
  ShuffledBatches train;       ///< shuffled, as many batches on every rank
  ShuffledBatches validation;  ///< in order, every sample once
};
/// This rank's batches of `data` in the process group `group`, on their way to `device`.
RankBatches rank_batches(const Flags& flags, const Dataset& data,
                         const torchbus::ProcessGroup& group, const c10::Device& device);
/// Refuses a --limit-*-batches fraction that keeps no batch of this data: a usage error, found
/// before OUT is touched (a --fast-dev-run ignores both flags).
void check_batch_limits(const Flags& flags, const RankBatches& batches);
/// Refuses data that cannot be shared among `world_size` ranks: each validates its share.
void check_shardable(const Flags& flags, const Dataset& data, int world_size);

}  // namespace train
