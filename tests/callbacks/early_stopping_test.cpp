// EarlyStopping on scripted metrics: patience, min_delta, thresholds, check events, bad input.

#include <boost/test/unit_test.hpp>
#include <support/captured_log.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <torchbus/callbacks/early_stopping.hpp>

#include <filesystem>
#include <limits>
#include <sstream>
#include <stdexcept>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

/// A short fit with one evaluation per epoch; a metric producer (Role::Metrics, so before
/// EarlyStopping) records `script[i]` as `metric` at the i-th `event` (EvalEnd or EpochEnd).
struct ScriptedRun {
  torch::nn::Sequential model = make_model();
  torch::optim::SGD sgd{model->parameters(), torch::optim::SGDOptions(0.1)};
  Trainer trainer;
  std::vector<Batch> train = make_batches(3, 4);
  std::vector<Batch> validation = make_batches(1, 4, 4, 3, 11);
  int evaluations = 0;

  ScriptedRun(std::string metric, std::vector<double> script, Event event = Event::EvalEnd,
              TrainerOptions options = TrainerOptions().max_epochs(20))
      : trainer(model, sgd, cross_entropy, options.use_registered_subscriptions(false)) {
    trainer.on(Event::EvalEnd, [this](State&) { ++evaluations; });
    auto calls = std::make_shared<std::size_t>(0);
    trainer.on(
        event,
        [metric, script, calls](State& state) {
          if (*calls < script.size()) state.record_metric(metric, script[(*calls)++]);
        },
        with_role(Role::Metrics));
  }
  void fit() { trainer.fit(train, validation); }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(early_stopping)

BOOST_AUTO_TEST_CASE(stops_after_patience_checks_without_improvement) {
  // Best 0.8 at check 1; checks 2 and 3 do not improve: with patience 2 the run stops at check 3,
  // which is the evaluation of epoch 3.
  ScriptedRun run("val_score", {1.0, 0.8, 0.9, 0.85, 0.5, 0.4});
  auto stopping =
      std::make_shared<EarlyStopping>(EarlyStoppingOptions().monitor("val_score").patience(2));
  run.trainer.add(stopping);
  run.fit();
  const auto& state = run.trainer.state();
  BOOST_TEST(state.stop_requested());
  BOOST_TEST(stopping->stopped_epoch() == 3);
  BOOST_TEST(state.epoch == 4);  // epochs 0..3 ran
  BOOST_TEST(run.evaluations == 4);
  BOOST_TEST(stopping->best() == 0.8);
  BOOST_TEST(stopping->wait() == 2);
  BOOST_TEST(contains(state.stop_reason(), "val_score did not improve"));
  BOOST_TEST(contains(state.stop_reason(), "best 0.8 at epoch 1"));
}

BOOST_AUTO_TEST_CASE(patience_zero_stops_at_the_first_check_without_improvement) {
  ScriptedRun run("val_score", {1.0, 0.9, 0.9});
  auto stopping =
      std::make_shared<EarlyStopping>(EarlyStoppingOptions().monitor("val_score").patience(0));
  run.trainer.add(stopping);
  run.fit();
  BOOST_TEST(stopping->stopped_epoch() == 2);
}

BOOST_AUTO_TEST_CASE(max_mode_and_min_delta) {
  // Improvements must exceed 0.05: 0.54 and 0.53 are higher than 0.5, but not by more than that.
  ScriptedRun run("val_accuracy", {0.5, 0.54, 0.53, 0.7});
  auto stopping = std::make_shared<EarlyStopping>(
      EarlyStoppingOptions().monitor("val_accuracy").mode(Mode::Max).min_delta(0.05).patience(2));
  run.trainer.add(stopping);
  run.fit();
  BOOST_TEST(stopping->stopped_epoch() == 2);
  BOOST_TEST(stopping->best() == 0.5);
}

BOOST_AUTO_TEST_CASE(improvements_reset_the_wait) {
  ScriptedRun run("val_loss_scripted", {1.0, 1.1, 0.9, 1.0, 0.8, 0.85, 0.86, 0.87});
  auto stopping = std::make_shared<EarlyStopping>(
      EarlyStoppingOptions().monitor("val_loss_scripted").patience(3));
  run.trainer.add(stopping);
  run.fit();
  BOOST_TEST(stopping->stopped_epoch() == 7);
  BOOST_TEST(stopping->best() == 0.8);
}

BOOST_AUTO_TEST_CASE(stopping_threshold_is_strict_as_lightning) {
  // Lightning 2.x src/lightning/pytorch/callbacks/early_stopping.py:90 mode_dict = {"min":
  // torch.lt, "max": torch.gt} and :227 `self.monitor_op(current, self.stopping_threshold)`: a
  // value equal to the threshold does not stop; 0.45 (check 3) does.
  ScriptedRun run("val_score", {1.0, 0.8, 0.5, 0.45, 0.4});
  auto stopping = std::make_shared<EarlyStopping>(
      EarlyStoppingOptions().monitor("val_score").patience(10).stopping_threshold(0.5));
  run.trainer.add(stopping);
  run.fit();
  BOOST_TEST(stopping->stopped_epoch() == 3);
  BOOST_TEST(contains(run.trainer.state().stop_reason(),
                      "val_score = 0.45 is below the stopping threshold 0.5 at epoch 3"));
}

BOOST_AUTO_TEST_CASE(stopping_threshold_max_mode_is_strict) {
  ScriptedRun run("val_accuracy", {0.5, 0.9, 0.95});
  auto stopping = std::make_shared<EarlyStopping>(EarlyStoppingOptions()
                                                      .monitor("val_accuracy")
                                                      .mode(Mode::Max)
                                                      .patience(10)
                                                      .stopping_threshold(0.9));
  run.trainer.add(stopping);
  run.fit();
  BOOST_TEST(stopping->stopped_epoch() == 2);
  BOOST_TEST(contains(run.trainer.state().stop_reason(), "is above the stopping threshold 0.9"));
}

BOOST_AUTO_TEST_CASE(divergence_threshold) {
  ScriptedRun run("val_score", {1.0, 0.5, 3.0, 0.1});
  auto stopping = std::make_shared<EarlyStopping>(
      EarlyStoppingOptions().monitor("val_score").patience(10).divergence_threshold(2.0));
  run.trainer.add(stopping);
  run.fit();
  BOOST_TEST(stopping->stopped_epoch() == 2);
  BOOST_TEST(contains(run.trainer.state().stop_reason(), "above the divergence threshold 2"));
}

BOOST_AUTO_TEST_CASE(non_finite_metric) {
  ScriptedRun run("val_score", {1.0, std::numeric_limits<double>::quiet_NaN(), 0.5});
  auto stopping =
      std::make_shared<EarlyStopping>(EarlyStoppingOptions().monitor("val_score").patience(10));
  run.trainer.add(stopping);
  run.fit();
  BOOST_TEST(stopping->stopped_epoch() == 1);
  BOOST_TEST(contains(run.trainer.state().stop_reason(), "not finite"));
}

BOOST_AUTO_TEST_CASE(real_val_loss_by_default) {
  // The default monitor is the trainer's own "val_loss"; with a learning rate of 0 it never
  // improves after the first evaluation.
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.0));
  Trainer trainer(model, sgd, cross_entropy,
                  TrainerOptions().max_epochs(10).use_registered_subscriptions(false));
  auto stopping = std::make_shared<EarlyStopping>(EarlyStoppingOptions().patience(2));
  trainer.add(stopping);
  auto train = make_batches(2, 4);
  auto validation = make_batches(1, 4);
  trainer.fit(train, validation);
  BOOST_TEST(stopping->stopped_epoch() == 2);
  BOOST_TEST(trainer.state().epoch == 3);
}

BOOST_AUTO_TEST_CASE(checks_at_epoch_end_and_skips_stale_points) {
  // The metric is recorded at EpochEnd (by a metric producer), but only at every other epoch: the
  // epochs without a new point are not counted as checks.
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, sgd, cross_entropy,
                  TrainerOptions().max_epochs(20).use_registered_subscriptions(false));
  const std::vector<double> script{1.0, 0.5, 0.6, 0.7};
  std::size_t next = 0;
  trainer.on(
      Event::EpochEnd,
      [&](State& state) {
        if (state.epoch % 2 == 0 && next < script.size()) {
          state.record_metric("train_score", script[next++]);
        }
      },
      with_role(Role::Metrics));
  auto stopping = std::make_shared<EarlyStopping>(
      EarlyStoppingOptions().monitor("train_score").patience(2).check_on(Event::EpochEnd));
  trainer.add(stopping);
  auto train = make_batches(2, 4);
  trainer.fit(train);
  // Points at epochs 0, 2, 4, 6: no improvement at epochs 4 and 6.
  BOOST_TEST(stopping->stopped_epoch() == 6);
  BOOST_TEST(trainer.state().epoch == 7);
}

BOOST_AUTO_TEST_CASE(a_metric_that_never_appears_names_the_metrics_present) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, sgd, cross_entropy,
                  TrainerOptions().max_epochs(3).use_registered_subscriptions(false));
  trainer.add(std::make_shared<EarlyStopping>(EarlyStoppingOptions().monitor("val_acc")));
  auto train = make_batches(2, 4);
  auto validation = make_batches(1, 4);
  int epochs = 0;
  trainer.on(Event::EpochEnd, [&](State&) { ++epochs; });
  BOOST_CHECK_EXCEPTION(trainer.fit(train, validation), ConfigError, [](const ConfigError& error) {
    const std::string message = error.what();
    return contains(message, "'val_acc'") &&
           contains(message, "metrics present: train_loss, train_loss_epoch, val_loss");
  });
  BOOST_TEST(epochs == 1);  // the error came at the first check
}

BOOST_AUTO_TEST_CASE(bad_options_are_config_errors) {
  BOOST_CHECK_EXCEPTION(EarlyStopping(EarlyStoppingOptions().patience(-1)), ConfigError,
                        [](const ConfigError& error) {
                          return contains(error.what(), "patience must be >= 0, got -1");
                        });
  BOOST_CHECK_THROW(EarlyStopping(EarlyStoppingOptions().min_delta(-0.1)), ConfigError);
  BOOST_CHECK_THROW(EarlyStopping(EarlyStoppingOptions().monitor("")), ConfigError);
  BOOST_CHECK_THROW(EarlyStopping(EarlyStoppingOptions().check_on(Event::StepEnd)), ConfigError);
  BOOST_CHECK_THROW(
      EarlyStopping(EarlyStoppingOptions().stopping_threshold(2.0).divergence_threshold(1.0)),
      ConfigError);
  BOOST_CHECK_THROW(
      EarlyStopping(
          EarlyStoppingOptions().mode(Mode::Max).stopping_threshold(1.0).divergence_threshold(2.0)),
      ConfigError);
}

BOOST_AUTO_TEST_CASE(counters_survive_save_and_load) {
  // Three checks, saved; a fresh EarlyStopping loaded from them continues the count.
  EarlyStoppingOptions options = EarlyStoppingOptions().monitor("m").patience(3);
  EarlyStopping first(options);
  State state;
  const auto check = [&state](EarlyStopping& stopping, double value) {
    ++state.step;
    state.record_metric("m", value);
    stopping.on_eval_end(state);
  };
  check(first, 1.0);
  check(first, 0.7);
  check(first, 0.9);
  check(first, 0.8);
  BOOST_TEST(first.best() == 0.7);
  BOOST_TEST(first.wait() == 2);

  EarlyStopping second(options);
  round_trip(first, second);
  BOOST_TEST(second.best() == 0.7);
  BOOST_TEST(second.wait() == 2);
  second.on_eval_end(state);  // the same point again: not a new check
  BOOST_TEST(second.wait() == 2);
  BOOST_TEST(!state.stop_requested());
  check(second, 0.75);
  BOOST_TEST(state.stop_requested());
  BOOST_TEST(second.stopped_epoch() == 0);

  EarlyStopping third(options);
  round_trip(second, third);
  BOOST_TEST(third.stopped_epoch() == 0);
  BOOST_TEST(third.wait() == 3);
}

BOOST_AUTO_TEST_CASE(default_role_and_name) {
  EarlyStopping stopping;
  BOOST_TEST((stopping.role() == Role::Monitor));
  BOOST_TEST(stopping.name() == "early_stopping");
  BOOST_TEST(stopping.options().monitor() == "val_loss");
}

BOOST_AUTO_TEST_CASE(restore_best_weights_ends_fit_with_the_weights_of_the_best_check) {
  // Best 0.5 at check 1 (epoch 1); patience 2 stops at check 3.
  ScriptedRun run("val_score", {1.0, 0.5, 0.7, 0.9});
  auto stopping = std::make_shared<EarlyStopping>(
      EarlyStoppingOptions().monitor("val_score").patience(2).restore_best_weights(true));
  run.trainer.add(stopping);
  std::vector<std::vector<at::Tensor>> weights_at_checks;
  run.trainer.on(Event::EvalEnd,
                 [&](State&) { weights_at_checks.push_back(snapshot(*run.model)); });
  run.fit();
  BOOST_REQUIRE(weights_at_checks.size() == 4);
  const auto final_weights = snapshot(*run.model);
  for (std::size_t i = 0; i < final_weights.size(); ++i) {
    BOOST_TEST(torch::equal(final_weights[i], weights_at_checks[1][i]));
    BOOST_TEST(!torch::equal(final_weights[i], weights_at_checks[3][i]));
  }
}

BOOST_AUTO_TEST_CASE(best_weights_are_restored_by_fit_only_not_by_evaluate) {
  ScriptedRun run("val_score", {1.0, 0.5, 0.7, 0.9});
  run.trainer.add(std::make_shared<EarlyStopping>(
      EarlyStoppingOptions().monitor("val_score").patience(2).restore_best_weights(true)));
  run.fit();
  {
    torch::NoGradGuard no_grad;
    for (auto& parameter : run.model->parameters()) parameter.fill_(0.5);
  }
  const auto set_by_hand = snapshot(*run.model);
  run.trainer.evaluate(run.validation);
  const auto after = snapshot(*run.model);
  for (std::size_t i = 0; i < after.size(); ++i) BOOST_TEST(torch::equal(after[i], set_by_hand[i]));
}

BOOST_AUTO_TEST_CASE(best_weights_survive_a_resume) {
  const auto folder = std::filesystem::temp_directory_path() / "torchbus_early_stopping_best";
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  const auto options =
      EarlyStoppingOptions().monitor("val_score").patience(2).restore_best_weights(true);
  std::vector<at::Tensor> best;
  {
    ScriptedRun first("val_score", {1.0, 0.5, 0.7, 0.9});
    first.trainer.add(std::make_shared<EarlyStopping>(options));
    first.trainer.on(
        Event::EpochEnd,
        [&](State& state) {
          if (state.epoch == 1) best = snapshot(*first.model);
          if (state.epoch == 2) {
            first.trainer.save_checkpoint(folder / "epoch2.tbckpt");
            throw std::runtime_error("killed");
          }
        },
        1000);
    BOOST_CHECK_THROW(first.fit(), std::runtime_error);
  }
  // The resumed run's script continues after the two checks already done.
  ScriptedRun second("val_score", {0.9, 1.1});
  auto stopping = std::make_shared<EarlyStopping>(options);
  second.trainer.add(stopping);
  second.trainer.resume_from(folder / "epoch2.tbckpt");
  second.fit();
  BOOST_TEST(stopping->best() == 0.5);
  BOOST_TEST(stopping->stopped_epoch() == 3);
  const auto final_weights = snapshot(*second.model);
  BOOST_REQUIRE(final_weights.size() == best.size());
  for (std::size_t i = 0; i < best.size(); ++i) BOOST_TEST(torch::equal(final_weights[i], best[i]));
}

/// What each EpochEnd (after every monitor) saw of the run's stop: "-" none, "held" an early stop
/// held for min_epochs/min_steps, "stop" a stop requested.
std::string stops_seen_at_epoch_ends(ScriptedRun& run) {
  auto seen = std::make_shared<std::string>();
  run.trainer.on(
      Event::EpochEnd,
      [seen](State& state) {
        *seen += state.stop_requested() ? "stop " : state.held_stop_reason() ? "held " : "- ";
      },
      1000);
  run.fit();
  return *seen;
}

BOOST_AUTO_TEST_CASE(min_epochs_holds_a_plateau_stop_until_that_many_epochs_have_ended) {
  // Patience 1 asks to stop at the check of epoch 2; min_epochs 5 holds the stop through epochs 3
  // and 4, whose validations run, and the run ends after epoch 4 (Lightning's fit loop,
  // loops/fit_loop.py:161-164 and :194: should_stop is honoured once min_epochs have ended).
  ScriptedRun run("val_score", {1.0, 0.8, 0.9, 0.7, 0.6, 0.5, 0.4}, Event::EvalEnd,
                  TrainerOptions().max_epochs(20).min_epochs(5));
  auto stopping =
      std::make_shared<EarlyStopping>(EarlyStoppingOptions().monitor("val_score").patience(1));
  run.trainer.add(stopping);
  BOOST_TEST(stops_seen_at_epoch_ends(run) == "- - held held stop ");
  const auto& state = run.trainer.state();
  BOOST_TEST(state.epoch == 5);
  BOOST_TEST(run.evaluations == 5);
  BOOST_TEST((state.stop_kind() == StopKind::Finished));
  // The first reason is kept, though the metric improved while the stop was held.
  BOOST_TEST(contains(state.stop_reason(), "did not improve"));
  BOOST_TEST(contains(state.stop_reason(), "stopping at epoch 2"));
  BOOST_TEST(stopping->stopped_epoch() == 2);
}

BOOST_AUTO_TEST_CASE(plateaus_while_a_stop_is_held_keep_its_reason_and_epoch) {
  ScriptedRun run("val_score", {1.0, 1.0, 1.0, 1.0, 1.0, 1.0}, Event::EvalEnd,
                  TrainerOptions().max_epochs(20).min_epochs(4));
  auto stopping =
      std::make_shared<EarlyStopping>(EarlyStoppingOptions().monitor("val_score").patience(0));
  run.trainer.add(stopping);
  const CapturedLog log;
  BOOST_TEST(stops_seen_at_epoch_ends(run) == "- held held stop ");
  BOOST_TEST(stopping->stopped_epoch() == 1);
  BOOST_TEST(contains(run.trainer.state().stop_reason(), "stopping at epoch 1"));
  BOOST_TEST(log.messages("info", "EarlyStopping: the stop waits").size() == 1u);
}

BOOST_AUTO_TEST_CASE(a_stop_at_the_epoch_that_reaches_min_epochs_is_not_held) {
  ScriptedRun run("val_score", {1.0, 0.8, 0.9}, Event::EvalEnd,
                  TrainerOptions().max_epochs(20).min_epochs(3));
  run.trainer.add(
      std::make_shared<EarlyStopping>(EarlyStoppingOptions().monitor("val_score").patience(0)));
  BOOST_TEST(stops_seen_at_epoch_ends(run) == "- - stop ");
}

BOOST_AUTO_TEST_CASE(min_steps_releases_a_held_stop_at_the_step_that_reaches_it) {
  // Three steps an epoch: the stop asked for at epoch 1's check (step 6) is held until step 10,
  // the first of epoch 3, and the run ends there, epoch 3 cut short (not validated).
  ScriptedRun run("val_score", {1.0, 1.0}, Event::EvalEnd,
                  TrainerOptions().max_epochs(20).min_steps(10));
  run.trainer.add(
      std::make_shared<EarlyStopping>(EarlyStoppingOptions().monitor("val_score").patience(0)));
  std::vector<std::int64_t> stopping_steps;
  run.trainer.on(
      Event::StepEnd,
      [&](State& state) {
        if (state.stop_requested()) stopping_steps.push_back(state.step);
      },
      1000);
  BOOST_TEST(stops_seen_at_epoch_ends(run) == "- held held stop ");
  BOOST_TEST(stopping_steps == std::vector<std::int64_t>{10});
  const auto& state = run.trainer.state();
  BOOST_TEST(state.step == 10);
  BOOST_TEST(state.epoch == 3);
  BOOST_TEST(run.evaluations == 3);
}

BOOST_AUTO_TEST_CASE(failures_stop_at_once_whatever_min_epochs_says) {
  // A non-finite or diverged metric is a failure, not a plateau: min_epochs does not hold it.
  ScriptedRun nan_run("val_score", {1.0, std::numeric_limits<double>::quiet_NaN()}, Event::EvalEnd,
                      TrainerOptions().max_epochs(20).min_epochs(10));
  nan_run.trainer.add(
      std::make_shared<EarlyStopping>(EarlyStoppingOptions().monitor("val_score").patience(5)));
  BOOST_TEST(stops_seen_at_epoch_ends(nan_run) == "- stop ");
  ScriptedRun diverging("val_score", {1.0, 0.9, 5.0}, Event::EvalEnd,
                        TrainerOptions().max_epochs(20).min_epochs(10));
  diverging.trainer.add(std::make_shared<EarlyStopping>(
      EarlyStoppingOptions().monitor("val_score").patience(5).divergence_threshold(2.0)));
  BOOST_TEST(stops_seen_at_epoch_ends(diverging) == "- - stop ");
  // And a stop a callback asks for with request_stop is not held either.
  ScriptedRun direct("val_score", {}, Event::EvalEnd,
                     TrainerOptions().max_epochs(20).min_epochs(10));
  direct.trainer.on(Event::EpochEnd, [](State& state) {
    if (state.epoch == 1) state.request_stop("enough");
  });
  BOOST_TEST(stops_seen_at_epoch_ends(direct) == "- stop ");
}

BOOST_AUTO_TEST_CASE(a_held_stop_survives_a_resume) {
  // Killed after epoch 3 with the stop held, the run resumes (without EarlyStopping: the
  // checkpoint holds the stop) and ends after epoch 4 with the uninterrupted run's weights.
  const auto folder = std::filesystem::temp_directory_path() / "torchbus_early_stopping_held";
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  const std::vector<double> script{1.0, 0.8, 0.9, 0.7, 0.6};
  const auto options = TrainerOptions().max_epochs(20).min_epochs(5).seed(7);
  const auto stopping = EarlyStoppingOptions().monitor("val_score").patience(1);
  ScriptedRun whole("val_score", script, Event::EvalEnd, options);
  whole.trainer.add(std::make_shared<EarlyStopping>(stopping));
  whole.fit();
  BOOST_TEST(whole.trainer.state().epoch == 5);
  {
    ScriptedRun first("val_score", script, Event::EvalEnd, options);
    first.trainer.add(std::make_shared<EarlyStopping>(stopping));
    first.trainer.on(
        Event::EpochEnd,
        [&](State& state) {
          if (state.epoch != 3) return;
          BOOST_TEST(state.held_stop_reason().has_value());
          first.trainer.save_checkpoint(folder / "epoch3.tbckpt");
          throw std::runtime_error("killed");
        },
        1000);
    BOOST_CHECK_THROW(first.fit(), std::runtime_error);
  }
  ScriptedRun second("val_score", {}, Event::EvalEnd, options);
  second.trainer.resume_from(folder / "epoch3.tbckpt");
  BOOST_TEST(stops_seen_at_epoch_ends(second) == "stop ");
  BOOST_TEST(second.trainer.state().epoch == 5);
  BOOST_TEST(contains(second.trainer.state().stop_reason(), "stopping at epoch 2"));
  BOOST_TEST(all_equal(snapshot(*whole.model), snapshot(*second.model)));
}

BOOST_AUTO_TEST_CASE(baseline_restarts_the_patience_only_past_it) {
  // Keras (callbacks/early_stopping.py:110-127, commit 3422977): every check adds one to wait,
  // an improvement takes the best, and only one beating the baseline too sets wait back to 0.
  // Below a baseline of 0.5, improvements 1.0, 0.9, 0.8 leave wait at 3: the first check
  // without improvement (0.85, epoch 3) stops with patience 2.
  ScriptedRun below("val_score", {1.0, 0.9, 0.8, 0.85, 0.84, 0.83});
  auto with_baseline = std::make_shared<EarlyStopping>(
      EarlyStoppingOptions().monitor("val_score").patience(2).baseline(0.5));
  below.trainer.add(with_baseline);
  below.fit();
  BOOST_TEST(with_baseline->stopped_epoch() == 3);
  BOOST_TEST(with_baseline->best() == 0.8);
  BOOST_TEST(with_baseline->wait() == 4);
  // Without it, the same values stop at the second check without improvement (epoch 4).
  ScriptedRun plain("val_score", {1.0, 0.9, 0.8, 0.85, 0.84, 0.83});
  auto without =
      std::make_shared<EarlyStopping>(EarlyStoppingOptions().monitor("val_score").patience(2));
  plain.trainer.add(without);
  plain.fit();
  BOOST_TEST(without->stopped_epoch() == 4);
  // Values past the baseline behave as without one.
  ScriptedRun past("val_score", {0.4, 0.45, 0.3, 0.35, 0.36, 0.2});
  auto past_baseline = std::make_shared<EarlyStopping>(
      EarlyStoppingOptions().monitor("val_score").patience(2).baseline(0.5));
  past.trainer.add(past_baseline);
  past.fit();
  BOOST_TEST(past_baseline->stopped_epoch() == 4);
  BOOST_TEST(past_baseline->best() == 0.3);
}

BOOST_AUTO_TEST_CASE(start_from_epoch_ignores_the_checks_of_the_warm_up) {
  // Keras (callbacks/early_stopping.py:101): checks of epochs before start_from_epoch are not
  // compared. Epochs 0-2 rise; from epoch 3, 0.9 is the best and 1.0 (epoch 4) stops.
  ScriptedRun warm("val_score", {1.0, 2.0, 3.0, 0.9, 1.0, 1.1});
  auto stopping = std::make_shared<EarlyStopping>(
      EarlyStoppingOptions().monitor("val_score").patience(1).start_from_epoch(3));
  warm.trainer.add(stopping);
  warm.fit();
  BOOST_TEST(stopping->stopped_epoch() == 4);
  BOOST_TEST(stopping->best() == 0.9);
  // A stopping threshold waits for the warm-up too; a non-finite value does not.
  ScriptedRun threshold("val_score", {0.1, 0.2, 0.3, 0.05});
  auto thresholded = std::make_shared<EarlyStopping>(EarlyStoppingOptions()
                                                         .monitor("val_score")
                                                         .patience(10)
                                                         .stopping_threshold(0.5)
                                                         .start_from_epoch(3));
  threshold.trainer.add(thresholded);
  threshold.fit();
  BOOST_TEST(thresholded->stopped_epoch() == 3);
  ScriptedRun failing("val_score", {1.0, std::numeric_limits<double>::infinity()});
  auto failed = std::make_shared<EarlyStopping>(
      EarlyStoppingOptions().monitor("val_score").patience(10).start_from_epoch(5));
  failing.trainer.add(failed);
  failing.fit();
  BOOST_TEST(failed->stopped_epoch() == 1);
}

BOOST_AUTO_TEST_CASE(bad_baseline_and_start_from_epoch_are_config_errors) {
  BOOST_TEST(has(
      message_of<ConfigError>([] { EarlyStopping(EarlyStoppingOptions().start_from_epoch(-1)); }),
      "start_from_epoch must be >= 0"));
  BOOST_TEST(has(message_of<ConfigError>([] {
                   EarlyStopping(
                       EarlyStoppingOptions().baseline(std::numeric_limits<double>::quiet_NaN()));
                 }),
                 "baseline must be a finite number"));
}

BOOST_AUTO_TEST_SUITE_END()
