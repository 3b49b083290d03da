#include <spdlog/spdlog.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/schedulers/lr_scheduler.h>
#include <torch/serialize/archive.h>
#include <torchbus/callbacks/archive_value.hpp>
#include <torchbus/callbacks/learning_rate_scheduler.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/state.hpp>

#include <algorithm>
#include <cmath>

namespace torchbus {
namespace {

constexpr double kPi = 3.14159265358979323846;

/// LibTorch's LRScheduler keeps its step count protected and has no state_dict; a member pointer
/// taken through a derived class reads and restores it (a scheduler's only state besides the
/// optimizer's learning rates, which the optimizer's own state holds).
struct StepCountAccess : torch::optim::LRScheduler {
  static unsigned torch::optim::LRScheduler::*member() { return &StepCountAccess::step_count_; }
};

unsigned& step_count(torch::optim::LRScheduler& scheduler) {
  return scheduler.*StepCountAccess::member();
}

/// Cosine annealing from `start` (pct 0) to `end` (pct 1), as PyTorch's OneCycleLR.
double cosine_anneal(double start, double end, double pct) {
  return end + (start - end) / 2.0 * (std::cos(kPi * pct) + 1.0);
}

/// start_factor + (1 - start_factor) * t / warmup, capped at 1.
double warmup_factor(std::int64_t t, std::int64_t warmup, double start_factor) {
  if (t >= warmup) return 1.0;
  return start_factor + (1.0 - start_factor) * static_cast<double>(t) / static_cast<double>(warmup);
}

void check_factor(double factor, const char* what) {
  TORCHBUS_CHECK(factor >= 0.0 && factor <= 1.0, ConfigError, "LearningRateScheduler: ", what,
                 " must be in [0, 1], got ", factor);
}

LrLambda make_warmup(const LinearWarmupOptions& o) {
  TORCHBUS_CHECK(o.warmup_steps() >= 1, ConfigError,
                 "LearningRateScheduler: linear warmup needs warmup_steps >= 1, got ",
                 o.warmup_steps());
  check_factor(o.start_factor(), "start_factor");
  return [o](std::int64_t t, double base) {
    return base * warmup_factor(t, o.warmup_steps(), o.start_factor());
  };
}

LrLambda make_cosine(const CosineDecayOptions& o) {
  TORCHBUS_CHECK(o.total_steps() >= 1, ConfigError,
                 "LearningRateScheduler: cosine decay needs total_steps >= 1, got ",
                 o.total_steps());
  TORCHBUS_CHECK(o.warmup_steps() >= 0 && o.warmup_steps() < o.total_steps(), ConfigError,
                 "LearningRateScheduler: cosine decay needs warmup_steps in [0, total_steps = ",
                 o.total_steps(), "), got ", o.warmup_steps());
  check_factor(o.warmup_start_factor(), "warmup_start_factor");
  TORCHBUS_CHECK(o.min_lr() >= 0.0, ConfigError, "LearningRateScheduler: min_lr must be >= 0, got ",
                 o.min_lr());
  return [o](std::int64_t t, double base) {
    if (t < o.warmup_steps())
      return base * warmup_factor(t, o.warmup_steps(), o.warmup_start_factor());
    const double progress =
        std::min(1.0, static_cast<double>(t - o.warmup_steps()) /
                          static_cast<double>(o.total_steps() - o.warmup_steps()));
    return o.min_lr() + (base - o.min_lr()) * 0.5 * (1.0 + std::cos(kPi * progress));
  };
}

LrLambda make_one_cycle(const OneCycleOptions& o) {
  TORCHBUS_CHECK(o.total_steps() >= 2, ConfigError,
                 "LearningRateScheduler: one-cycle needs total_steps >= 2, got ", o.total_steps());
  TORCHBUS_CHECK(o.pct_start() > 0.0 && o.pct_start() < 1.0, ConfigError,
                 "LearningRateScheduler: one-cycle needs pct_start in (0, 1), got ", o.pct_start());
  TORCHBUS_CHECK(o.pct_start() * static_cast<double>(o.total_steps()) > 1.0, ConfigError,
                 "LearningRateScheduler: one-cycle needs pct_start * total_steps > 1 (a rising "
                 "phase of at least one step), got ",
                 o.pct_start(), " * ", o.total_steps());
  TORCHBUS_CHECK(o.div_factor() > 0.0 && o.final_div_factor() > 0.0, ConfigError,
                 "LearningRateScheduler: one-cycle needs div_factor > 0 and final_div_factor > 0, "
                 "got ",
                 o.div_factor(), " and ", o.final_div_factor());
  return [o](std::int64_t t, double max_lr) {
    const double initial = max_lr / o.div_factor();
    const double final_lr = initial / o.final_div_factor();
    const double rise_end = o.pct_start() * static_cast<double>(o.total_steps()) - 1.0;
    const double end = static_cast<double>(o.total_steps() - 1);
    const double step = std::min(static_cast<double>(t), end);
    if (step <= rise_end) return cosine_anneal(initial, max_lr, step / rise_end);
    return cosine_anneal(max_lr, final_lr, (step - rise_end) / (end - rise_end));
  };
}

LrLambda make_step_decay(const StepDecayOptions& o) {
  TORCHBUS_CHECK(o.step_size() >= 1, ConfigError,
                 "LearningRateScheduler: step decay needs step_size >= 1, got ", o.step_size());
  TORCHBUS_CHECK(o.gamma() > 0.0, ConfigError,
                 "LearningRateScheduler: step decay needs gamma > 0, got ", o.gamma());
  return [o](std::int64_t t, double base) {
    const std::int64_t decays = t / o.step_size();  // floor: t >= 0
    return base * std::pow(o.gamma(), static_cast<double>(decays));
  };
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
  TORCHBUS_CHECK(o.min_delta() >= 0.0, ConfigError,
                 "LearningRateScheduler: reduce-on-plateau min_delta must be >= 0, got ",
                 o.min_delta());
  TORCHBUS_CHECK(o.check_on() == Event::EvalEnd || o.check_on() == Event::EpochEnd, ConfigError,
                 "LearningRateScheduler: reduce-on-plateau check_on must be EvalEnd or EpochEnd, "
                 "got ",
                 to_string(o.check_on()));
}

}  // namespace

LearningRateScheduler::LearningRateScheduler(LrLambda schedule,
                                             LearningRateSchedulerOptions options)
    : Callback(options.name()),
      kind_(Kind::Lambda),
      schedule_(std::move(schedule)),
      options_(std::move(options)),
      monitor_(plateau_.monitor(), plateau_.mode(), plateau_.min_delta()) {
  set_role(Role::Scheduler).after(Role::Metrics);
  TORCHBUS_CHECK(static_cast<bool>(schedule_), ConfigError,
                 "LearningRateScheduler needs a schedule (t, base_lr) -> lr, got an empty "
                 "function");
}

LearningRateScheduler::LearningRateScheduler(const LinearWarmupOptions& warmup,
                                             LearningRateSchedulerOptions options)
    : LearningRateScheduler(make_warmup(warmup), std::move(options)) {}

LearningRateScheduler::LearningRateScheduler(const CosineDecayOptions& cosine,
                                             LearningRateSchedulerOptions options)
    : LearningRateScheduler(make_cosine(cosine), std::move(options)) {}

LearningRateScheduler::LearningRateScheduler(const OneCycleOptions& one_cycle,
                                             LearningRateSchedulerOptions options)
    : LearningRateScheduler(make_one_cycle(one_cycle), std::move(options)) {}

LearningRateScheduler::LearningRateScheduler(const StepDecayOptions& step_decay,
                                             LearningRateSchedulerOptions options)
    : LearningRateScheduler(make_step_decay(step_decay), std::move(options)) {}

LearningRateScheduler::LearningRateScheduler(ReduceOnPlateauOptions plateau,
                                             LearningRateSchedulerOptions options)
    : Callback(options.name()),
      kind_(Kind::Plateau),
      plateau_(std::move(plateau)),
      options_(std::move(options)),
      monitor_(plateau_.monitor(), plateau_.mode(), plateau_.min_delta()) {
  set_role(Role::Scheduler).after(Role::Metrics);
  validate(plateau_);
}

LearningRateScheduler::LearningRateScheduler(std::shared_ptr<torch::optim::LRScheduler> scheduler,
                                             LearningRateSchedulerOptions options)
    : Callback(options.name()),
      kind_(Kind::LibTorch),
      libtorch_(std::move(scheduler)),
      options_(std::move(options)),
      monitor_(plateau_.monitor(), plateau_.mode(), plateau_.min_delta()) {
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
      groups[i].options().set_lr(schedule_(t_, base_lrs_[i]));
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

void LearningRateScheduler::on_action_start(State& state) {
  if (state.optimizer == nullptr) return;
  capture(*state.optimizer);
  apply(*state.optimizer);
  pending_apply_ = false;
}

void LearningRateScheduler::on_step_start(State& state) {
  if (!pending_apply_ || state.optimizer == nullptr) return;
  capture(*state.optimizer);
  apply(*state.optimizer);
  pending_apply_ = false;
}

void LearningRateScheduler::on_after_optimizer_step(State& state) {
  if (state.optimizer == nullptr) return;
  const auto& groups = state.optimizer->param_groups();
  for (std::size_t i = 0; i < metric_names_.size() && i < groups.size(); ++i) {
    // Numbered like metric_names::kTrainLoss: the step count including this step.
    state.metrics.record(metric_names_[i], state.step + 1, state.epoch,
                         groups[i].options().get_lr());
  }
  if (options_.interval() == ScheduleInterval::Step) advance(*state.optimizer);
}

void LearningRateScheduler::on_eval_end(State& state) {
  if (kind_ == Kind::Plateau && plateau_.check_on() == Event::EvalEnd) check_plateau(state);
}

void LearningRateScheduler::on_epoch_end(State& state) {
  if (kind_ == Kind::Plateau && plateau_.check_on() == Event::EpochEnd) check_plateau(state);
  if (options_.interval() == ScheduleInterval::Epoch && state.optimizer != nullptr) {
    advance(*state.optimizer);
  }
}

void LearningRateScheduler::check_plateau(State& state) {
  if (state.optimizer == nullptr) return;
  const auto& monitor = plateau_.monitor();
  const MetricPoint* point = monitor_.poll(
      state, plateau_.check_on(),
      detail::concat("LearningRateScheduler '", name(), "': reduce-on-plateau metric"), name());
  if (point == nullptr) return;

  capture(*state.optimizer);
  monitor_.update(point->value);
  if (cooldown_left_ > 0) {
    --cooldown_left_;
    monitor_.reset_wait();
  }
  if (monitor_.wait() > plateau_.patience()) {
    bool changed = false;
    for (auto& lr : lrs_) {
      const double reduced = std::max(lr * plateau_.factor(), plateau_.min_lr());
      if (reduced < lr) {
        lr = reduced;
        changed = true;
      }
    }
    if (changed) {
      ++reductions_;
      apply(*state.optimizer);
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
  t_ = read_value(archive, "t").toInt();
  base_lrs_ = read_value(archive, "base_lrs").toDoubleVector();
  lrs_ = read_value(archive, "lrs").toDoubleVector();
  monitor_.load_state(archive);
  cooldown_left_ = read_value(archive, "cooldown_left").toInt();
  reductions_ = read_value(archive, "reductions").toInt();
  if (kind_ == Kind::LibTorch) {
    step_count(*libtorch_) =
        static_cast<unsigned>(read_value(archive, "libtorch_step_count").toInt());
  }
  pending_apply_ = true;
}

}  // namespace torchbus
