#include "steering.hpp"

#include "exit_status.hpp"
#include "run_setup.hpp"

#include <torchbus/callbacks/callbacks.hpp>

#include <algorithm>
#include <limits>

namespace train {
namespace {

/// The schedule --scheduler names, over the run's optimizer steps.
std::shared_ptr<torchbus::LearningRateScheduler> make_scheduler(const std::string& kind,
                                                                std::int64_t total_steps) {
  using torchbus::LearningRateScheduler;
  if (kind == "cosine") {
    return std::make_shared<LearningRateScheduler>(
        torchbus::CosineDecayOptions(total_steps).warmup_steps(total_steps / 10));
  }
  // Periods of ceil(steps / 7) and ceil(steps / 3): the run ends inside the last (annealed)
  // period, never in the restart or decay that a rounded-down period puts after it.
  const auto part = [total_steps](std::int64_t parts) {
    return std::max<std::int64_t>(1, (total_steps + parts - 1) / parts);
  };
  if (kind == "restarts") {
    return std::make_shared<LearningRateScheduler>(
        torchbus::CosineRestartsOptions(part(7)).period_mult(2));
  }
  if (kind == "onecycle") {
    return std::make_shared<LearningRateScheduler>(torchbus::OneCycleOptions(total_steps));
  }
  if (kind == "linear") {
    return std::make_shared<LearningRateScheduler>(torchbus::PolynomialDecayOptions(total_steps));
  }
  if (kind == "step") {
    return std::make_shared<LearningRateScheduler>(torchbus::StepDecayOptions(part(3)));
  }
  if (kind == "plateau") {
    return std::make_shared<LearningRateScheduler>(torchbus::ReduceOnPlateauOptions().patience(1));
  }
  return nullptr;
}

/// a + b for a, b >= 0, or the largest int64 when the sum is larger.
std::int64_t saturating_add(std::int64_t a, std::int64_t b) {
  constexpr auto largest = std::numeric_limits<std::int64_t>::max();
  return a > largest - b ? largest : a + b;
}

/// a * b for a, b >= 0, or the largest int64 when the product is larger.
std::int64_t saturating_multiply(std::int64_t a, std::int64_t b) {
  constexpr auto largest = std::numeric_limits<std::int64_t>::max();
  return b != 0 && a > largest / b ? largest : a * b;
}

/// The optimizer steps the run makes when nothing stops it early (the largest int64 when more):
/// per epoch, its training batches (within --limit-train-batches) in windows of that epoch's k.
/// k changes only at the accumulation schedule's entries, so the epochs between two entries are
/// counted at once, however many --epochs asks for. A --fast-dev-run counts the steps of the run
/// it checks (it makes the first of them), so that it runs that run's schedule.
std::int64_t planned_steps(const Flags& flags, const torchbus::TrainerOptions& options,
                           std::int64_t batches_per_epoch) {
  const auto limit =
      options.limit_train_batches().batches_per_pass(batches_per_epoch, "--limit-train-batches");
  const auto batches = limit < 0 ? batches_per_epoch : std::min(limit, batches_per_epoch);
  std::vector<std::int64_t> k_changes{0};  // the first epoch of each stretch of one k
  for (const auto& entry : options.accumulation_schedule()) {
    if (entry.first > 0 && entry.first < options.max_epochs()) k_changes.push_back(entry.first);
  }
  k_changes.push_back(std::max<std::int64_t>(0, options.max_epochs()));
  std::int64_t steps = 0;
  for (std::size_t i = 0; i + 1 < k_changes.size(); ++i) {
    const auto k = options.accumulate_grad_batches_at(k_changes[i]);
    const auto steps_per_epoch = batches / k + (batches % k != 0 ? 1 : 0);
    steps = saturating_add(steps,
                           saturating_multiply(k_changes[i + 1] - k_changes[i], steps_per_epoch));
  }
  if (flags.max_steps > 0) steps = std::min(steps, flags.max_steps);
  return steps;
}

/// The callbacks that change what the run does, as the flags ask.
std::vector<std::shared_ptr<torchbus::Callback>> steering_callbacks(
    const Flags& flags, const torchbus::TrainerOptions& options, std::int64_t batches_per_epoch) {
  std::vector<std::shared_ptr<torchbus::Callback>> callbacks;
  if (flags.time_limit > 0) {
    callbacks.push_back(
        std::make_shared<torchbus::Timer>(torchbus::TimerOptions().time_limit(flags.time_limit)));
  }
  if (flags.early_stopping > 0) {
    callbacks.push_back(std::make_shared<torchbus::EarlyStopping>(
        torchbus::EarlyStoppingOptions().patience(flags.early_stopping)));
  }
  if (flags.ema > 0) {
    callbacks.push_back(std::make_shared<torchbus::EMA>(torchbus::EMAOptions().decay(flags.ema)));
  }
  if (flags.swa_start > 0) {
    auto options = torchbus::SWAOptions().start_fraction(flags.swa_start);
    if (flags.swa_lr > 0) options.swa_lr(flags.swa_lr).annealing_epochs(1);
    callbacks.push_back(std::make_shared<torchbus::SWA>(options));
  }
  const auto total_steps = planned_steps(flags, options, batches_per_epoch);
  try {
    if (auto scheduler = make_scheduler(flags.scheduler, total_steps)) {
      callbacks.push_back(scheduler);
    }
  } catch (const torchbus::ConfigError& error) {
    throw UsageError("--scheduler " + flags.scheduler + " over the run's " +
                     std::to_string(total_steps) + " optimizer step(s): " + error.what());
  }
  return callbacks;
}

}  // namespace

std::vector<std::shared_ptr<torchbus::Callback>> configured_steering(
    const Flags& flags, const c10::Device& device, std::int64_t batches_per_epoch) {
  try {
    const auto options = trainer_options(flags, device);
    options.validate();
    return steering_callbacks(flags, options, batches_per_epoch);
  } catch (const torchbus::ConfigError& error) {
    throw UsageError(error.what());
  }
}

}  // namespace train
