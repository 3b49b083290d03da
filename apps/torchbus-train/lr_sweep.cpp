#include "lr_sweep.hpp"

#include "exit_status.hpp"
#include "run_callbacks.hpp"
#include "run_directory.hpp"
#include "run_setup.hpp"
#include "shuffled_batches.hpp"
#include "startup_signals.hpp"

#include <fmt/format.h>

#include <cmath>

namespace train {

namespace fs = std::filesystem;

torchbus::LRFinderResult find_lr(const Flags& flags, const Dataset& data,
                                 const torch::nn::Sequential& model, int world_size,
                                 const c10::Device& device) {
  if (world_size > 1) {
    throw UsageError(
        "--find-lr runs the learning-rate range test in one process; run it without mpirun, "
        "torchrun or srun, then pass the lr it found with --lr");
  }
  const torchbus::LRFinderOptions options;
  auto optimizer = make_optimizer(flags, model->parameters());
  torchbus::Trainer trainer(model, *optimizer, loss_of(flags),
                            torchbus::TrainerOptions()
                                .max_epochs(-1)
                                .max_steps(options.num_steps())
                                .accumulate_grad_batches(flags.accumulate)
                                .device(device)
                                .seed(flags.seed)
                                .precision(torchbus::parse_precision(flags.precision))
                                .channels_last(flags.channels_last)
                                .use_registered_subscriptions(false));
  stop_at_signals(trainer);
  ShuffledBatches batches(data.train_inputs, data.train_targets, flags.batch_size,
                          /*shuffle=*/true, flags.seed, {}, device.is_cuda());
  auto result = torchbus::find_learning_rate_source(trainer, batches, options);
  exit_if_signalled_during_startup();
  if (!result.suggestion) {
    throw torchbus::Error(fmt::format(
        "--find-lr: the learning-rate range test found no learning rate ({} steps{}); choose one "
        "with --lr instead",
        result.lrs.size(), result.diverged ? ", the loss diverged" : ""));
  }
  return result;
}

std::optional<torchbus::LRFinderResult> recorded_lr_sweep(const Flags& flags, int world_size,
                                                          const IdentitiesOf& identities_of) {
  const fs::path out(flags.out);
  if (!flags.resume || world_size > 1 || !fs::exists(out / "lr_finder.csv")) return std::nullopt;
  const auto recorded_identity = read_identity(out);
  if (!recorded_identity) return std::nullopt;
  torchbus::LRFinderResult sweep;
  try {
    sweep = torchbus::LRFinderResult::read_csv(out / "lr_finder.csv");
  } catch (const torchbus::Error& error) {
    torchbus::logger()->warn("--find-lr --resume: {}; running the range test again", error.what());
    return std::nullopt;
  }
  if (!sweep.suggestion) return std::nullopt;
  auto with_lr = flags;
  with_lr.lr = *sweep.suggestion;
  for (const auto& identity : identities_of(with_lr)) {
    if (identity == *recorded_identity) return sweep;
  }
  return std::nullopt;
}

void report_lr_found(const torchbus::LRFinderResult& found, bool recorded, const fs::path& out,
                     torchbus::RunReport* report) {
  const auto stopped = found.diverged ? " (stopped when the loss diverged)" : "";
  if (recorded) {
    torchbus::logger()->info(
        "--find-lr --resume: the lr the run found, {}, read back with its range test ({} "
        "steps{}) from {}; the resume trains with it and does not sweep again",
        *found.suggestion, found.lrs.size(), stopped, (out / "lr_finder.csv").string());
  } else {
    found.write_csv(out / "lr_finder.csv");
    torchbus::logger()->info(
        "--find-lr: the range test ran {} steps{} and found lr {} (steepest descent of the "
        "smoothed loss); this run trains with it; the sweep is in {}",
        found.lrs.size(), stopped, *found.suggestion, (out / "lr_finder.csv").string());
  }
  if (report == nullptr) return;
  torchbus::ReportChart chart;
  chart.title = "Learning-rate range test";
  chart.x_label = "log10(lr)";
  chart.y = found.smoothed_losses;
  chart.highlight = found.suggestion_index;
  chart.caption = fmt::format(
      "--find-lr: the smoothed loss of {} steps{}; ring: the lr found, {:.4g} (steepest descent), "
      "which this run trains with",
      found.lrs.size(), stopped, *found.suggestion);
  for (const double lr : found.lrs) chart.x.push_back(std::log10(lr));
  report->add_chart(std::move(chart));
}

}  // namespace train
