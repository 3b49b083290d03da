// LearningRateScheduler: every schedule's learning rates step by step against the closed-form
// formula, per-step and per-epoch intervals, LibTorch's StepLR, save/load, bad input.

#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <torchbus/callbacks/learning_rate_scheduler.hpp>

#include <cmath>
#include <sstream>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

const double kPi = std::acos(-1.0);

void check_close(const std::vector<double>& actual, const std::vector<double>& expected) {
  BOOST_REQUIRE_EQUAL(actual.size(), expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    BOOST_TEST_CONTEXT("step " << i) {
      BOOST_TEST(std::abs(actual[i] - expected[i]) <= 1e-12 * std::max(1.0, std::abs(expected[i])),
                 "lr " << actual[i] << " != expected " << expected[i]);
    }
  }
}

/// A trainer on SGD(lr = 0.1) that records the learning rate of every optimizer step (read at
/// BeforeOptimizerStep, before the scheduler moves it).
struct LrRun {
  torch::nn::Sequential model = make_model();
  torch::optim::SGD sgd{model->parameters(), torch::optim::SGDOptions(0.1)};
  Trainer trainer;
  std::vector<double> used;

  explicit LrRun(TrainerOptions options)
      : trainer(model, sgd, cross_entropy, options.use_registered_subscriptions(false)) {
    trainer.on(Event::BeforeOptimizerStep, [this](State& state) {
      used.push_back(state.optimizer->param_groups()[0].options().get_lr());
    });
  }
  void fit(int batches) {
    auto data = make_batches(batches, 4);
    trainer.fit(data);
  }
  double lr() const { return sgd.param_groups()[0].options().get_lr(); }
};

std::vector<double> series_values(const State& state, const std::string& name) {
  std::vector<double> values;
  for (const auto& point : state.metrics.series(name)) values.push_back(point.value);
  return values;
}

double cosine_expected(std::int64_t t, double base, std::int64_t total, std::int64_t warmup,
                       double min_lr) {
  if (t < warmup) return base * static_cast<double>(t) / static_cast<double>(warmup);
  const double p =
      std::min(1.0, static_cast<double>(t - warmup) / static_cast<double>(total - warmup));
  return min_lr + (base - min_lr) * 0.5 * (1.0 + std::cos(kPi * p));
}

/// PyTorch's OneCycleLR (cos annealing, two phases).
double one_cycle_expected(std::int64_t t, double max_lr, std::int64_t total, double pct, double div,
                          double final_div) {
  const double initial = max_lr / div;
  const double min_lr = initial / final_div;
  const double end1 = pct * static_cast<double>(total) - 1.0;
  const double end2 = static_cast<double>(total) - 1.0;
  const auto anneal = [](double start, double end, double p) {
    return end + (start - end) / 2.0 * (std::cos(kPi * p) + 1.0);
  };
  const auto step = static_cast<double>(t);
  if (step <= end1) return anneal(initial, max_lr, step / end1);
  return anneal(max_lr, min_lr, (step - end1) / (end2 - end1));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(learning_rate_scheduler)

BOOST_AUTO_TEST_CASE(linear_warmup_per_step) {
  LrRun run(TrainerOptions().max_epochs(1));
  run.trainer.add(
      std::make_shared<LearningRateScheduler>(LinearWarmupOptions(4).start_factor(0.1)));
  run.fit(8);
  std::vector<double> expected;
  for (int t = 0; t < 8; ++t) expected.push_back(0.1 * (0.1 + 0.9 * std::min(t, 4) / 4.0));
  check_close(run.used, expected);
  // Recorded as "lr", numbered like "train_loss".
  const auto& state = run.trainer.state();
  check_close(series_values(state, "lr"), expected);
  BOOST_TEST(state.metrics.series("lr").front().step == 1);
  BOOST_TEST(state.metrics.series("lr").back().step == 8);
}

BOOST_AUTO_TEST_CASE(cosine_decay_with_warmup_and_min_lr) {
  LrRun run(TrainerOptions().max_epochs(2));
  auto scheduler =
      std::make_shared<LearningRateScheduler>(CosineDecayOptions(10).warmup_steps(3).min_lr(0.01));
  run.trainer.add(scheduler);
  run.fit(7);  // 14 steps: the last 4 stay at min_lr
  std::vector<double> expected;
  for (int t = 0; t < 14; ++t) expected.push_back(cosine_expected(t, 0.1, 10, 3, 0.01));
  check_close(run.used, expected);
  BOOST_TEST(std::abs(run.used.back() - 0.01) < 1e-15);
  BOOST_TEST(scheduler->schedule_steps() == 14);
  BOOST_TEST(scheduler->base_lrs() == std::vector<double>{0.1});
}

BOOST_AUTO_TEST_CASE(cosine_decay_without_warmup) {
  LrRun run(TrainerOptions().max_epochs(1));
  run.trainer.add(std::make_shared<LearningRateScheduler>(CosineDecayOptions(6)));
  run.fit(6);
  std::vector<double> expected;
  for (int t = 0; t < 6; ++t) expected.push_back(0.05 * (1.0 + std::cos(kPi * t / 6.0)));
  check_close(run.used, expected);
  BOOST_TEST(run.used.front() == 0.1);
}

BOOST_AUTO_TEST_CASE(one_cycle_as_pytorch) {
  LrRun run(TrainerOptions().max_epochs(1));
  run.trainer.add(std::make_shared<LearningRateScheduler>(OneCycleOptions(10)));
  run.fit(10);
  std::vector<double> expected;
  for (int t = 0; t < 10; ++t) expected.push_back(one_cycle_expected(t, 0.1, 10, 0.3, 25.0, 1e4));
  check_close(run.used, expected);
  // Known points: lr / 25 at the start, the peak at pct_start * total - 1, the floor at the end.
  BOOST_TEST(std::abs(run.used[0] - 0.004) < 1e-15);
  BOOST_TEST(std::abs(run.used[2] - 0.1) < 1e-15);
  BOOST_TEST(std::abs(run.used[9] - 4e-7) < 1e-18);
}

BOOST_AUTO_TEST_CASE(step_decay_per_epoch) {
  LrRun run(TrainerOptions().max_epochs(5));
  run.trainer.add(std::make_shared<LearningRateScheduler>(
      StepDecayOptions(2).gamma(0.5),
      LearningRateSchedulerOptions().interval(ScheduleInterval::Epoch)));
  run.fit(3);
  std::vector<double> expected;
  for (int step = 0; step < 15; ++step) {
    const int epoch = step / 3;
    expected.push_back(0.1 * std::pow(0.5, epoch / 2));
  }
  check_close(run.used, expected);
}

BOOST_AUTO_TEST_CASE(custom_lambda_and_every_parameter_group) {
  auto model = make_model();
  auto parameters = model->parameters();
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<at::Tensor>{parameters[0], parameters[1]},
                      std::make_unique<torch::optim::SGDOptions>(0.1));
  groups.emplace_back(std::vector<at::Tensor>{parameters[2], parameters[3]},
                      std::make_unique<torch::optim::SGDOptions>(0.01));
  torch::optim::SGD sgd(std::move(groups), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, sgd, cross_entropy, TrainerOptions().use_registered_subscriptions(false));
  std::vector<double> first, second;
  trainer.on(Event::BeforeOptimizerStep, [&](State& state) {
    first.push_back(state.optimizer->param_groups()[0].options().get_lr());
    second.push_back(state.optimizer->param_groups()[1].options().get_lr());
  });
  trainer.add(std::make_shared<LearningRateScheduler>(
      [](std::int64_t t, double base) { return base / static_cast<double>(t + 1); }));
  auto data = make_batches(4, 4);
  trainer.fit(data);
  check_close(first, {0.1, 0.05, 0.1 / 3, 0.025});
  check_close(second, {0.01, 0.005, 0.01 / 3, 0.0025});
  check_close(series_values(trainer.state(), "lr_group_1"), second);
}

BOOST_AUTO_TEST_CASE(one_cycle_cycles_momentum_and_beta1_as_pytorch) {
  // PyTorch's OneCycleLR (cycle_momentum=True): momentum 0.95 at the start, 0.85 at the rate's peak
  // (t = pct_start * total - 1 = 2), back to 0.95 at the end; beta1 for Adam. Per-step values are
  // compared with PyTorch in scheduler_reference (tests/reference).
  LrRun run(TrainerOptions().max_epochs(1));
  std::vector<double> momentum;
  run.trainer.on(Event::BeforeOptimizerStep, [&](State& state) {
    momentum.push_back(
        static_cast<torch::optim::SGDOptions&>(state.optimizer->param_groups()[0].options())
            .momentum());
  });
  run.trainer.add(std::make_shared<LearningRateScheduler>(OneCycleOptions(10)));
  run.fit(10);
  BOOST_TEST_REQUIRE(momentum.size() == 10u);
  BOOST_TEST(std::abs(momentum[0] - 0.95) < 1e-15);
  BOOST_TEST(std::abs(momentum[2] - 0.85) < 1e-15);
  BOOST_TEST(std::abs(momentum[9] - 0.95) < 1e-15);

  auto model = make_model();
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.01));
  Trainer trainer(model, adam, cross_entropy,
                  TrainerOptions().max_epochs(1).use_registered_subscriptions(false));
  trainer.add(std::make_shared<LearningRateScheduler>(OneCycleOptions(4).pct_start(0.5)));
  auto data = make_batches(1, 4);
  trainer.fit(data);
  const auto& options = static_cast<torch::optim::AdamOptions&>(adam.param_groups()[0].options());
  // After one step t = 1 = the peak: beta1 = base_momentum, beta2 untouched.
  BOOST_TEST(std::abs(std::get<0>(options.betas()) - 0.85) < 1e-15);
  BOOST_TEST(std::get<1>(options.betas()) == 0.999);

  // cycle_momentum(false) leaves the momentum alone; an optimizer without one is a ConfigError.
  LrRun fixed(TrainerOptions().max_epochs(1));
  fixed.trainer.add(
      std::make_shared<LearningRateScheduler>(OneCycleOptions(10).cycle_momentum(false)));
  fixed.fit(3);
  BOOST_TEST(
      static_cast<torch::optim::SGDOptions&>(fixed.sgd.param_groups()[0].options()).momentum() ==
      0.0);
  torch::optim::Adagrad adagrad(model->parameters(), torch::optim::AdagradOptions(0.01));
  Trainer plain(model, adagrad, cross_entropy,
                TrainerOptions().max_epochs(1).use_registered_subscriptions(false));
  plain.add(std::make_shared<LearningRateScheduler>(OneCycleOptions(4)));
  BOOST_TEST(message_of<ConfigError>([&] {
               plain.fit(data);
             }).find("needs an optimizer with a momentum (SGD, RMSprop) or beta1") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(reduce_on_plateau) {
  LrRun run(TrainerOptions().max_epochs(12));
  // The scripted metric is recorded at EvalEnd before the scheduler (priority 0) runs.
  const std::vector<double> script{1.0, 0.9, 0.95, 0.96, 0.97, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1};
  std::size_t next = 0;
  run.trainer.on(
      Event::EvalEnd, [&](State& state) { state.record_metric("val_score", script[next++]); }, -10);
  auto scheduler = std::make_shared<LearningRateScheduler>(ReduceOnPlateauOptions()
                                                               .monitor("val_score")
                                                               .patience(1)
                                                               .factor(0.5)
                                                               .cooldown(1)
                                                               .min_lr(0.02));
  run.trainer.add(scheduler);
  auto data = make_batches(1, 4);
  auto validation = make_batches(1, 4);
  run.trainer.fit(data, validation);
  // By hand (PyTorch's rules): checks 0-1 improve; 2 and 3 do not -> 3 > patience: 0.05, cooldown;
  // 4 is in cooldown; 5 improves; 6 and 7 do not -> 0.025; 8 in cooldown; 9 and 10 do not ->
  // max(0.0125, min_lr) = 0.02.
  std::vector<double> expected{0.1,  0.1,  0.1,   0.1,   0.05,  0.05,
                               0.05, 0.05, 0.025, 0.025, 0.025, 0.02};
  check_close(run.used, expected);
  BOOST_TEST(scheduler->reductions() == 3);
}

BOOST_AUTO_TEST_CASE(reduce_on_plateau_skips_reductions_of_eps_or_less) {
  // PyTorch's ReduceLROnPlateau._reduce_lr: a group's rate changes only if old - new > eps (1e-8),
  // so from 1e-6 with factor 0.1 the rate stops at 1e-8 (1e-8 - 1e-9 <= eps).
  LrRun run(TrainerOptions().max_epochs(6));
  run.sgd.param_groups()[0].options().set_lr(1e-6);
  run.trainer.on(
      Event::EvalEnd, [](State& state) { state.record_metric("val_score", 1.0); }, -10);
  auto scheduler = std::make_shared<LearningRateScheduler>(
      ReduceOnPlateauOptions().monitor("val_score").patience(0).factor(0.1));
  run.trainer.add(scheduler);
  auto data = make_batches(1, 4);
  auto validation = make_batches(1, 4);
  run.trainer.fit(data, validation);
  check_close(run.used, {1e-6, 1e-6, 1e-7, 1e-8, 1e-8, 1e-8});
  BOOST_TEST(scheduler->reductions() == 2);
}

BOOST_AUTO_TEST_CASE(wraps_a_libtorch_scheduler) {
  LrRun run(TrainerOptions().max_epochs(1));
  run.trainer.add(std::make_shared<LearningRateScheduler>(
      std::make_shared<torch::optim::StepLR>(run.sgd, 2, 0.5)));
  run.fit(9);

  // The same StepLR driven by hand on an optimizer of its own.
  auto weight = torch::zeros({1}, torch::requires_grad());
  torch::optim::SGD reference(std::vector<at::Tensor>{weight}, torch::optim::SGDOptions(0.1));
  torch::optim::StepLR reference_scheduler(reference, 2, 0.5);
  std::vector<double> expected;
  for (int step = 0; step < 9; ++step) {
    expected.push_back(reference.param_groups()[0].options().get_lr());
    reference_scheduler.step();
  }
  check_close(run.used, expected);
  BOOST_TEST(run.used.back() < 0.1);
}

BOOST_AUTO_TEST_CASE(closed_form_schedule_continues_after_save_and_load) {
  LrRun first(TrainerOptions().max_steps(4));
  auto before = std::make_shared<LearningRateScheduler>(CosineDecayOptions(10).warmup_steps(2));
  first.trainer.add(before);
  first.fit(4);

  // A fresh optimizer (lr 0.1 again) and scheduler restored from the saved state.
  LrRun second(TrainerOptions().max_steps(6));
  auto after = std::make_shared<LearningRateScheduler>(CosineDecayOptions(10).warmup_steps(2));
  round_trip(*before, *after);
  BOOST_TEST(after->schedule_steps() == 4);
  second.trainer.add(after);
  second.fit(6);

  std::vector<double> expected_first, expected_second;
  for (int t = 0; t < 4; ++t) expected_first.push_back(cosine_expected(t, 0.1, 10, 2, 0.0));
  for (int t = 4; t < 10; ++t) expected_second.push_back(cosine_expected(t, 0.1, 10, 2, 0.0));
  check_close(first.used, expected_first);
  check_close(second.used, expected_second);
}

BOOST_AUTO_TEST_CASE(a_chained_schedule_and_its_momentum_continue_after_save_and_load) {
  // Warmup, then one-cycle (which sets the momentum): 4 + 6 steps resumed equal 10 in one run.
  const auto make = [] {
    return std::make_shared<LearningRateScheduler>(
        SequentialOptions({LinearFactorOptions(3).start_factor(0.2), OneCycleOptions(8)}, {3}));
  };
  const auto momentum_of = [](LrRun& run, std::vector<double>& out) {
    run.trainer.on(Event::BeforeOptimizerStep, [&out](State& state) {
      out.push_back(
          static_cast<torch::optim::SGDOptions&>(state.optimizer->param_groups()[0].options())
              .momentum());
    });
  };
  std::vector<double> whole_momentum, split_momentum;
  LrRun whole(TrainerOptions().max_steps(10));
  momentum_of(whole, whole_momentum);
  whole.trainer.add(make());
  whole.fit(10);

  LrRun first(TrainerOptions().max_steps(4));
  momentum_of(first, split_momentum);
  auto before = make();
  first.trainer.add(before);
  first.fit(4);
  LrRun second(TrainerOptions().max_steps(6));  // a fresh optimizer: lr 0.1, momentum 0
  momentum_of(second, split_momentum);
  auto after = make();
  round_trip(*before, *after);
  second.trainer.add(after);
  second.fit(6);

  auto split = first.used;
  split.insert(split.end(), second.used.begin(), second.used.end());
  BOOST_TEST(split == whole.used, boost::test_tools::per_element());
  BOOST_TEST(split_momentum == whole_momentum, boost::test_tools::per_element());
  BOOST_TEST(whole.used[0] == 0.1 * 0.2);
  BOOST_TEST(std::abs(whole.used[3] - 0.1 / 25.0) < 1e-15);  // one-cycle's first step
  BOOST_TEST(whole_momentum[2] == 0.0);                      // the warmup leaves the momentum alone
  BOOST_TEST(std::abs(whole_momentum[3] - 0.95) < 1e-15);
}

BOOST_AUTO_TEST_CASE(base_lrs_come_from_the_saved_state) {
  // The restored base learning rate wins over the new optimizer's (as after a resume, where the
  // optimizer holds a decayed learning rate).
  LrRun first(TrainerOptions().max_steps(2));
  auto before = std::make_shared<LearningRateScheduler>(StepDecayOptions(1).gamma(0.5));
  first.trainer.add(before);
  first.fit(2);
  LrRun second(TrainerOptions().max_steps(2));
  second.sgd.param_groups()[0].options().set_lr(0.7);  // ignored: the schedule sets lr(t)
  auto after = std::make_shared<LearningRateScheduler>(StepDecayOptions(1).gamma(0.5));
  round_trip(*before, *after);
  second.trainer.add(after);
  second.fit(2);
  check_close(second.used, {0.025, 0.0125});
  BOOST_TEST(after->base_lrs() == std::vector<double>{0.1});
}

BOOST_AUTO_TEST_CASE(plateau_state_round_trips) {
  LearningRateScheduler first(
      ReduceOnPlateauOptions().monitor("m").patience(0).factor(0.5).cooldown(2));
  auto weight = torch::zeros({1}, torch::requires_grad());
  torch::optim::SGD sgd(std::vector<at::Tensor>{weight}, torch::optim::SGDOptions(0.1));
  State state;
  state.optimizer = &sgd;
  first.on_action_start(state);
  const auto check = [&state](LearningRateScheduler& scheduler, double value) {
    ++state.step;
    state.record_metric("m", value);
    scheduler.on_eval_end(state);
  };
  check(first, 1.0);
  check(first, 2.0);  // patience 0: reduce to 0.05, cooldown 2
  BOOST_TEST(sgd.param_groups()[0].options().get_lr() == 0.05);

  LearningRateScheduler second(
      ReduceOnPlateauOptions().monitor("m").patience(0).factor(0.5).cooldown(2));
  round_trip(first, second);
  BOOST_TEST(second.reductions() == 1);
  sgd.param_groups()[0].options().set_lr(0.1);
  second.on_step_start(state);  // restored learning rates go back on the optimizer
  BOOST_TEST(sgd.param_groups()[0].options().get_lr() == 0.05);
  check(second, 3.0);  // cooldown 2 -> 1
  check(second, 3.0);  // cooldown 1 -> 0
  BOOST_TEST(sgd.param_groups()[0].options().get_lr() == 0.05);
  check(second, 3.0);  // no improvement over 1.0, patience 0: reduce
  BOOST_TEST(sgd.param_groups()[0].options().get_lr() == 0.025);
  BOOST_TEST(second.reductions() == 2);
}

BOOST_AUTO_TEST_CASE(libtorch_scheduler_state_round_trips) {
  LrRun first(TrainerOptions().max_steps(3));
  auto before = std::make_shared<LearningRateScheduler>(
      std::make_shared<torch::optim::StepLR>(first.sgd, 2, 0.5));
  first.trainer.add(before);
  first.fit(3);

  LrRun second(TrainerOptions().max_steps(5));
  second.sgd.param_groups()[0].options().set_lr(first.lr());  // as the optimizer's state would
  auto after = std::make_shared<LearningRateScheduler>(
      std::make_shared<torch::optim::StepLR>(second.sgd, 2, 0.5));
  round_trip(*before, *after);
  second.trainer.add(after);
  second.fit(5);

  // One uninterrupted reference run of 8 steps.
  auto weight = torch::zeros({1}, torch::requires_grad());
  torch::optim::SGD reference(std::vector<at::Tensor>{weight}, torch::optim::SGDOptions(0.1));
  torch::optim::StepLR reference_scheduler(reference, 2, 0.5);
  std::vector<double> expected;
  for (int step = 0; step < 8; ++step) {
    expected.push_back(reference.param_groups()[0].options().get_lr());
    reference_scheduler.step();
  }
  auto all = first.used;
  all.insert(all.end(), second.used.begin(), second.used.end());
  check_close(all, expected);
}

BOOST_AUTO_TEST_CASE(plateau_metric_that_never_appears_names_the_metrics_present) {
  LrRun run(TrainerOptions().max_epochs(2));
  run.trainer.add(
      std::make_shared<LearningRateScheduler>(ReduceOnPlateauOptions().monitor("val_acc")));
  auto data = make_batches(2, 4);
  auto validation = make_batches(1, 4);
  BOOST_CHECK_EXCEPTION(run.trainer.fit(data, validation), ConfigError,
                        [](const ConfigError& error) {
                          const std::string message = error.what();
                          return contains(message, "'val_acc'") &&
                                 contains(message, "train_loss, train_loss_epoch, val_loss");
                        });
}

BOOST_AUTO_TEST_CASE(bad_options_are_config_errors) {
  const auto plateau_error = [](ReduceOnPlateauOptions options, const std::string& expected) {
    try {
      LearningRateScheduler scheduler(std::move(options));
    } catch (const ConfigError& error) {
      return contains(error.what(), expected);
    }
    return false;
  };
  BOOST_TEST(
      plateau_error(ReduceOnPlateauOptions().factor(1.0), "factor must be in (0, 1), got 1"));
  BOOST_TEST(plateau_error(ReduceOnPlateauOptions().factor(1.5), "factor must be in (0, 1)"));
  BOOST_TEST(plateau_error(ReduceOnPlateauOptions().factor(0.0), "factor must be in (0, 1)"));
  BOOST_TEST(plateau_error(ReduceOnPlateauOptions().patience(-1), "patience must be >= 0"));
  BOOST_TEST(plateau_error(ReduceOnPlateauOptions().cooldown(-1), "cooldown must be >= 0"));
  BOOST_TEST(plateau_error(ReduceOnPlateauOptions().min_lr(-1.0), "min_lr must be >= 0"));
  BOOST_TEST(plateau_error(ReduceOnPlateauOptions().eps(-1e-9), "eps must be >= 0"));
  BOOST_TEST(plateau_error(ReduceOnPlateauOptions().monitor(""), "monitor is empty"));
  // Relative: a fraction of the best value; from 1 on, a Min run could never improve.
  BOOST_TEST(plateau_error(ReduceOnPlateauOptions().threshold_mode(ThresholdMode::Rel).min_delta(1),
                           "min_delta must be < 1 with ThresholdMode::Rel (a fraction of the best "
                           "value), got 1"));
  BOOST_TEST(
      !plateau_error(ReduceOnPlateauOptions().threshold_mode(ThresholdMode::Abs).min_delta(1), ""));
  BOOST_TEST(plateau_error(ReduceOnPlateauOptions().check_on(Event::StepEnd), "check_on"));

  BOOST_CHECK_THROW(LearningRateScheduler{LinearWarmupOptions(0)}, ConfigError);
  BOOST_CHECK_THROW(LearningRateScheduler{LinearWarmupOptions(4).start_factor(1.5)}, ConfigError);
  BOOST_CHECK_THROW(LearningRateScheduler{CosineDecayOptions(0)}, ConfigError);
  BOOST_CHECK_THROW(LearningRateScheduler{CosineDecayOptions(10).warmup_steps(10)}, ConfigError);
  BOOST_CHECK_THROW(LearningRateScheduler{CosineDecayOptions(10).min_lr(-1.0)}, ConfigError);
  BOOST_CHECK_THROW(LearningRateScheduler{OneCycleOptions(10).pct_start(0.0)}, ConfigError);
  BOOST_CHECK_THROW(LearningRateScheduler{OneCycleOptions(10).pct_start(0.1)}, ConfigError);
  BOOST_CHECK_THROW(LearningRateScheduler{OneCycleOptions(1)}, ConfigError);
  BOOST_CHECK_THROW(LearningRateScheduler{StepDecayOptions(0)}, ConfigError);
  BOOST_CHECK_THROW(LearningRateScheduler{StepDecayOptions(2).gamma(0.0)}, ConfigError);
  BOOST_CHECK_THROW(LearningRateScheduler{LrLambda()}, ConfigError);
  const auto schedule_error = [](const std::function<void()>& make) {
    return message_of<ConfigError>(make);
  };
  BOOST_TEST(contains(schedule_error([] {
                        LrSchedule s(MultiStepDecayOptions({3, 2}));
                      }),
                      "multi-step decay milestones must be ascending schedule steps >= 1, got 2 "
                      "at index 1"));
  BOOST_TEST(contains(schedule_error([] { LrSchedule s(ExponentialDecayOptions(0.0)); }),
                      "exponential decay needs gamma > 0"));
  BOOST_TEST(contains(schedule_error([] { LrSchedule s(CosineRestartsOptions(4).period_mult(0)); }),
                      "cosine restarts needs period_mult >= 1, got 0"));
  BOOST_TEST(contains(schedule_error([] { LrSchedule s(PolynomialDecayOptions(5).power(-1.0)); }),
                      "polynomial decay needs power >= 0"));
  BOOST_TEST(contains(schedule_error([] { LrSchedule s(LinearFactorOptions(5).end_factor(2.0)); }),
                      "linear factor end_factor must be in [0, 1], got 2"));
  BOOST_TEST(contains(schedule_error([] { LrSchedule s(ConstantFactorOptions(0)); }),
                      "constant factor needs total_steps >= 1, got 0"));
  BOOST_TEST(contains(schedule_error([] { LrSchedule s(CyclicOptions(0.0, 2)); }),
                      "cyclic needs max_lr > 0"));
  BOOST_TEST(
      contains(schedule_error([] {
                 LrSchedule s(SequentialOptions({StepDecayOptions(1), StepDecayOptions(1)}, {}));
               }),
               "sequential needs one milestone fewer than schedules, got 2 schedules and 0 "
               "milestones"));
  BOOST_TEST(
      contains(schedule_error([] {
                 LrSchedule s(SequentialOptions({StepDecayOptions(1), StepDecayOptions(1)}, {0}));
               }),
               "sequential milestones must be ascending schedule steps >= 1, got 0"));
  BOOST_CHECK_THROW(LearningRateScheduler{std::shared_ptr<torch::optim::LRScheduler>()},
                    ConfigError);
}

BOOST_AUTO_TEST_CASE(a_restored_state_for_other_parameter_groups_is_refused) {
  LrRun first(TrainerOptions().max_steps(1));
  auto before = std::make_shared<LearningRateScheduler>(StepDecayOptions(1));
  first.trainer.add(before);
  first.fit(1);

  auto model = make_model();
  auto parameters = model->parameters();
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<at::Tensor>{parameters[0], parameters[1]});
  groups.emplace_back(std::vector<at::Tensor>{parameters[2], parameters[3]});
  torch::optim::SGD sgd(std::move(groups), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, sgd, cross_entropy, TrainerOptions().use_registered_subscriptions(false));
  auto after = std::make_shared<LearningRateScheduler>(StepDecayOptions(1));
  round_trip(*before, *after);
  trainer.add(after);
  auto data = make_batches(1, 4);
  BOOST_CHECK_EXCEPTION(trainer.fit(data), ConfigError, [](const ConfigError& error) {
    return contains(error.what(), "learning rates for 1 parameter groups") &&
           contains(error.what(), "the optimizer has 2");
  });
}

BOOST_AUTO_TEST_CASE(default_role_and_name) {
  LearningRateScheduler scheduler(StepDecayOptions(1));
  BOOST_TEST((scheduler.role() == Role::Scheduler));
  BOOST_TEST(scheduler.name() == "learning_rate_scheduler");
}

BOOST_AUTO_TEST_SUITE_END()
