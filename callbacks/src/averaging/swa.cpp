#include "support/model_weights.hpp"
#include "support/named_optimizer_phase.hpp"

#include <spdlog/spdlog.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>
#include <torchbus/batch_source.hpp>
#include <torchbus/callbacks/archive_value.hpp>
#include <torchbus/callbacks/swa.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/state.hpp>
#include <torchbus/trainer.hpp>

#include <cmath>
#include <functional>
#include <utility>

namespace torchbus {
namespace {

constexpr double kPi = 3.14159265358979323846;

/// A batch-norm layer of any dimension, seen through what update_batch_norm changes.
struct BatchNormLayer {
  c10::optional<double>* momentum;
  std::function<void()> reset_running_stats;
};

template <typename Impl>
bool add_if(torch::nn::Module& module, std::vector<BatchNormLayer>& layers) {
  auto* layer = dynamic_cast<Impl*>(&module);
  if (layer == nullptr || !layer->options.track_running_stats()) return false;
  layers.push_back({&layer->options.momentum(), [layer] { layer->reset_running_stats(); }});
  return true;
}

/// The batch-norm layers of `model` that track running statistics.
std::vector<BatchNormLayer> batch_norm_layers(torch::nn::Module& model) {
  std::vector<BatchNormLayer> layers;
  for (const auto& module : model.modules(/*include_self=*/true)) {
    add_if<torch::nn::BatchNorm1dImpl>(*module, layers) ||
        add_if<torch::nn::BatchNorm2dImpl>(*module, layers) ||
        add_if<torch::nn::BatchNorm3dImpl>(*module, layers);
  }
  return layers;
}

}  // namespace

void SWAOptions::validate() const {
  TORCHBUS_CHECK(start_fraction() > 0.0 && start_fraction() <= 1.0, ConfigError,
                 "SWA: start_fraction must be in (0, 1], got ", start_fraction());
  TORCHBUS_CHECK(!start_epoch() || *start_epoch() >= 0, ConfigError,
                 "SWA: start_epoch must be >= 0, got ", start_epoch().value_or(0));
  TORCHBUS_CHECK(!swa_lr() || *swa_lr() >= 0.0, ConfigError, "SWA: swa_lr must be >= 0, got ",
                 swa_lr().value_or(0.0));
  TORCHBUS_CHECK(annealing_epochs() >= 1, ConfigError, "SWA: annealing_epochs must be >= 1, got ",
                 annealing_epochs());
}

SWA::SWA(SWAOptions options) : Callback(options.name()), options_(std::move(options)) {
  set_role(Role::WeightAveraging).after(Role::Scheduler);
  options_.validate();
}

double SWA::learning_rate(std::int64_t epoch, std::int64_t start_epoch, double base_lr) const {
  if (!options_.swa_lr() || epoch < start_epoch) return base_lr;
  const double t = std::min(1.0, static_cast<double>(epoch - start_epoch + 1) /
                                     static_cast<double>(options_.annealing_epochs()));
  const double alpha =
      options_.annealing() == SWAAnnealing::Cosine ? (1.0 - std::cos(kPi * t)) / 2.0 : t;
  return *options_.swa_lr() * alpha + base_lr * (1.0 - alpha);
}

int SWA::update_batch_norm(torch::nn::Module& model, const Forward& forward, BatchSource& data,
                           c10::Device device) {
  auto layers = batch_norm_layers(model);
  if (layers.empty()) return 0;
  std::vector<c10::optional<double>> momenta;
  for (auto& layer : layers) {
    momenta.push_back(*layer.momentum);
    *layer.momentum = c10::nullopt;  // a cumulative average over the pass
    layer.reset_running_stats();
  }
  struct Restore {
    torch::nn::Module& model;
    std::vector<BatchNormLayer>& layers;
    std::vector<c10::optional<double>>& momenta;
    bool training;
    ~Restore() {
      for (std::size_t i = 0; i < layers.size(); ++i) *layers[i].momentum = momenta[i];
      model.train(training);
    }
  } restore{model, layers, momenta, model.is_training()};
  model.train(true);
  at::NoGradGuard no_grad;
  data.start_epoch(0);
  Batch batch;
  std::int64_t batches = 0;
  while (data.next(batch)) {
    forward(batch.data.to(device));
    ++batches;
  }
  TORCHBUS_CHECK(batches > 0, DataError, "SWA: the batch-norm data yielded no batches");
  return static_cast<int>(layers.size());
}

void SWA::on_added(Trainer& trainer) {
  finish_ = trainer.on(
      Event::ActionEnd, [this](State& state) { finish(state); },
      detail::after_final_save(name(), "finish"));
}

std::string SWA::owner() const {
  return detail::concat("SWA '", name(), "'");
}

void SWA::on_action_start(State& state) {
  if (!options_.phase().empty()) detail::named_optimizer_phase(state, options_.phase(), owner());
  TORCHBUS_CHECK(!options_.batch_norm_data() || options_.batch_norm_forward() ||
                     state.trainer().optimizer_phases().front().name().empty(),
                 ConfigError, owner(),
                 ": a trainer of optimizer phases has no forward of its own to recompute the "
                 "batch-norm statistics with; give batch_norm_forward");
  if (options_.start_epoch()) {
    start_epoch_ = *options_.start_epoch();
    return;
  }
  TORCHBUS_CHECK(state.max_epochs >= 0, ConfigError, "SWA '", name(),
                 "': start_fraction needs max_epochs (the run has none); set start_epoch");
  const auto last_epoch = std::max<std::int64_t>(state.max_epochs - 1, 0);
  const double start =
      std::floor(options_.start_fraction() * static_cast<double>(state.max_epochs));
  // A max_epochs near 2^63 rounds up to 2^63 as a double, which no int64 holds.
  start_epoch_ =
      start < static_cast<double>(last_epoch) ? static_cast<std::int64_t>(start) : last_epoch;
}

void SWA::on_step_start(State& state) {
  if (!options_.swa_lr() || state.epoch < start_epoch_ || state.optimizer == nullptr) return;
  auto* optimizer =
      options_.phase().empty()
          ? state.optimizer
          : detail::named_optimizer_phase(state, options_.phase(), owner()).optimizer();
  auto& groups = optimizer->param_groups();
  if (base_lrs_.empty()) {
    for (auto& group : groups) base_lrs_.push_back(group.options().get_lr());
  }
  TORCHBUS_CHECK(base_lrs_.size() == groups.size(), CheckpointError, "SWA '", name(),
                 "': ", base_lrs_.size(), " learning rates kept, the optimizer has ", groups.size(),
                 " parameter groups");
  for (std::size_t i = 0; i < groups.size(); ++i) {
    groups[i].options().set_lr(learning_rate(state.epoch, start_epoch_, base_lrs_[i]));
  }
}

void SWA::on_epoch_start(State& state) {
  // The epoch a stop or max_steps cut short at EpochEnd had ended after all: this run (resumed or
  // not) continues with the next one.
  if (pending_epoch_ >= 0 && state.epoch > pending_epoch_ && state.model != nullptr) {
    add_to_average(state);
  }
  pending_epoch_ = -1;
}

void SWA::on_epoch_end(State& state) {
  if (state.error || start_epoch_ < 0 || state.epoch < start_epoch_ || state.model == nullptr) {
    return;
  }
  if (state.epoch_cut_short) {
    pending_epoch_ = state.epoch;  // added when it turns out to have ended, or at the end of fit
  } else {
    add_to_average(state);
  }
}

void SWA::add_to_average(const State& state) {
  const auto weights =
      detail::averaged_weights(state, options_.phase(), /*with_buffers=*/false, owner());
  at::NoGradGuard no_grad;
  if (average_.empty()) {
    for (const auto& weight : weights) average_.push_back(weight.detach().clone());
  } else {
    const auto mismatch = detail::weights_mismatch(average_, weights, "the average");
    TORCHBUS_CHECK(mismatch.empty(), CheckpointError, owner(), ": ", mismatch);
    const double weight_of_new = 1.0 / static_cast<double>(averaged_ + 1);
    for (std::size_t i = 0; i < weights.size(); ++i) {
      average_[i].lerp_(weights[i].detach(), weight_of_new);
    }
  }
  ++averaged_;
}

void SWA::finish(const State& state) {
  // Only at the end of fit(), not of evaluate(); after an exception the weights stay.
  if (state.action != Action::Fit || state.error || state.model == nullptr) return;
  if (pending_epoch_ >= 0) {  // the weights the run ends with
    add_to_average(state);
    pending_epoch_ = -1;
  }
  if (average_.empty()) {
    logger()->warn(
        "SWA '{}': the run ended at epoch {} before the averaging started (epoch {}); "
        "the model keeps its weights",
        name(), state.epoch, start_epoch_);
    return;
  }
  const auto weights =
      detail::averaged_weights(state, options_.phase(), /*with_buffers=*/false, owner());
  const auto mismatch = detail::weights_mismatch(average_, weights, "the average");
  TORCHBUS_CHECK(mismatch.empty(), CheckpointError, owner(), ": ", mismatch);
  detail::copy_weights(average_, weights);
  update_batch_norm_at_end(state);
  logger()->info("SWA '{}': the model holds the average of {} epochs' weights", name(), averaged_);
}

void SWA::update_batch_norm_at_end(const State& state) {
  // The phase's model, or the whole model (a phase without a model trains part of it).
  std::shared_ptr<torch::nn::Module> phase_model;
  if (!options_.phase().empty()) {
    phase_model = detail::named_optimizer_phase(state, options_.phase(), owner()).model();
  }
  auto& model = phase_model ? *phase_model : *state.model;
  if (options_.batch_norm_data()) {
    auto forward = options_.batch_norm_forward();
    if (!forward) {
      forward = [&trainer = state.trainer()](const at::Tensor& input) {
        return trainer.forward(input);
      };
    }
    update_batch_norm(model, forward, *options_.batch_norm_data(), state.device);
  } else if (!batch_norm_layers(model).empty()) {
    logger()->warn(
        "SWA '{}': the model has batch-norm layers but no batch_norm_data was given; "
        "their statistics belong to the last weights, not to the average",
        name());
  }
}

void SWA::save_state(torch::serialize::OutputArchive& archive) const {
  archive.write("averaged", c10::IValue(averaged_));
  archive.write("average", c10::IValue(detail::copies_of(average_)));
  archive.write("base_lrs", c10::IValue(base_lrs_));
  archive.write("pending_epoch", c10::IValue(pending_epoch_));
}

void SWA::load_state(torch::serialize::InputArchive& archive) {
  averaged_ = read_integer(archive, "averaged", 0);
  const auto list = read_value(archive, "average").toTensorList();
  average_.assign(list.begin(), list.end());
  base_lrs_ = read_value(archive, "base_lrs").toDoubleVector();
  for (const double lr : base_lrs_) {
    TORCHBUS_CHECK(std::isfinite(lr) && lr >= 0.0, CheckpointError, owner(),
                   ": the checkpoint holds the learning rate ", lr, " (expected finite and >= 0)");
  }
  pending_epoch_ = read_integer(archive, "pending_epoch", -1);
}

}  // namespace torchbus
