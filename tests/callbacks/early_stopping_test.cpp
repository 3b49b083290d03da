// EarlyStopping on scripted metrics: patience, min_delta, thresholds, check events, bad input.

#include <boost/test/unit_test.hpp>
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
  Trainer trainer{model, sgd, cross_entropy,
                  TrainerOptions().max_epochs(20).use_registered_subscriptions(false)};
  std::vector<Batch> train = make_batches(3, 4);
  std::vector<Batch> validation = make_batches(1, 4, 4, 3, 11);
  int evaluations = 0;

  ScriptedRun(std::string metric, std::vector<double> script, Event event = Event::EvalEnd) {
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

BOOST_AUTO_TEST_SUITE_END()
