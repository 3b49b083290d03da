#pragma once

/// \file
/// SWA: stochastic weight averaging (Izmailov et al. 2018), as `torch.optim.swa_utils` and
/// Lightning's StochasticWeightAveraging do it.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/arg.h>
#include <torchbus/callback.hpp>
#include <torchbus/connection.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace torch::nn {
class Module;
}

namespace torchbus {

class BatchSource;

/// How the learning rate moves to `swa_lr` once averaging starts.
enum class SWAAnnealing { Cosine, Linear };

/// When and how SWA averages, e.g. `SWAOptions().start_fraction(0.75).swa_lr(0.01)`.
struct SWAOptions {
  /// The callback's name, unique in a trainer: its state's key in checkpoints (give each
  /// instance of a run its own).
  TORCH_ARG(std::string, name) = "swa";
  /// The first averaged epoch, as a fraction of max_epochs: epoch floor(fraction * max_epochs),
  /// in (0, 1]. Ignored when `start_epoch` is set.
  TORCH_ARG(double, start_fraction) = 0.8;
  /// The first averaged epoch (0-based); overrides `start_fraction`.
  TORCH_ARG(std::optional<std::int64_t>, start_epoch) = std::nullopt;
  /// The learning rate of the averaging epochs, reached after `annealing_epochs` (none: the
  /// optimizer's learning rate is left alone).
  TORCH_ARG(std::optional<double>, swa_lr) = std::nullopt;
  /// Epochs over which the learning rate moves from its value at the start to `swa_lr` (>= 1).
  TORCH_ARG(std::int64_t, annealing_epochs) = 10;
  /// The shape of that move.
  TORCH_ARG(SWAAnnealing, annealing) = SWAAnnealing::Cosine;
  /// Data for recomputing the batch-norm statistics of the averaged weights when fit() ends (as
  /// `torch.optim.swa_utils.update_bn`); needed only when the model has batch-norm layers.
  TORCH_ARG(std::shared_ptr<BatchSource>, batch_norm_data) = nullptr;
  /// The forward pass run on `batch_norm_data` (none: the trainer's). A trainer of optimizer
  /// phases has no forward of its own: give the averaged phase's, e.g. the generator's.
  TORCH_ARG(std::function<at::Tensor(const at::Tensor&)>, batch_norm_forward) = nullptr;
  /// With several optimizers (docs/trainer.md, "Several optimizers"): the optimizer phase whose
  /// weights it averages, by name: that phase's model's parameters when it has one, otherwise
  /// the parameters its optimizer trains; `swa_lr` then sets that phase's learning rates, and
  /// the batch-norm statistics recomputed are the phase model's. Empty: the trainer's whole model
  /// (and `swa_lr` on the first phase's optimizer).
  TORCH_ARG(std::string, phase) = "";

 public:
  /// Throws ConfigError naming the first option out of range.
  void validate() const;
};

/// Averages the weights with equal weight at the end of every epoch from the start epoch on
/// (`average += (weights - average) / (n + 1)`), optionally annealing every parameter group's
/// learning rate to `swa_lr` at each step of those epochs, and when fit() ends without an
/// exception puts the average into the model and recomputes its batch-norm statistics. The
/// average, its count and the learning rates at the start are kept in checkpoints (exact resume).
/// Role::WeightAveraging, after Role::Scheduler: at StepStart its rate wins over
/// LearningRateScheduler's in the averaging epochs; checkpoints run after weight averaging.
class SWA : public Callback {
 public:
  /// An SWA named by its options; throws ConfigError for invalid options.
  explicit SWA(SWAOptions options = {});

  /// The options it was built with.
  const SWAOptions& options() const noexcept { return options_; }
  /// Epochs averaged so far.
  std::int64_t averaged() const noexcept { return averaged_; }
  /// The averaged parameters (empty before the first averaged epoch).
  const std::vector<at::Tensor>& average() const noexcept { return average_; }
  /// The learning rate SWA gives `base_lr` in training epoch `epoch` (0-based) of a run whose
  /// averaging starts at `start_epoch`: annealed to `swa_lr`, `base_lr` before the start.
  double learning_rate(std::int64_t epoch, std::int64_t start_epoch, double base_lr) const;

  /// Runs the model on a batch's inputs.
  using Forward = std::function<at::Tensor(const at::Tensor& input)>;
  /// Recomputes the running statistics of every batch-norm layer of `model` as the cumulative
  /// average over one pass of `data` through `forward` in training mode (momentum set aside),
  /// like `torch.optim.swa_utils.update_bn`; returns the number of layers. The model's mode and
  /// momenta are restored.
  static int update_batch_norm(torch::nn::Module& model, const Forward& forward, BatchSource& data,
                               c10::Device device);

  /// Subscribes the end-of-fit swap after every checkpoint, so that the last checkpoint holds
  /// the raw weights a resume continues from.
  void on_added(Trainer& trainer) override;
  /// Resolves the start epoch (max_epochs is known now) and checks the phase it names.
  void on_action_start(State& state) override;
  /// In averaging epochs with `swa_lr`: sets the annealed learning rate.
  void on_step_start(State& state) override;
  /// Adds the weights of an epoch that a stop seemed to cut short but had ended.
  void on_epoch_start(State& state) override;
  /// From the start epoch on: adds the weights to the average (an epoch cut short by a stop or
  /// max_steps waits: it is added at the end of fit, or dropped when a resume continues it).
  void on_epoch_end(State& state) override;

  /// Writes the average, its count and the learning rates at the start.
  void save_state(torch::serialize::OutputArchive& archive) const override;
  /// Its state is copies: a background checkpoint serializes it off the training thread.
  bool state_is_snapshot() const override { return true; }
  /// Restores what `save_state` wrote.
  void load_state(torch::serialize::InputArchive& archive) override;

 private:
  std::string owner() const;  // "SWA '<name>'", for errors
  void add_to_average(const State& state);
  void finish(const State& state);
  void update_batch_norm_at_end(const State& state);

  SWAOptions options_;
  std::int64_t start_epoch_ = -1;
  std::vector<double> base_lrs_;  // every group's learning rate when averaging started
  std::vector<at::Tensor> average_;
  std::int64_t averaged_ = 0;
  std::int64_t pending_epoch_ = -1;  // an averaged epoch whose EpochEnd came with a stop
  ScopedConnection finish_;
};

}  // namespace torchbus
