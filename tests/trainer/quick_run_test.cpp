// Quick runs: limit_train_batches / limit_val_batches, fast_dev_run and the sanity validation
// before training (docs/trainer.md, "Quick runs").

#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/event_sequence.hpp>
#include <support/scratch.hpp>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

/// A source over a vector of batches that does not tell its size (as a torch::data loader).
class UnsizedSource final : public BatchSource {
 public:
  explicit UnsizedSource(std::vector<Batch>& batches) : batches_(batches) {}
  void start_epoch(std::int64_t /*epoch*/) override { next_ = 0; }
  bool next(Batch& batch) override {
    if (next_ >= batches_.size()) return false;
    batch = batches_[next_++];
    return true;
  }

 private:
  std::vector<Batch>& batches_;
  std::size_t next_ = 0;
};

/// The weights after SGD (lr 0.1) from make_model()'s weights over `windows` of `batches` (each
/// window a list of batch indices), every window's gradient the mean over its batches.
std::vector<at::Tensor> hand_trained_in_windows(const std::vector<Batch>& batches,
                                                const std::vector<std::vector<int>>& windows) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  for (const auto& window : windows) {
    sgd.zero_grad();
    for (const int index : window) {
      const auto loss = cross_entropy(model->forward(batches[index].data), batches[index].target);
      (window.size() == 1 ? loss : loss / static_cast<double>(window.size())).backward();
    }
    sgd.step();
  }
  return snapshot(*model);
}

void check_same_weights(torch::nn::Module& module, const std::vector<at::Tensor>& expected) {
  const auto actual = snapshot(module);
  BOOST_TEST_REQUIRE(actual.size() == expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    BOOST_TEST(torch::allclose(actual[i], expected[i], /*rtol=*/0, /*atol=*/1e-6));
  }
}

/// The mean cross-entropy per sample of `model` over the first `count` of `batches`.
double mean_loss(torch::nn::Sequential& model, const std::vector<Batch>& batches, int count) {
  torch::NoGradGuard no_grad;
  const std::vector<Batch> first(batches.begin(), batches.begin() + count);
  const auto merged = merge_batches(first, count).front();
  return cross_entropy(model->forward(merged.data), merged.target).item<double>();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(quick_runs)

BOOST_AUTO_TEST_CASE(a_count_limit_ends_each_epoch_with_a_short_window) {
  RecordedRun run(TrainerOptions().max_epochs(2).accumulate_grad_batches(3).limit_train_batches(
      BatchLimit::count(7)));
  auto train = make_batches(10, 4);
  run.trainer.fit(train);
  const auto epoch = join({"EpochStart", step(3), step(3), step(1), "EpochEnd"});
  BOOST_TEST(run.events() == join({"ActionStart", epoch, epoch, "ActionEnd"}));
  BOOST_TEST(run.trainer.state().step == 6);
  BOOST_TEST(run.trainer.state().global_batch == 14);
  // The short window's gradient is the mean over its one batch, as at the end of the data.
  const std::vector<std::vector<int>> windows{{0, 1, 2}, {3, 4, 5}, {6}};
  std::vector<std::vector<int>> both = windows;
  both.insert(both.end(), windows.begin(), windows.end());
  check_same_weights(*run.model, hand_trained_in_windows(train, both));
}

BOOST_AUTO_TEST_CASE(a_count_above_the_data_trains_every_batch) {
  RecordedRun run(TrainerOptions().limit_train_batches(BatchLimit::count(50)));
  auto train = make_batches(3, 4);
  run.trainer.fit(train);
  BOOST_TEST(run.trainer.state().step == 3);
}

BOOST_AUTO_TEST_CASE(a_fraction_of_a_sized_source_rounds_down) {
  RecordedRun run(TrainerOptions().max_epochs(2).limit_train_batches(BatchLimit::fraction(0.25)));
  auto train = make_batches(10, 4);  // 2.5 batches: 2
  run.trainer.fit(train);
  BOOST_TEST(run.trainer.state().global_batch == 4);
  BOOST_TEST(run.trainer.state().epoch == 2);
  check_same_weights(*run.model, hand_trained_in_windows(train, {{0}, {1}, {0}, {1}}));
}

BOOST_AUTO_TEST_CASE(a_fraction_of_one_needs_no_size) {
  RecordedRun run(TrainerOptions().limit_train_batches(BatchLimit::fraction(1.0)));
  auto batches = make_batches(3, 4);
  UnsizedSource train(batches);
  run.trainer.fit_sources(train, nullptr);
  BOOST_TEST(run.trainer.state().step == 3);
}

BOOST_AUTO_TEST_CASE(a_fraction_of_a_source_of_unknown_size_is_refused_before_any_event) {
  RecordedRun run(TrainerOptions().limit_train_batches(BatchLimit::fraction(0.5)));
  auto batches = make_batches(4, 4);
  UnsizedSource train(batches);
  const auto message = message_of<ConfigError>([&] { run.trainer.fit_sources(train, nullptr); });
  BOOST_TEST(has(message, "limit_train_batches is the fraction 0.5"));
  BOOST_TEST(has(message, "number of batches is unknown"));
  BOOST_TEST(run.events().empty());

  RecordedRun validated(TrainerOptions().limit_val_batches(BatchLimit::fraction(0.5)));
  auto train_batches = make_batches(2, 4);
  RangeSource<std::vector<Batch>> sized(train_batches);
  const auto val_message =
      message_of<ConfigError>([&] { validated.trainer.fit_sources(sized, &train); });
  BOOST_TEST(has(val_message, "limit_val_batches is the fraction 0.5"));
}

// val_every_epoch_fraction counts the epoch's batches: of a source that does not tell them, only
// with limit_train_batches as a count.
BOOST_AUTO_TEST_CASE(validation_every_fraction_of_an_epoch_of_unknown_size) {
  auto batches = make_batches(4, 4);
  auto validation_batches = make_batches(1, 4, 4, 3, 99);
  RangeSource<std::vector<Batch>> validation(validation_batches);
  UnsizedSource train(batches);
  RecordedRun unknown(TrainerOptions().val_every_epoch_fraction(0.5));
  const auto message =
      message_of<ConfigError>([&] { unknown.trainer.fit_sources(train, &validation); });
  BOOST_TEST(has(message, "val_every_epoch_fraction 0.5 needs the epoch's batches"), message);
  BOOST_TEST(unknown.events().empty());
  RecordedRun counted(
      TrainerOptions().val_every_epoch_fraction(0.5).limit_train_batches(BatchLimit::count(4)));
  counted.trainer.fit_sources(train, &validation);
  BOOST_TEST(counted.trainer.state().metrics.series("val_loss").size() == 2u);  // after 2, and 4
}

BOOST_AUTO_TEST_CASE(a_fraction_that_keeps_no_batch_is_refused) {
  Run run(TrainerOptions().limit_train_batches(BatchLimit::fraction(0.05)));
  auto train = make_batches(10, 4);
  const auto message = message_of<ConfigError>([&] { run.trainer.fit(train); });
  BOOST_TEST(has(message, "limit_train_batches is the fraction 0.05 of 10 batches"));
  BOOST_TEST(has(message, "rounds down to 0"));
}

BOOST_AUTO_TEST_CASE(bad_limits_are_refused_naming_the_option) {
  using Options = TrainerOptions;
  BOOST_TEST(has(message_of<ConfigError>(
                     [] { Options().limit_train_batches(BatchLimit::count(0)).validate(); }),
                 "limit_train_batches must be a count of batches >= 1 or a fraction in (0, 1], "
                 "got the count 0"));
  BOOST_TEST(has(message_of<ConfigError>(
                     [] { Options().limit_val_batches(BatchLimit::fraction(1.5)).validate(); }),
                 "limit_val_batches must be a count of batches >= 1 or a fraction in (0, 1], got "
                 "the fraction 1.5"));
  BOOST_TEST(has(message_of<ConfigError>(
                     [] { Options().limit_val_batches(BatchLimit::fraction(0)).validate(); }),
                 "got the fraction 0"));
  BOOST_TEST(has(message_of<ConfigError>([] { Options().fast_dev_run(-1).validate(); }),
                 "fast_dev_run must be >= 0"));
  BOOST_TEST(has(message_of<ConfigError>([] { Options().num_sanity_val_steps(-2).validate(); }),
                 "num_sanity_val_steps must be >= 0"));
}

BOOST_AUTO_TEST_CASE(a_validation_limit_evaluates_the_first_batches) {
  RecordedRun run(TrainerOptions().limit_val_batches(BatchLimit::count(2)));
  auto train = make_batches(2, 4);
  auto validation = make_batches(5, 4, 4, 3, 99);
  run.trainer.fit(train, validation);
  BOOST_TEST(run.events() == join({"ActionStart EpochStart", step(1), step(1), evaluation(2),
                                   "EpochEnd ActionEnd"}));
  const double val_loss = run.trainer.state().metrics.latest("val_loss").value;
  BOOST_TEST(val_loss == mean_loss(run.model, validation, 2), boost::test_tools::tolerance(1e-6));
  // evaluate() honours it too.
  BOOST_TEST(run.trainer.evaluate(validation) == mean_loss(run.model, validation, 2),
             boost::test_tools::tolerance(1e-6));
}

BOOST_AUTO_TEST_CASE(fast_dev_run_runs_one_batch_of_each_and_overrides_the_schedule) {
  RecordedRun run(TrainerOptions()
                      .max_epochs(5)
                      .max_steps(100)
                      .val_every_n_epochs(0)
                      .val_every_n_steps(1)
                      .num_sanity_val_steps(2)
                      .fast_dev_run(true));
  std::vector<int> flags;
  run.trainer.on(Event::ActionStart | Event::EvalEnd | Event::ActionEnd,
                 [&](State& s) { flags.push_back(s.fast_dev_run); });
  auto train = make_batches(6, 4);
  auto validation = make_batches(4, 4, 4, 3, 99);
  run.trainer.fit(train, validation);
  BOOST_TEST(run.events() ==
             join({"ActionStart EpochStart", step(1), evaluation(1), "EpochEnd ActionEnd"}));
  BOOST_TEST(flags == (std::vector<int>{1, 1, 1}), boost::test_tools::per_element());
  check_same_weights(*run.model, hand_trained_in_windows(train, {{0}}));
  // The overrides held for that fit only.
  BOOST_TEST(run.trainer.options().max_epochs() == 5);
  BOOST_TEST(run.trainer.options().fast_dev_run() == 1);
}

BOOST_AUTO_TEST_CASE(fast_dev_run_of_n_batches_accumulates_as_asked) {
  RecordedRun run(TrainerOptions().accumulate_grad_batches(2).fast_dev_run(3));
  auto train = make_batches(6, 4);
  auto validation = make_batches(4, 4, 4, 3, 99);
  run.trainer.fit(train, validation);
  BOOST_TEST(run.events() == join({"ActionStart EpochStart", step(2), step(1), evaluation(3),
                                   "EpochEnd ActionEnd"}));
  check_same_weights(*run.model, hand_trained_in_windows(train, {{0, 1}, {2}}));
}

BOOST_AUTO_TEST_CASE(fast_dev_run_does_not_resume) {
  const auto file = scratch("quick_run", "fast_dev_resume") / "start.tbckpt";
  {
    Run first;
    first.trainer.save_checkpoint(file);
  }
  RecordedRun run(TrainerOptions().fast_dev_run(true));
  run.trainer.resume_from(file);
  auto train = make_batches(2, 4);
  const auto message = message_of<ConfigError>([&] { run.trainer.fit(train); });
  BOOST_TEST(has(message, "fast_dev_run checks the loop from a fresh start and does not resume"));
  BOOST_TEST(run.events().empty());
}

BOOST_AUTO_TEST_CASE(sanity_validation_runs_first_and_leaves_no_trace) {
  auto train = make_batches(4, 4);
  auto validation = make_batches(5, 4, 4, 3, 99);
  // An eval step that draws from the generator: the sanity check puts it back.
  const auto drawing_eval_step = [](Trainer& trainer, Batch& batch) {
    torch::rand({1});
    return trainer.compute_loss(trainer.forward(batch.data), batch.target);
  };
  RecordedRun plain(TrainerOptions().max_epochs(2).seed(3));
  plain.trainer.set_eval_step(drawing_eval_step);
  plain.trainer.fit(train, validation);

  RecordedRun run(TrainerOptions().max_epochs(2).seed(3).num_sanity_val_steps(2));
  run.trainer.set_eval_step(drawing_eval_step);
  std::vector<std::string> seen;
  run.trainer.on(Event::EvalStart | Event::EvalBatchEnd | Event::EvalEnd | Event::EpochStart,
                 [&](State& s) {
                   seen.push_back(std::to_string(s.sanity_checking) + ":" +
                                  std::to_string(s.metrics.contains("val_loss")));
                 });
  at::Tensor random_after_sanity;
  run.trainer.on(Event::EpochStart, [&](State& s) {
    if (s.epoch == 0) random_after_sanity = torch::rand({4});
  });
  run.trainer.fit(train, validation);

  const auto epoch =
      join({"EpochStart", step(1), step(1), step(1), step(1), evaluation(5), "EpochEnd"});
  BOOST_TEST(run.events() == join({"ActionStart", evaluation(2), epoch, epoch, "ActionEnd"}));
  // Flagged while it runs, its val_loss visible at its EvalEnd and gone at the first EpochStart.
  BOOST_TEST_REQUIRE(seen.size() >= 5u);
  BOOST_TEST(std::vector<std::string>(seen.begin(), seen.begin() + 5) ==
                 (std::vector<std::string>{"1:0", "1:0", "1:0", "1:1", "0:0"}),
             boost::test_tools::per_element());
  BOOST_TEST(!run.trainer.state().sanity_checking);
  // The same run as without it: weights, metric history and the random generator.
  check_same_weights(*run.model, snapshot(*plain.model));
  const auto& metrics = run.trainer.state().metrics;
  BOOST_TEST(metrics.names() == plain.trainer.state().metrics.names(),
             boost::test_tools::per_element());
  BOOST_TEST(metrics.series("val_loss").size() == 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    BOOST_TEST(metrics.series("val_loss")[i].value ==
               plain.trainer.state().metrics.series("val_loss")[i].value);
  }
  torch::manual_seed(3);
  BOOST_TEST(torch::equal(random_after_sanity, torch::rand({4})));
}

BOOST_AUTO_TEST_CASE(sanity_validation_of_minus_one_runs_a_whole_limited_pass) {
  RecordedRun run(
      TrainerOptions().num_sanity_val_steps(-1).limit_val_batches(BatchLimit::count(3)));
  auto train = make_batches(1, 4);
  auto validation = make_batches(5, 4, 4, 3, 99);
  run.trainer.fit(train, validation);
  BOOST_TEST(run.events() == join({"ActionStart", evaluation(3), "EpochStart", step(1),
                                   evaluation(3), "EpochEnd ActionEnd"}));
}

BOOST_AUTO_TEST_CASE(a_broken_validation_path_fails_in_the_sanity_check_before_training) {
  RecordedRun run(TrainerOptions().max_epochs(3).num_sanity_val_steps(2));
  auto train = make_batches(50, 4);
  auto validation = make_batches(3, 4, /*features=*/5);  // the model takes 4
  const auto message = message_of<DataError>([&] { run.trainer.fit(train, validation); });
  BOOST_TEST(has(message, "the model's forward failed on an input of shape [4, 5]"));
  BOOST_TEST(run.events() ==
             "ActionStart EvalStart EvalBatchStart Exception EvalBatchEnd EvalEnd "
             "ActionEnd");
  const auto& events = run.recorder->events;
  BOOST_TEST(std::count(events.begin(), events.end(), "BatchStart") == 0);
  BOOST_TEST(run.trainer.state().step == 0);
  BOOST_TEST(run.trainer.state().sanity_checking);  // Exception's subscribers saw where
}

BOOST_AUTO_TEST_CASE(no_sanity_validation_without_validation_data_or_on_resume) {
  RecordedRun unvalidated(TrainerOptions().num_sanity_val_steps(2));
  auto train = make_batches(2, 4);
  unvalidated.trainer.fit(train);
  BOOST_TEST(unvalidated.events() ==
             join({"ActionStart EpochStart", step(1), step(1), "EpochEnd ActionEnd"}));

  const auto file = scratch("quick_run", "sanity_resume") / "epoch1.tbckpt";
  auto validation = make_batches(2, 4, 4, 3, 99);
  {
    Run first(TrainerOptions().max_epochs(1));
    first.trainer.fit(train, validation);
    first.trainer.save_checkpoint(file);
  }
  RecordedRun resumed(TrainerOptions().max_epochs(2).num_sanity_val_steps(2));
  resumed.trainer.resume_from(file);
  resumed.trainer.fit(train, validation);
  BOOST_TEST(resumed.events() == join({"ActionStart EpochStart", step(1), step(1), evaluation(2),
                                       "EpochEnd ActionEnd"}));
}

BOOST_AUTO_TEST_SUITE_END()
