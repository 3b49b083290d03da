#include "run_setup.hpp"

#include "accuracy.hpp"
#include "exit_status.hpp"
#include "model.hpp"

#include <torchbus/callbacks/regression_metrics.hpp>

#include <spdlog/fmt/fmt.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace train {
namespace {

/// Bytes a model of `parameters` needs while training: weights, gradients, optimizer state.
double training_bytes(double parameters, const std::string& optimizer) {
  const double copies = optimizer == "sgd" ? 3 : 4;  // SGD keeps momentum; Adam(W) two moments
  return parameters * copies * sizeof(float);
}

double physical_memory_bytes() {
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

std::string gib(double bytes) {
  return fmt::format("{:.3g} GiB", bytes / (1024.0 * 1024.0 * 1024.0));
}

/// Refuses a model that cannot fit in this machine's memory, naming what makes it that large.
void check_model_fits(const Flags& flags, const Dataset& data, bool cnn) {
  const auto inputs =
      data.train_inputs.numel() / std::max<std::int64_t>(1, data.train_inputs.size(0));
  const double parameters =
      cnn ? cnn_parameter_count(data.train_inputs.size(2), data.train_inputs.size(3), data.classes)
          : mlp_parameter_count(inputs, flags.hidden, data.classes);
  const double needed = training_bytes(parameters, flags.optimizer);
  const double available = physical_memory_bytes();
  if (needed <= available) return;
  std::string hidden;
  for (const auto width : flags.hidden) hidden += " " + std::to_string(width);
  const auto message = fmt::format(
      "the {} would have {:.3g} parameters, {} with gradients and {} state, more than this "
      "machine's {} of memory: {}{} classes in the data",
      cnn ? "CNN" : "MLP", parameters, gib(needed), flags.optimizer, gib(available),
      cnn ? std::string() : "--hidden" + hidden + ", ", data.classes);
  // The data's classes alone overflowing memory is a data problem, else the flags are.
  const double output_layer =
      cnn ? 0.0 : training_bytes(static_cast<double>(data.classes), flags.optimizer);
  if (output_layer > available) throw torchbus::DataError(message);
  throw UsageError(message);
}

}  // namespace

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const Flags& flags,
                                                        const std::vector<at::Tensor>& parameters) {
  if (flags.optimizer == "sgd") {
    return std::make_unique<torch::optim::SGD>(parameters,
                                               torch::optim::SGDOptions(flags.lr).momentum(0.9));
  }
  if (flags.optimizer == "adamw") {
    return std::make_unique<torch::optim::AdamW>(parameters, torch::optim::AdamWOptions(flags.lr));
  }
  return std::make_unique<torch::optim::Adam>(parameters, torch::optim::AdamOptions(flags.lr));
}

bool uses_cnn(const Flags& flags, const Dataset& data) {
  return flags.model == "cnn" || (flags.model == "auto" && data.images);
}

torch::nn::Sequential make_model(const Flags& flags, const Dataset& data) {
  const bool cnn = uses_cnn(flags, data);
  if (cnn) {
    if (!data.images) throw UsageError("--model cnn needs image data (--data mnist:DIR)");
    if (flags.hidden_given) {
      throw UsageError(std::string("--hidden sets the MLP's hidden widths; the CNN (") +
                       (flags.model == "cnn" ? "--model cnn" : "--model auto on images") +
                       ") has none: drop --hidden, or train an MLP with --model mlp");
    }
    const auto height = data.train_inputs.size(2), width = data.train_inputs.size(3);
    TORCHBUS_CHECK(height >= kCnnMinImageSide && width >= kCnnMinImageSide, torchbus::DataError,
                   "MNIST: the images of ", data.images_file, " are ", height, "x", width,
                   " pixels; the CNN needs at least ", kCnnMinImageSide, "x", kCnnMinImageSide,
                   " (it pools twice by 2); train an MLP on them with --model mlp");
  }
  check_model_fits(flags, data, cnn);
  if (cnn) return make_cnn(data.train_inputs.size(2), data.train_inputs.size(3), data.classes);
  const auto inputs = data.train_inputs.numel() / data.train_inputs.size(0);
  return make_mlp(inputs, flags.hidden, data.classes);
}

at::Tensor classification_loss(const at::Tensor& output, const at::Tensor& target) {
  return torch::nn::functional::cross_entropy(output, target);
}

at::Tensor regression_loss(const at::Tensor& output, const at::Tensor& target) {
  return torch::mse_loss(output, target);
}

torchbus::Trainer::LossFunction loss_of(const Flags& flags) {
  return flags.task == "regression" ? regression_loss : classification_loss;
}

void add_task_metrics(torchbus::Trainer& trainer, const Flags& flags) {
  if (flags.task == "regression") {
    trainer.add(std::make_shared<torchbus::RegressionMetrics>());
  } else {
    trainer.add(std::make_shared<Accuracy>());
  }
}

torchbus::TrainerOptions trainer_options(const Flags& flags, const c10::Device& device) {
  return torchbus::TrainerOptions()
      .max_epochs(flags.epochs)
      .max_steps(flags.max_steps)
      .min_epochs(flags.min_epochs)
      .accumulate_grad_batches(flags.accumulate)
      .accumulation_schedule(flags.accumulate_schedule.empty()
                                 ? torchbus::AccumulationSchedule()
                                 : *parse_accumulation_schedule(flags.accumulate_schedule))
      .limit_train_batches(flags.limit_train_batches.empty()
                               ? torchbus::BatchLimit::all()
                               : *parse_batch_limit(flags.limit_train_batches))
      .limit_val_batches(flags.limit_val_batches.empty()
                             ? torchbus::BatchLimit::all()
                             : *parse_batch_limit(flags.limit_val_batches))
      .fast_dev_run(flags.fast_dev_run)
      .num_sanity_val_steps(flags.sanity_val_steps)
      .val_every_n_epochs(flags.val_every)
      .val_every_n_steps(flags.val_every_steps)
      .seed(flags.seed)
      .precision(torchbus::parse_precision(flags.precision))
      .channels_last(flags.channels_last)
      .device(device);
}

RankBatches rank_batches(const Flags& flags, const Dataset& data,
                         const torchbus::ProcessGroup& group, const c10::Device& device) {
  const int rank = group.rank();
  const int world_size = group.world_size();
  // Batches for a GPU are gathered into page-locked memory: the trainer's copy to the device then
  // returns at once, and the next batch is gathered while the GPU works.
  const bool pin = device.is_cuda();
  return {
      ShuffledBatches(data.train_inputs, data.train_targets, flags.batch_size,
                      /*shuffle=*/true, flags.seed, {rank, world_size, /*equal_sizes=*/true}, pin),
      ShuffledBatches(data.validation_inputs, data.validation_targets, flags.batch_size,
                      /*shuffle=*/false, flags.seed, {rank, world_size, /*equal_sizes=*/false},
                      pin)};
}

void check_batch_limits(const Flags& flags, const RankBatches& batches) {
  const auto check = [](const std::string& text, std::int64_t size, const char* flag) {
    if (text.empty()) return;
    try {
      parse_batch_limit(text)->batches_per_pass(size, flag);
    } catch (const torchbus::ConfigError& error) {
      throw UsageError(error.what());
    }
  };
  if (flags.fast_dev_run > 0) return;
  check(flags.limit_train_batches, batches.train.batches_per_epoch(), "--limit-train-batches");
  if (validates(flags)) {
    check(flags.limit_val_batches, batches.validation.batches_per_epoch(), "--limit-val-batches");
  }
}

void check_shardable(const Flags& flags, const Dataset& data, int world_size) {
  const auto rows = data.validation_inputs.size(0);
  TORCHBUS_CHECK(!gets_validation_data(flags) || rows >= world_size, torchbus::DataError,
                 "the validation split has ", rows, " sample(s) for ", world_size,
                 " ranks; expected at least one per rank (each rank validates its share)");
}

}  // namespace train
