#include "support/named_optimizer_phase.hpp"

#include <spdlog/spdlog.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/schedulers/lr_scheduler.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/archive.h>
#include <torchbus/callbacks/archive_value.hpp>
#include <torchbus/callbacks/learning_rate_scheduler.hpp>
#include <torchbus/callbacks/logged_values.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/state.hpp>
#include <torchbus/trainer.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

namespace torchbus {
namespace {

/// LibTorch's LRScheduler keeps its step count protected and has no state_dict; a member pointer
/// taken through a derived class reads and restores it (a scheduler's only state besides the
/// optimizer's learning rates, which the optimizer's own state holds).
struct StepCountAccess : torch::optim::LRScheduler {
  static unsigned torch::optim::LRScheduler::*member() { return &StepCountAccess::step_count_; }
};

unsigned& step_count(torch::optim::LRScheduler& scheduler) {
  return scheduler.*StepCountAccess::member();
}

/// Sets the momentum of SGD and RMSprop, beta1 of Adam and AdamW (as PyTorch's OneCycleLR).
void set_momentum(torch::optim::OptimizerParamGroup& group, double momentum) {
  auto& options = group.options();
  if (auto* sgd = dynamic_cast<torch::optim::SGDOptions*>(&options)) {
    sgd->momentum(momentum);
  } else if (auto* rmsprop = dynamic_cast<torch::optim::RMSpropOptions*>(&options)) {
    rmsprop->momentum(momentum);
  } else if (auto* adam = dynamic_cast<torch::optim::AdamOptions*>(&options)) {
    adam->betas({momentum, std::get<1>(adam->betas())});
  } else if (auto* adamw = dynamic_cast<torch::optim::AdamWOptions*>(&options)) {
    adamw->betas({momentum, std::get<1>(adamw->betas())});
  } else {
    throw ConfigError(
        "LearningRateScheduler: a schedule of the momentum (one-cycle with cycle_momentum) needs "
        "an optimizer with a momentum (SGD, RMSprop) or beta1 (Adam, AdamW); this one has "
        "neither. Set OneCycleOptions::cycle_momentum(false)");
  }
}

void validate(const ReduceOnPlateauOptions& o) {
  TORCHBUS_CHECK(!o.monitor().empty(), ConfigError,
                 "LearningRateScheduler: reduce-on-plateau monitor is empty; expected the name of "
                 "a metric such as \"val_loss\"");
  TORCHBUS_CHECK(o.factor() > 0.0 && o.factor() < 1.0, ConfigError,
                 "LearningRateScheduler: reduce-on-plateau factor must be in (0, 1), got ",
                 o.factor());
  TORCHBUS_CHECK(o.patience() >= 0, ConfigError,
                 "LearningRateScheduler: reduce-on-plateau patience must be >= 0, got ",
                 o.patience());
  TORCHBUS_CHECK(o.cooldown() >= 0, ConfigError,
                 "LearningRateScheduler: reduce-on-plateau cooldown must be >= 0, got ",
                 o.cooldown());
  TORCHBUS_CHECK(o.min_lr() >= 0.0, ConfigError,
                 "LearningRateScheduler: reduce-on-plateau min_lr must be >= 0, got ", o.min_lr());
  TORCHBUS_CHECK(o.eps() >= 0.0, ConfigError,
                 "LearningRateScheduler: reduce-on-plateau eps must be >= 0, got ", o.eps());
  TORCHBUS_CHECK(o.min_delta() >= 0.0, ConfigError,
                 "LearningRateScheduler: reduce-on-plateau min_delta must be >= 0, got ",
                 o.min_delta());
  TORCHBUS_CHECK(o.threshold_mode() == ThresholdMode::Abs || o.min_delta() < 1.0, ConfigError,
                 "LearningRateScheduler: reduce-on-plateau min_delta must be < 1 with "
                 "ThresholdMode::Rel (a fraction of the best value), got ",
                 o.min_delta());
  TORCHBUS_CHECK(o.check_on() == Event::EvalEnd || o.check_on() == Event::EpochEnd, ConfigError,
                 "LearningRateScheduler: reduce-on-plateau check_on must be EvalEnd or EpochEnd, "
                 "got ",
                 to_string(o.check_on()));
}

}  // namespace

LearningRateScheduler::LearningRateScheduler(LrLambda schedule,
                                             LearningRateSchedulerOptions options)
    : LearningRateScheduler(LrSchedule(std::move(schedule)), std::move(options)) {}

LearningRateScheduler::LearningRateScheduler(LrSchedule schedule,
                                             LearningRateSchedulerOptions options)
    : Callback(options.name()),
      kind_(Kind::Lambda),
      schedule_(std::move(schedule)),
      options_(std::move(options)),
      monitor_(plateau_.monitor(), plateau_.mode(), plateau_.min_delta(),
               plateau_.threshold_mode()) {
  set_role(Role::Scheduler).after(Role::Metrics);
}

LearningRateScheduler::LearningRateScheduler(ReduceOnPlateauOptions plateau,
                                             LearningRateSchedulerOptions options)
    : Callback(options.name()),
      kind_(Kind::Plateau),
      plateau_(std::move(plateau)),
      options_(std::move(options)),
      monitor_(plateau_.monitor(), plateau_.mode(), plateau_.min_delta(),
               plateau_.threshold_mode()) {
  set_role(Role::Scheduler).after(Role::Metrics);
  validate(plateau_);
}

LearningRateScheduler::LearningRateScheduler(std::shared_ptr<torch::optim::LRScheduler> scheduler,
                                             LearningRateSchedulerOptions options)
    : Callback(options.name()),
      kind_(Kind::LibTorch),
      libtorch_(std::move(scheduler)),
      options_(std::move(options)),
      monitor_(plateau_.monitor(), plateau_.mode(), plateau_.min_delta(),
               plateau_.threshold_mode()) {
  set_role(Role::Scheduler).after(Role::Metrics);
  TORCHBUS_CHECK(libtorch_ != nullptr, ConfigError,
                 "LearningRateScheduler needs a LibTorch scheduler (e.g. torch::optim::StepLR), "
                 "got a null pointer");
}

void LearningRateScheduler::capture(torch::optim::Optimizer& optimizer) {
  const auto& groups = optimizer.param_groups();
  if (base_lrs_.empty()) {
    for (const auto& group : groups) base_lrs_.push_back(group.options().get_lr());
  }
  TORCHBUS_CHECK(base_lrs_.size() == groups.size(), ConfigError, "LearningRateScheduler '", name(),
                 "' has learning rates for ", base_lrs_.size(),
                 " parameter groups (from its first run or a checkpoint); the optimizer has ",
                 groups.size());
  if (kind_ == Kind::Plateau && lrs_.empty()) lrs_ = base_lrs_;
  if (metric_names_.size() != groups.size() && !options_.metric().empty()) {
    metric_names_.clear();
    for (std::size_t i = 0; i < groups.size(); ++i) {
      metric_names_.push_back(i == 0 ? options_.metric()
                                     : options_.metric() + "_group_" + std::to_string(i));
    }
  }
}

void LearningRateScheduler::apply(torch::optim::Optimizer& optimizer) {
  auto& groups = optimizer.param_groups();
  if (kind_ == Kind::Lambda) {
    for (std::size_t i = 0; i < groups.size(); ++i) {
      groups[i].options().set_lr(schedule_->lr(t_, base_lrs_[i]));
      if (const auto momentum = schedule_->momentum(t_)) set_momentum(groups[i], *momentum);
    }
  } else if (kind_ == Kind::Plateau) {
    for (std::size_t i = 0; i < groups.size(); ++i) groups[i].options().set_lr(lrs_[i]);
  }
}

void LearningRateScheduler::advance(torch::optim::Optimizer& optimizer) {
  if (kind_ == Kind::Plateau) return;
  ++t_;
  if (kind_ == Kind::LibTorch) {
    libtorch_->step();
  } else {
    apply(optimizer);
  }
}

torch::optim::Optimizer* LearningRateScheduler::scheduled_optimizer(const State& state) const {
  if (options_.phase().empty() || state.optimizer == nullptr) return state.optimizer;
  return detail::named_optimizer_phase(state, options_.phase(),
                                       detail::concat("LearningRateScheduler '", name(), "'"))
      .optimizer();
}

void LearningRateScheduler::on_action_start(State& state) {
  auto* optimizer = scheduled_optimizer(state);
  if (optimizer == nullptr) return;
  capture(*optimizer);
  apply(*optimizer);
  pending_apply_ = false;
}

void LearningRateScheduler::on_step_start(State& state) {
  auto* optimizer = pending_apply_ ? scheduled_optimizer(state) : nullptr;
  if (optimizer == nullptr) return;
  capture(*optimizer);
  apply(*optimizer);
  pending_apply_ = false;
}

void LearningRateScheduler::on_after_optimizer_step(State& state) {
  if (state.optimizer == nullptr || !names_optimizer_phase(state, options_.phase())) return;
  const auto& groups = state.optimizer->param_groups();
  for (std::size_t i = 0; i < metric_names_.size() && i < groups.size(); ++i) {
    // Numbered like metric_names::kTrainLoss: the step count including this step.
    state.metrics.record(metric_names_[i], state.step + 1, state.epoch,
                         groups[i].options().get_lr());
  }
  if (options_.interval() == ScheduleInterval::Step) advance(*state.optimizer);
}

// The end of an epoch cut short (state.epoch_cut_short) runs again when a resume continues the
// epoch: a schedule per epoch, and a plateau's count, move at the end that completes it.
void LearningRateScheduler::on_eval_end(State& state) {
  if (kind_ == Kind::Plateau && plateau_.check_on() == Event::EvalEnd && !state.epoch_cut_short) {
    check_plateau(state);
  }
}

void LearningRateScheduler::on_epoch_end(State& state) {
  if (state.epoch_cut_short) return;
  if (kind_ == Kind::Plateau && plateau_.check_on() == Event::EpochEnd) check_plateau(state);
  auto* optimizer =
      options_.interval() == ScheduleInterval::Epoch ? scheduled_optimizer(state) : nullptr;
  if (optimizer != nullptr) advance(*optimizer);
}

void LearningRateScheduler::check_plateau(State& state) {
  auto* optimizer = scheduled_optimizer(state);
  if (optimizer == nullptr) return;
  const auto& monitor = plateau_.monitor();
  const MetricPoint* point = monitor_.poll(
      state, plateau_.check_on(),
      detail::concat("LearningRateScheduler '", name(), "': reduce-on-plateau metric"), name());
  if (point == nullptr) return;

  capture(*optimizer);
  monitor_.update(point->value);
  if (cooldown_left_ > 0) {
    --cooldown_left_;
    monitor_.reset_wait();
  }
  if (monitor_.wait() > plateau_.patience()) {
    bool changed = false;
    for (auto& lr : lrs_) {
      const double reduced = std::max(lr * plateau_.factor(), plateau_.min_lr());
      if (lr - reduced > plateau_.eps()) {
        lr = reduced;
        changed = true;
      }
    }
    if (changed) {
      ++reductions_;
      apply(*optimizer);
      logger()->info(
          "LearningRateScheduler: {} did not improve for {} checks; learning rate of "
          "group 0 reduced to {}",
          monitor, monitor_.wait(), lrs_.front());
    }
    cooldown_left_ = plateau_.cooldown();
    monitor_.reset_wait();
  }
}

void LearningRateScheduler::save_state(torch::serialize::OutputArchive& archive) const {
  archive.write("t", c10::IValue(t_));
  archive.write("base_lrs", c10::IValue(base_lrs_));
  archive.write("lrs", c10::IValue(lrs_));
  monitor_.save_state(archive);
  archive.write("cooldown_left", c10::IValue(cooldown_left_));
  archive.write("reductions", c10::IValue(reductions_));
  if (kind_ == Kind::LibTorch) {
    archive.write("libtorch_step_count",
                  c10::IValue(static_cast<std::int64_t>(step_count(*libtorch_))));
  }
}

void LearningRateScheduler::load_state(torch::serialize::InputArchive& archive) {
  const auto t = read_integer(archive, "t", 0);
  auto base_lrs = read_value(archive, "base_lrs").toDoubleVector();
  auto lrs = read_value(archive, "lrs").toDoubleVector();
  // One per parameter group (checked against the optimizer when the run starts), or none yet.
  TORCHBUS_CHECK(lrs.empty() || lrs.size() == base_lrs.size(), CheckpointError,
                 "LearningRateScheduler '", name(), "': the checkpoint holds ",
                 detail::count_of(static_cast<long long>(base_lrs.size()), "base learning rate"),
                 " but ", lrs.size(), " current ones (damaged or forged)");
  for (const auto* rates : {&base_lrs, &lrs}) {
    for (const double lr : *rates) {
      TORCHBUS_CHECK(std::isfinite(lr) && lr >= 0.0, CheckpointError, "LearningRateScheduler '",
                     name(), "': the checkpoint holds the learning rate ", lr,
                     " (expected finite and >= 0)");
    }
  }
  monitor_.load_state(archive);
  t_ = t;
  base_lrs_ = std::move(base_lrs);
  lrs_ = std::move(lrs);
  cooldown_left_ = read_integer(archive, "cooldown_left", 0);
  reductions_ = read_integer(archive, "reductions", 0);
  if (kind_ == Kind::LibTorch) {
    step_count(*libtorch_) = static_cast<unsigned>(
        read_integer(archive, "libtorch_step_count", 0, std::numeric_limits<unsigned>::max()));
  }
  pending_apply_ = true;
}

}  // namespace torchbus
