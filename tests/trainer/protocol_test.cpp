// The event sequence a Trainer publishes, checked by a recording callback.

#include <boost/test/unit_test.hpp>
#include <support/captured_log.hpp>
#include <support/event_sequence.hpp>
#include <support/same_series.hpp>
#include <support/scratch.hpp>

#include <algorithm>
#include <sstream>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

/// Records, at every End event and at Exception, "<event>:<state.error_message>" when
/// `state.error` is set and "<event>:-" when it is not; counts the Exception emissions.
struct ErrorWatch {
  std::vector<std::string> seen;
  int exceptions = 0;

  explicit ErrorWatch(Trainer& trainer) {
    for (const Event event :
         {Event::Exception, Event::BatchEnd, Event::StepEnd, Event::EvalBatchEnd, Event::EvalEnd,
          Event::EpochEnd, Event::ActionEnd}) {
      trainer.on(event, [this, event](State& s) {
        if (event == Event::Exception) ++exceptions;
        seen.push_back(std::string(to_string(event)) + ":" + (s.error ? s.error_message : "-"));
      });
    }
  }
};

/// Whether `seen` (of an ErrorWatch) has the error set exactly from its Exception entry on.
bool error_set_from_exception_on(const std::vector<std::string>& seen) {
  bool failed = false;
  for (const auto& entry : seen) {
    failed = failed || entry.rfind("Exception:", 0) == 0;
    if ((entry.substr(entry.find(':') + 1) != "-") != failed) {
      BOOST_TEST_MESSAGE("unexpected error state at " << entry);
      return false;
    }
  }
  return failed;
}

/// Runs `action`, which must throw a std::runtime_error whose what() is `message`.
template <typename Action>
void expect_rethrown(Action&& action, const std::string& message) {
  BOOST_CHECK_EXCEPTION(action(), std::runtime_error,
                        [&](const std::runtime_error& error) { return error.what() == message; });
}

/// Where `fail_evaluation` makes the second batch of every evaluation fail.
enum class EvalFailure { EvalBatchStart, EvalStep, EvalEnd };

/// Makes every evaluation fail with std::runtime_error("evaluation failed") at `where`: at the
/// second batch's EvalBatchStart, in the second batch's custom eval step, or at EvalEnd.
void fail_evaluation(Trainer& trainer, EvalFailure where) {
  const auto fail = [](State&) { throw std::runtime_error("evaluation failed"); };
  switch (where) {
    case EvalFailure::EvalBatchStart:
      trainer.on(Event::EvalBatchStart, [fail](State& s) {
        if (s.eval_batch == 1) fail(s);
      });
      break;
    case EvalFailure::EvalStep:
      trainer.set_eval_step([fail](Trainer& t, Batch& batch) {
        if (t.state().eval_batch == 1) fail(t.state());
        return cross_entropy(t.forward(batch.data), batch.target);
      });
      break;
    case EvalFailure::EvalEnd:
      trainer.on(Event::EvalEnd, fail);
      break;
  }
}

/// The events of an evaluation of two batches that fails at `where`, from EvalStart on.
std::string failed_evaluation(EvalFailure where) {
  if (where == EvalFailure::EvalEnd) return join({evaluation(2), "Exception"});
  return "EvalStart EvalBatchStart EvalBatchEnd EvalBatchStart Exception EvalBatchEnd EvalEnd";
}

/// fit() for two epochs of two steps, validated on two batches after the first epoch, with the
/// evaluation failing at `where`: it ends the evaluation, the epoch and the action, and the model
/// is back in training mode from the failure on.
void check_failed_validation_in_fit(EvalFailure where) {
  RecordedRun run(TrainerOptions().max_epochs(2));
  ErrorWatch watch(run.trainer);
  fail_evaluation(run.trainer, where);
  std::vector<bool> model_training;
  for (const Event event : {Event::Exception, Event::EpochEnd, Event::ActionEnd}) {
    run.trainer.on(event, [&](State& s) { model_training.push_back(s.model->is_training()); });
  }
  auto train = make_batches(2, 4);
  auto validation = make_batches(2, 4, 4, 3, 99);
  expect_rethrown([&] { run.trainer.fit(train, validation); }, "evaluation failed");
  BOOST_TEST(run.events() == join({"ActionStart EpochStart", step(1), step(1),
                                   failed_evaluation(where), "EpochEnd ActionEnd"}));
  BOOST_TEST(watch.exceptions == 1);
  BOOST_TEST(error_set_from_exception_on(watch.seen));
  BOOST_TEST(model_training == (std::vector<bool>{true, true, true}),
             boost::test_tools::per_element());
  BOOST_TEST(run.model->is_training());
  BOOST_TEST(run.trainer.state().step == 2);
  // Only a failure after the last batch leaves a val_loss (recorded before EvalEnd).
  BOOST_TEST(run.trainer.state().metrics.contains("val_loss") == (where == EvalFailure::EvalEnd));
}

/// evaluate() on two batches failing at `where`: the evaluation and the action end, the model is
/// back in training mode.
void check_failed_evaluate(EvalFailure where) {
  RecordedRun run{TrainerOptions()};
  ErrorWatch watch(run.trainer);
  fail_evaluation(run.trainer, where);
  auto data = make_batches(2, 4);
  expect_rethrown([&] { run.trainer.evaluate(data); }, "evaluation failed");
  BOOST_TEST(run.events() == join({"ActionStart", failed_evaluation(where), "ActionEnd"}));
  BOOST_TEST(watch.exceptions == 1);
  BOOST_TEST(error_set_from_exception_on(watch.seen));
  BOOST_TEST(run.model->is_training());
}

/// Two epochs of 4 steps validated every second step, trained whole and, in another run, saved at
/// `when` of the validation after step 4 (the first epoch's last), interrupted, and resumed:
/// checks that both record the same val_loss series; returns the resumed run's events.
std::string resumed_after_saving_in_a_validation(Event when) {
  const TempDir dir("protocol");
  const auto file = dir.path / "in_validation.tbckpt";
  const auto options = TrainerOptions().max_epochs(2).val_every_n_steps(2).seed(3);
  auto train = make_batches(4, 4);
  auto validation = make_batches(1, 4, 4, 3, 99);
  RecordedRun whole(options);
  whole.trainer.fit(train, validation);
  {
    RecordedRun first(options);
    first.trainer.on(when, [&](State& s) {
      if (s.step != 4) return;
      first.trainer.save_checkpoint(file);
      throw std::runtime_error("interrupted");
    });
    BOOST_CHECK_THROW(first.trainer.fit(train, validation), std::runtime_error);
  }
  RecordedRun resumed(options);
  resumed.trainer.resume_from(file);
  resumed.trainer.fit(train, validation);
  check_same_series(whole.trainer.state().metrics, resumed.trainer.state().metrics, "val_loss");
  return resumed.events();
}

/// Two epochs of 4 steps validated at each end, trained whole and, in another run, ended by
/// max_steps `cut` (the cut-short epoch's end validates and records its loss mean; a checkpoint is
/// taken at ActionEnd), then resumed without the limit: checks that both hold the same val_loss
/// and train_loss_epoch series; returns the resumed run's events.
std::string resumed_after_max_steps(std::int64_t cut) {
  const TempDir dir("protocol");
  const auto file = dir.path / "cut_short.tbckpt";
  const auto options = TrainerOptions().max_epochs(2).seed(3);
  auto train = make_batches(4, 4);
  auto validation = make_batches(1, 4, 4, 3, 99);
  RecordedRun whole(options);
  whole.trainer.fit(train, validation);
  {
    RecordedRun first(TrainerOptions(options).max_steps(cut));
    first.trainer.on(Event::ActionEnd, [&](State&) { first.trainer.save_checkpoint(file); });
    first.trainer.fit(train, validation);
    BOOST_TEST(first.trainer.state().metrics.length("val_loss") == 1);
    BOOST_TEST(first.trainer.state().metrics.length("train_loss_epoch") == 1);
  }
  RecordedRun resumed(options);
  resumed.trainer.resume_from(file);
  resumed.trainer.fit(train, validation);
  for (const char* name : {"val_loss", "train_loss_epoch"}) {
    check_same_series(whole.trainer.state().metrics, resumed.trainer.state().metrics, name);
  }
  return resumed.events();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(protocol)

BOOST_AUTO_TEST_CASE(one_batch_per_step) {
  RecordedRun run(TrainerOptions().max_epochs(2));
  auto batches = make_batches(3, 4);
  run.trainer.fit(batches);
  const auto epoch = join({"EpochStart", step(1), step(1), step(1), "EpochEnd"});
  BOOST_TEST(run.events() == join({"ActionStart", epoch, epoch, "ActionEnd"}));
  BOOST_TEST(run.trainer.state().step == 6);
  BOOST_TEST(run.trainer.state().epoch == 2);
  BOOST_TEST(run.trainer.state().global_batch == 6);
}

BOOST_AUTO_TEST_CASE(accumulation_with_a_short_last_window) {
  RecordedRun run(TrainerOptions().accumulate_grad_batches(3));
  std::vector<std::int64_t> sizes, positions, steps_at_end;
  run.trainer.on(Event::BatchStart, [&](State& s) {
    sizes.push_back(s.window_size);
    positions.push_back(s.window_position);
  });
  run.trainer.on(Event::StepEnd, [&](State& s) { steps_at_end.push_back(s.step); });
  auto batches = make_batches(7, 4);
  run.trainer.fit(batches);
  BOOST_TEST(run.events() ==
             join({"ActionStart EpochStart", step(3), step(3), step(1), "EpochEnd ActionEnd"}));
  BOOST_TEST(sizes == (std::vector<std::int64_t>{3, 3, 3, 3, 3, 3, 1}),
             boost::test_tools::per_element());
  BOOST_TEST(positions == (std::vector<std::int64_t>{0, 1, 2, 0, 1, 2, 0}),
             boost::test_tools::per_element());
  BOOST_TEST(steps_at_end == (std::vector<std::int64_t>{1, 2, 3}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(short_window_gradient_equals_one_batch_of_its_size) {
  RecordedRun run(TrainerOptions().accumulate_grad_batches(3));
  auto batches = make_batches(4, 5);
  std::vector<at::Tensor> last_gradients;
  std::vector<at::Tensor> weights_before_last;
  run.trainer.on(Event::StepStart, [&](State& s) {
    if (s.step == 1) weights_before_last = snapshot(*s.model);
  });
  run.trainer.on(Event::BeforeOptimizerStep, [&](State& s) {
    last_gradients.clear();
    for (const auto& p : s.model->parameters()) last_gradients.push_back(p.grad().clone());
  });
  run.trainer.fit(batches);
  // The window of one batch: its gradient is that batch's full (unscaled) gradient.
  auto reference = make_model();
  {
    torch::NoGradGuard no_grad;
    auto params = reference->parameters();
    for (std::size_t i = 0; i < params.size(); ++i) params[i].copy_(weights_before_last[i]);
  }
  cross_entropy(reference->forward(batches[3].data), batches[3].target).backward();
  const auto params = reference->parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    BOOST_TEST(torch::allclose(last_gradients[i], params[i].grad(), 1e-6, 1e-7));
  }
}

BOOST_AUTO_TEST_CASE(max_steps_reached_mid_epoch) {
  RecordedRun run(TrainerOptions().max_epochs(5).max_steps(2).val_every_n_epochs(0));
  auto batches = make_batches(5, 4);
  run.trainer.fit(batches);
  BOOST_TEST(run.events() ==
             join({"ActionStart EpochStart", step(1), step(1), "EpochEnd ActionEnd"}));
  BOOST_TEST(run.trainer.state().step == 2);
}

BOOST_AUTO_TEST_CASE(validation_every_second_epoch) {
  RecordedRun run(TrainerOptions().max_epochs(4).val_every_n_epochs(2));
  auto train = make_batches(2, 4);
  auto validation = make_batches(3, 4, 4, 3, 99);
  run.trainer.fit(train, validation);
  const auto plain = join({"EpochStart", step(1), step(1), "EpochEnd"});
  const auto validated = join({"EpochStart", step(1), step(1), evaluation(3), "EpochEnd"});
  BOOST_TEST(run.events() ==
             join({"ActionStart", plain, validated, plain, validated, "ActionEnd"}));
  const auto& val_loss = run.trainer.state().metrics.series("val_loss");
  BOOST_TEST(val_loss.size() == 2u);
  BOOST_TEST(val_loss[0].epoch == 1);
  BOOST_TEST(val_loss[1].epoch == 3);
}

BOOST_AUTO_TEST_CASE(validation_every_n_steps) {
  RecordedRun run(TrainerOptions().max_epochs(1).val_every_n_epochs(0).val_every_n_steps(2));
  auto train = make_batches(4, 4);
  auto validation = make_batches(1, 4, 4, 3, 99);
  run.trainer.fit(train, validation);
  BOOST_TEST(run.events() == join({"ActionStart EpochStart", step(1), step(1), evaluation(1),
                                   step(1), step(1), evaluation(1), "EpochEnd ActionEnd"}));
}

// A val_every_n_steps validation after an epoch's last step is that epoch's validation: the same
// weights are validated once (Lightning's training_epoch_loop.py decides once per batch, in
// `_should_check_val_fx`). Epochs of 3 steps, every second step: after 2, 3 (the epoch's), 4, 6.
BOOST_AUTO_TEST_CASE(a_step_validation_after_an_epochs_last_step_is_the_epochs_validation) {
  RecordedRun run(TrainerOptions().max_epochs(2).val_every_n_steps(2));
  auto train = make_batches(3, 4);
  auto validation = make_batches(1, 4, 4, 3, 99);
  run.trainer.fit(train, validation);
  BOOST_TEST(run.events() ==
             join({"ActionStart EpochStart", step(1), step(1), evaluation(1), step(1),
                   evaluation(1), "EpochEnd EpochStart", step(1), evaluation(1), step(1), step(1),
                   evaluation(1), "EpochEnd ActionEnd"}));
  std::vector<std::int64_t> validated;
  for (const auto& point : run.trainer.state().metrics.series("val_loss")) {
    validated.push_back(point.step);
  }
  BOOST_TEST(validated == (std::vector<std::int64_t>{2, 3, 4, 6}),
             boost::test_tools::per_element());
}

// val_every_epoch_fraction as Lightning's float val_check_interval (loops/fit_loop.py:317-318,
// training_epoch_loop.py:560): 5 batches and 0.4 validate after batches 2 and 4, then at the
// epoch's end; 0.5 after batch 2 (int(2.5)) and 4, and at the end.
BOOST_AUTO_TEST_CASE(validation_every_fraction_of_an_epoch) {
  auto train = make_batches(5, 4);
  auto validation = make_batches(1, 4, 4, 3, 99);
  for (const double fraction : {0.4, 0.5}) {
    RecordedRun run(TrainerOptions().max_epochs(1).val_every_epoch_fraction(fraction));
    run.trainer.fit(train, validation);
    BOOST_TEST(run.events() ==
                   join({"ActionStart EpochStart", step(1), step(1), evaluation(1), step(1),
                         step(1), evaluation(1), step(1), evaluation(1), "EpochEnd ActionEnd"}),
               fraction);
  }
  // A fraction whose interval divides the epoch: the last is the epoch's validation (once). With
  // two batches a step, the validation follows the step that trains the batch due: 2 (step 1), 4
  // (step 2), then the epoch's end after step 3.
  RecordedRun quarter(TrainerOptions().max_epochs(1).val_every_epoch_fraction(0.25));
  auto eight = make_batches(8, 4);
  quarter.trainer.fit(eight, validation);
  BOOST_TEST(quarter.trainer.state().metrics.series("val_loss").size() == 4u);
  RecordedRun windows(
      TrainerOptions().max_epochs(1).accumulate_grad_batches(2).val_every_epoch_fraction(0.4));
  windows.trainer.fit(train, validation);
  std::vector<std::int64_t> validated;
  for (const auto& point : windows.trainer.state().metrics.series("val_loss")) {
    validated.push_back(point.step);
  }
  BOOST_TEST(validated == (std::vector<std::int64_t>{1, 2, 3}), boost::test_tools::per_element());
}

// max_steps ending the epoch right after a step's validation: the epoch's would see its weights.
BOOST_AUTO_TEST_CASE(max_steps_after_a_step_validation_validates_once) {
  RecordedRun run(TrainerOptions().max_epochs(1).max_steps(2).val_every_n_steps(2));
  auto train = make_batches(4, 4);
  auto validation = make_batches(1, 4, 4, 3, 99);
  run.trainer.fit(train, validation);
  BOOST_TEST(run.events() == join({"ActionStart EpochStart", step(1), step(1), evaluation(1),
                                   "EpochEnd ActionEnd"}));
}

// Checkpointed after the validation of an epoch's last step, a resume ends that epoch without
// validating it again, as the uninterrupted run did.
BOOST_AUTO_TEST_CASE(a_resume_after_the_validation_of_an_epochs_last_step_does_not_repeat_it) {
  BOOST_TEST(resumed_after_saving_in_a_validation(Event::EvalEnd) ==
             join({"ActionStart EpochStart EpochEnd EpochStart", step(1), step(1), evaluation(1),
                   step(1), step(1), evaluation(1), "EpochEnd ActionEnd"}));
}

// A checkpoint taken inside that validation, before its EvalEnd, does not count it: the resume
// validates those weights (at the epoch's end), as the uninterrupted run did after the step.
BOOST_AUTO_TEST_CASE(a_resume_from_inside_the_validation_of_an_epochs_last_step_runs_it) {
  BOOST_TEST(resumed_after_saving_in_a_validation(Event::EvalBatchEnd) ==
             join({"ActionStart EpochStart", evaluation(1), "EpochEnd EpochStart", step(1), step(1),
                   evaluation(1), step(1), step(1), evaluation(1), "EpochEnd ActionEnd"}));
}

// The end of an epoch cut short by max_steps (its loss mean, its validation) is run again when a
// resume continues the epoch; what it recorded before is dropped, so the history is the
// uninterrupted run's.
BOOST_AUTO_TEST_CASE(a_resume_continuing_an_epoch_cut_short_records_its_end_once) {
  BOOST_TEST(resumed_after_max_steps(2) ==
             join({"ActionStart EpochStart", step(1), step(1), evaluation(1), "EpochEnd EpochStart",
                   step(1), step(1), step(1), step(1), evaluation(1), "EpochEnd ActionEnd"}));
}

// Cut short at its last batch, the continued epoch makes no step: its end validates the weights
// again all the same, since the validation the cut-short end ran was dropped.
BOOST_AUTO_TEST_CASE(a_resume_of_an_epoch_cut_short_at_its_last_batch_validates_it_again) {
  BOOST_TEST(resumed_after_max_steps(4) ==
             join({"ActionStart EpochStart", evaluation(1), "EpochEnd EpochStart", step(1), step(1),
                   step(1), step(1), evaluation(1), "EpochEnd ActionEnd"}));
}

// Only what the cut-short fit recorded from its epoch's end on is dropped: an evaluate() after it
// and the resumed run's ActionStart subscribers record points that stay.
BOOST_AUTO_TEST_CASE(a_resume_keeps_points_recorded_outside_the_cut_short_end) {
  const TempDir dir("protocol");
  const auto file = dir.path / "evaluated.tbckpt";
  const auto options = TrainerOptions().max_epochs(2).seed(3);
  auto train = make_batches(4, 4);
  auto test = make_batches(1, 4, 4, 3, 99);
  RecordedRun whole(options);
  whole.trainer.fit(train);
  {
    RecordedRun first(TrainerOptions(options).max_steps(2));
    first.trainer.fit(train);
    first.trainer.evaluate(test);
    first.trainer.save_checkpoint(file);
  }
  RecordedRun resumed(options);
  resumed.trainer.on(Event::ActionStart, [](State& s) { s.record_metric("resumed", 1.0); });
  resumed.trainer.resume_from(file);
  resumed.trainer.fit(train);
  const auto& metrics = resumed.trainer.state().metrics;
  BOOST_TEST(metrics.length("val_loss") == 1u);  // the evaluate()'s, at step 2
  BOOST_TEST(metrics.latest("val_loss").step == 2);
  BOOST_TEST(metrics.length("resumed") == 1u);
  check_same_series(whole.trainer.state().metrics, metrics, "train_loss_epoch");
}

BOOST_AUTO_TEST_CASE(cancel_batch_skips_backward_of_that_batch_only) {
  RecordedRun run{TrainerOptions()};
  std::vector<bool> cancelled_at_end;
  run.trainer.on(Event::BatchStart, [](State& s) {
    if (s.global_batch == 1) throw CancelBatch();
  });
  run.trainer.on(Event::BatchEnd, [&](State& s) { cancelled_at_end.push_back(s.cancelled); });
  auto batches = make_batches(3, 4);
  run.trainer.fit(batches);
  // A step whose only batch was cancelled makes no update: no optimizer events, no step counted.
  BOOST_TEST(run.events() ==
             join({"ActionStart EpochStart", step(1), "StepStart BatchStart BatchEnd StepEnd",
                   step(1), "EpochEnd ActionEnd"}));
  BOOST_TEST(cancelled_at_end == (std::vector<bool>{false, true, false}),
             boost::test_tools::per_element());
  BOOST_TEST(run.trainer.state().step == 2);
}

BOOST_AUTO_TEST_CASE(filtered_step_end_ignores_a_step_without_update) {
  RecordedRun run{TrainerOptions()};
  std::vector<std::int64_t> every_step;
  run.trainer.on(Event::BatchStart, [](State& s) {
    if (s.global_batch == 0) throw CancelBatch();
  });
  run.trainer.on(Event::StepEnd, every(1), [&](State& s) { every_step.push_back(s.step); });
  auto batches = make_batches(3, 4);
  run.trainer.fit(batches);
  BOOST_TEST(every_step == (std::vector<std::int64_t>{1, 2}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(skip_update_discards_the_step_and_keeps_the_weights) {
  RecordedRun run{TrainerOptions()};
  std::vector<at::Tensor> before, after;
  std::vector<bool> skipped;
  run.trainer.on(Event::StepStart, [&](State& s) {
    if (s.global_batch == 1) before = snapshot(*s.model);
  });
  run.trainer.on(Event::BeforeOptimizerStep, [](State& s) {
    if (s.global_batch == 1) s.skip_update = true;  // the second window's (only) batch
  });
  run.trainer.on(Event::StepEnd, [&](State& s) {
    skipped.push_back(s.update_skipped);
    if (s.global_batch == 2) after = snapshot(*s.model);
  });
  auto batches = make_batches(3, 4);
  run.trainer.fit(batches);
  BOOST_TEST(run.events() ==
             join({"ActionStart EpochStart", step(1),
                   "StepStart BatchStart BeforeBackward AfterBackward BeforeOptimizerStep BatchEnd "
                   "StepEnd",
                   step(1), "EpochEnd ActionEnd"}));
  BOOST_TEST(skipped == (std::vector<bool>{false, true, false}), boost::test_tools::per_element());
  for (std::size_t i = 0; i < before.size(); ++i) BOOST_TEST(torch::equal(before[i], after[i]));
  BOOST_TEST(run.trainer.state().step == 2);
  // The discarded gradients do not leak into the next step.
  BOOST_TEST(run.trainer.state().metrics.series("train_loss").size() == 2u);
}

BOOST_AUTO_TEST_CASE(cancel_batch_inside_a_window_keeps_the_other_batches) {
  RecordedRun run(TrainerOptions().accumulate_grad_batches(2));
  run.trainer.set_train_step([](Trainer& trainer, Batch& batch) {
    if (trainer.state().global_batch == 0) throw CancelBatch();
    return cross_entropy(trainer.forward(batch.data), batch.target);
  });
  auto batches = make_batches(2, 4);
  run.trainer.fit(batches);
  BOOST_TEST(run.events() == join({"ActionStart EpochStart StepStart BatchStart BatchEnd",
                                   updating_batch(), "StepEnd EpochEnd ActionEnd"}));
}

BOOST_AUTO_TEST_CASE(stop_training_thrown_from_step_end) {
  RecordedRun run(TrainerOptions().max_epochs(3));
  int later_subscriber_calls = 0;
  run.trainer.on(Event::StepEnd, [](State& s) {
    if (s.step == 2) throw StopTraining("enough");
  });
  run.trainer.on(
      Event::StepEnd, [&](State&) { ++later_subscriber_calls; }, 5);
  auto batches = make_batches(4, 4);
  auto validation = make_batches(1, 4);
  run.trainer.fit(batches, validation);
  BOOST_TEST(run.events() ==
             join({"ActionStart EpochStart", step(1), step(1), "EpochEnd ActionEnd"}));
  BOOST_TEST(run.trainer.state().stop_reason() == "enough");
  BOOST_TEST(later_subscriber_calls == 2);  // the other subscribers of StepEnd still ran
}

BOOST_AUTO_TEST_CASE(request_stop_mid_window_finishes_the_window) {
  RecordedRun run(TrainerOptions().accumulate_grad_batches(3));
  run.trainer.on(Event::BatchEnd, [](State& s) {
    if (s.global_batch == 3) s.request_stop("requested");
  });
  auto batches = make_batches(9, 4);
  run.trainer.fit(batches);
  BOOST_TEST(run.events() ==
             join({"ActionStart EpochStart", step(3), step(3), "EpochEnd ActionEnd"}));
  BOOST_TEST(run.trainer.state().step == 2);
}

BOOST_AUTO_TEST_CASE(stop_requested_at_epoch_start_ends_without_batches) {
  RecordedRun run(TrainerOptions().max_epochs(3));
  run.trainer.on(Event::EpochStart, [](State& s) {
    if (s.epoch == 1) s.request_stop("stop before epoch 2");
  });
  auto batches = make_batches(2, 4);
  run.trainer.fit(batches);
  BOOST_TEST(run.events() == join({"ActionStart EpochStart", step(1), step(1),
                                   "EpochEnd EpochStart EpochEnd ActionEnd"}));
}

BOOST_AUTO_TEST_CASE(all_evaluation_batches_cancelled) {
  RecordedRun run{TrainerOptions()};
  run.trainer.on(Event::EvalBatchStart, [](State&) { throw CancelBatch(); });
  auto data = make_batches(2, 4);
  BOOST_TEST(std::isnan(run.trainer.evaluate(data)));
  BOOST_TEST(run.events() == join({"ActionStart EvalStart EvalBatchStart EvalBatchEnd "
                                   "EvalBatchStart EvalBatchEnd EvalEnd ActionEnd"}));
}

BOOST_AUTO_TEST_CASE(fit_from_inside_a_subscriber_is_refused) {
  RecordedRun run{TrainerOptions()};
  auto batches = make_batches(1, 4);
  std::int64_t step_after_refusal = -1;
  auto nested = run.trainer.on(Event::StepEnd, [&](State& s) {
    BOOST_CHECK_THROW(run.trainer.fit(batches), ConfigError);
    step_after_refusal = s.step;  // the refused fit() left the running one untouched
  });
  run.trainer.fit(batches);
  BOOST_TEST(step_after_refusal == 1);
  nested.disconnect();
  BOOST_CHECK_NO_THROW(run.trainer.fit(batches));  // the trainer is usable again afterwards
  BOOST_TEST(run.trainer.state().step == 1);
}

BOOST_AUTO_TEST_CASE(exception_from_batch_end_fires_exception_then_pending_ends) {
  RecordedRun run{TrainerOptions()};
  int exceptions = 0;
  std::string message_seen;
  run.trainer.on(Event::BatchEnd, [](State& s) {
    if (s.global_batch == 1) throw std::runtime_error("logger failed");
  });
  run.trainer.on(Event::Exception, [&](State& s) {
    ++exceptions;
    message_seen = s.error_message;
    throw std::runtime_error("a failing Exception handler is logged, not recursed into");
  });
  auto batches = make_batches(3, 4);
  BOOST_CHECK_EXCEPTION(run.trainer.fit(batches), std::runtime_error, [](const auto& error) {
    return std::string(error.what()) == "logger failed";
  });
  BOOST_TEST(exceptions == 1);
  BOOST_TEST(message_seen == "logger failed");
  BOOST_TEST(run.events() == join({"ActionStart EpochStart", step(1), "StepStart", updating_batch(),
                                   "Exception StepEnd EpochEnd ActionEnd"}));
  BOOST_TEST(static_cast<bool>(run.trainer.state().error));
}

BOOST_AUTO_TEST_CASE(exception_from_the_train_step) {
  RecordedRun run{TrainerOptions()};
  run.trainer.set_train_step([](Trainer& trainer, Batch& batch) -> at::Tensor {
    if (trainer.state().global_batch == 1) throw std::logic_error("step broke");
    return cross_entropy(trainer.forward(batch.data), batch.target);
  });
  auto batches = make_batches(3, 4);
  BOOST_CHECK_THROW(run.trainer.fit(batches), std::logic_error);
  BOOST_TEST(run.events() == join({"ActionStart EpochStart", step(1),
                                   "StepStart BatchStart Exception BatchEnd StepEnd EpochEnd "
                                   "ActionEnd"}));
}

BOOST_AUTO_TEST_CASE(evaluate_alone_is_an_action) {
  RecordedRun run{TrainerOptions()};
  auto data = make_batches(2, 5);
  const double loss = run.trainer.evaluate(data);
  BOOST_TEST(run.events() == join({"ActionStart", evaluation(2), "ActionEnd"}));
  torch::NoGradGuard no_grad;
  double expected = 0.0;
  for (const auto& b : data)
    expected += cross_entropy(run.model->forward(b.data), b.target).item<double>();
  BOOST_TEST(loss == expected / 2, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(run.model->is_training());  // mode restored after evaluation
}

// The counters State shows are the loops', written before each emission: a subscriber that
// overwrites them (here the last one of every event) changes neither what the next event's
// subscribers read, nor how many batches an evaluation runs, nor the metrics' step numbers, nor
// the weights, nor what a checkpoint keeps.
BOOST_AUTO_TEST_CASE(counters_a_subscriber_overwrites_change_nothing) {
  TempDir dir("counters");
  struct Outcome {
    std::vector<std::string> seen;
    std::vector<std::int64_t> loss_steps;
    std::vector<std::int64_t> val_loss_steps;
    std::vector<at::Tensor> weights;
    Checkpoint position;
  };
  const auto run_once = [&](bool overwrite) {
    RecordedRun run(TrainerOptions().max_epochs(2).accumulate_grad_batches(2));
    Outcome outcome;
    for (std::size_t i = 0; i < kEventCount; ++i) {
      const auto event = static_cast<Event>(i);
      run.trainer.on(event, [&, event](State& s) {
        outcome.seen.push_back(torchbus::detail::concat(
            to_string(event), ' ', s.epoch, ' ', s.step, ' ', s.batch_in_epoch, ' ', s.global_batch,
            ' ', s.window_position, ' ', s.eval_batch, ' ', s.window_size, ' ',
            s.optimizer_phase_step));
      });
      if (!overwrite) continue;
      run.trainer.on(
          event,
          [](State& s) {
            s.epoch = 99;
            s.step = 1000;
            s.batch_in_epoch = -1;
            s.global_batch = 12345;
            s.window_position = 7;
            s.eval_batch = 1000;
            s.window_size = 50;
            s.optimizer_phase_step = 3000;
          },
          1000);
    }
    auto batches = make_batches(5, 4);
    auto validation = make_batches(3, 4, 4, 3, 11);
    run.trainer.fit(batches, validation);
    for (const auto& point : run.trainer.state().metrics.series("train_loss")) {
      outcome.loss_steps.push_back(point.step);
    }
    for (const auto& point : run.trainer.state().metrics.series("val_loss")) {
      outcome.val_loss_steps.push_back(point.step);
    }
    outcome.weights = snapshot(*run.model);
    const auto path = dir.path / (overwrite ? "overwritten.tbckpt" : "plain.tbckpt");
    run.trainer.save_checkpoint(path);
    outcome.position = read_checkpoint_position(path);
    return outcome;
  };
  const auto plain = run_once(false);
  const auto overwritten = run_once(true);
  BOOST_TEST(overwritten.seen == plain.seen, boost::test_tools::per_element());
  BOOST_TEST(overwritten.loss_steps == plain.loss_steps, boost::test_tools::per_element());
  BOOST_TEST(plain.loss_steps == (std::vector<std::int64_t>{1, 2, 3, 4, 5, 6}),
             boost::test_tools::per_element());
  BOOST_TEST(overwritten.val_loss_steps == plain.val_loss_steps, boost::test_tools::per_element());
  BOOST_TEST(plain.val_loss_steps == (std::vector<std::int64_t>{3, 6}),
             boost::test_tools::per_element());
  // Every evaluation ran its 3 batches: its EvalEnd shows eval_batch (the 7th field) 3.
  const auto full_evaluations =
      std::count_if(overwritten.seen.begin(), overwritten.seen.end(), [](const std::string& line) {
        std::istringstream fields(line);
        std::string event, value;
        fields >> event;
        for (int i = 0; i < 6; ++i) fields >> value;
        return event == "EvalEnd" && value == "3";
      });
  BOOST_TEST(full_evaluations == 2);
  BOOST_TEST(all_equal(overwritten.weights, plain.weights));
  BOOST_TEST(overwritten.position.step == 6);
  BOOST_TEST(overwritten.position.epoch == plain.position.epoch);
  BOOST_TEST(overwritten.position.batch_in_epoch == plain.position.batch_in_epoch);
}

BOOST_AUTO_TEST_CASE(metrics_record_train_loss_per_step_and_epoch) {
  RecordedRun run(TrainerOptions().max_epochs(2).accumulate_grad_batches(2));
  auto batches = make_batches(4, 4);
  auto validation = make_batches(1, 4);
  std::vector<double> step_losses;
  run.trainer.on(Event::StepEnd, [&](State& s) {
    step_losses.push_back(s.tensors.get("step_loss").item<double>());
  });
  run.trainer.fit(batches, validation);
  const auto& metrics = run.trainer.state().metrics;
  const auto& per_step = metrics.series("train_loss");
  BOOST_TEST(per_step.size() == 4u);
  for (std::size_t i = 0; i < per_step.size(); ++i) {
    BOOST_TEST(per_step[i].step == static_cast<std::int64_t>(i + 1));
    BOOST_TEST(per_step[i].value == step_losses[i]);
  }
  const auto& per_epoch = metrics.series("train_loss_epoch");
  BOOST_TEST(per_epoch.size() == 2u);
  BOOST_TEST(per_epoch[1].value == (step_losses[2] + step_losses[3]) / 2,
             boost::test_tools::tolerance(1e-12));
  BOOST_TEST(metrics.series("val_loss").size() == 2u);
}

BOOST_AUTO_TEST_CASE(tensor_store_scopes_follow_the_loop) {
  RecordedRun run{TrainerOptions()};
  std::vector<std::string> seen;
  run.trainer.on(Event::BatchStart,
                 [](State& s) { s.tensors.set("kept", torch::ones({1}), Scope::Epoch); });
  run.trainer.on(Event::BeforeBackward, [&](State& s) {
    seen.push_back(s.tensors.contains("output") && s.tensors.contains("target") ? "batch" : "-");
  });
  run.trainer.on(Event::StepStart, [&](State& s) {
    seen.push_back(s.tensors.contains("output") ? "leak" : "clean");
  });
  run.trainer.on(Event::EpochEnd,
                 [&](State& s) { seen.push_back(s.tensors.contains("kept") ? "epoch" : "-"); });
  auto batches = make_batches(2, 4);
  run.trainer.fit(batches);
  BOOST_TEST(seen == (std::vector<std::string>{"clean", "batch", "clean", "batch", "epoch"}),
             boost::test_tools::per_element());
  BOOST_TEST(!run.trainer.state().tensors.contains("kept"));
}

BOOST_AUTO_TEST_CASE(exception_from_step_start_still_gets_its_step_end_then_pending_ends) {
  RecordedRun run(TrainerOptions().accumulate_grad_batches(2));
  ErrorWatch watch(run.trainer);
  run.trainer.on(Event::StepStart, [](State& s) {
    if (s.step == 1) throw std::runtime_error("step start failed");
  });
  auto batches = make_batches(4, 4);
  expect_rethrown([&] { run.trainer.fit(batches); }, "step start failed");
  // No batch of the failed step runs: its StepStart is answered by its StepEnd alone.
  BOOST_TEST(run.events() == join({"ActionStart EpochStart", step(2),
                                   "StepStart Exception StepEnd EpochEnd ActionEnd"}));
  BOOST_TEST(watch.exceptions == 1);
  const std::vector<std::string> expected{
      "BatchEnd:-",
      "BatchEnd:-",
      "StepEnd:-",
      "Exception:step start failed",
      "StepEnd:step start failed",
      "EpochEnd:step start failed",
      "ActionEnd:step start failed",
  };
  BOOST_TEST(watch.seen == expected, boost::test_tools::per_element());
  BOOST_TEST(run.trainer.state().step == 1);
  BOOST_TEST(run.trainer.state().global_batch == 2);
}

BOOST_AUTO_TEST_CASE(exception_from_step_end_fires_exception_then_epoch_and_action_end) {
  // Validation is due after every step; the failed StepEnd skips it.
  RecordedRun run(TrainerOptions().max_epochs(2).val_every_n_steps(1).val_every_n_epochs(0));
  ErrorWatch watch(run.trainer);
  run.trainer.on(Event::StepEnd, [](State& s) {
    if (s.step == 2) throw std::runtime_error("step end failed");
  });
  auto batches = make_batches(3, 4);
  auto validation = make_batches(1, 4, 4, 3, 99);
  expect_rethrown([&] { run.trainer.fit(batches, validation); }, "step end failed");
  BOOST_TEST(run.events() == join({"ActionStart EpochStart", step(1), evaluation(1), step(1),
                                   "Exception EpochEnd ActionEnd"}));
  BOOST_TEST(watch.exceptions == 1);
  BOOST_TEST(error_set_from_exception_on(watch.seen));
  BOOST_TEST(run.trainer.state().step == 2);
}

BOOST_AUTO_TEST_CASE(exception_from_batch_end_mid_window_ends_the_step_without_an_update) {
  RecordedRun run(TrainerOptions().accumulate_grad_batches(3));
  ErrorWatch watch(run.trainer);
  run.trainer.on(Event::BatchEnd, [](State& s) {
    if (s.window_position == 1) throw std::runtime_error("batch end failed");
  });
  const auto before = snapshot(*run.model);
  auto batches = make_batches(6, 4);
  expect_rethrown([&] { run.trainer.fit(batches); }, "batch end failed");
  // The window's third batch does not run, and the accumulated gradients are not applied.
  BOOST_TEST(run.events() == join({"ActionStart EpochStart StepStart", batch(), batch(),
                                   "Exception StepEnd EpochEnd ActionEnd"}));
  BOOST_TEST(watch.exceptions == 1);
  BOOST_TEST(error_set_from_exception_on(watch.seen));
  BOOST_TEST(run.trainer.state().step == 0);
  const auto after = snapshot(*run.model);
  for (std::size_t i = 0; i < before.size(); ++i) BOOST_TEST(torch::equal(before[i], after[i]));
}

BOOST_AUTO_TEST_CASE(exception_from_epoch_end_fires_exception_then_action_end_only) {
  RecordedRun run(TrainerOptions().max_epochs(3));
  ErrorWatch watch(run.trainer);
  run.trainer.on(Event::EpochEnd, [](State&) { throw std::runtime_error("epoch end failed"); });
  auto batches = make_batches(2, 4);
  expect_rethrown([&] { run.trainer.fit(batches); }, "epoch end failed");
  BOOST_TEST(run.events() ==
             join({"ActionStart EpochStart", step(1), step(1), "EpochEnd Exception ActionEnd"}));
  BOOST_TEST(watch.exceptions == 1);
  const std::vector<std::string> expected{"BatchEnd:-",
                                          "StepEnd:-",
                                          "BatchEnd:-",
                                          "StepEnd:-",
                                          "EpochEnd:-",
                                          "Exception:epoch end failed",
                                          "ActionEnd:epoch end failed"};
  BOOST_TEST(watch.seen == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(exception_from_action_end_fires_exception_once_and_no_end_again) {
  RecordedRun run{TrainerOptions()};
  ErrorWatch watch(run.trainer);
  auto failing = run.trainer.on(Event::ActionEnd,
                                [](State&) { throw std::runtime_error("action end failed"); });
  auto batches = make_batches(1, 4);
  expect_rethrown([&] { run.trainer.fit(batches); }, "action end failed");
  // Every End was emitted once already: only Exception follows.
  BOOST_TEST(run.events() ==
             join({"ActionStart EpochStart", step(1), "EpochEnd ActionEnd Exception"}));
  BOOST_TEST(watch.exceptions == 1);
  const std::vector<std::string> expected{"BatchEnd:-", "StepEnd:-", "EpochEnd:-", "ActionEnd:-",
                                          "Exception:action end failed"};
  BOOST_TEST(watch.seen == expected, boost::test_tools::per_element());
  // The trainer is idle again, and the next fit starts without the old error.
  failing.disconnect();
  run.recorder->events.clear();
  run.trainer.fit(batches);
  BOOST_TEST(run.events() == join({"ActionStart EpochStart", step(1), "EpochEnd ActionEnd"}));
  BOOST_TEST(!run.trainer.state().error);
}

BOOST_AUTO_TEST_CASE(subscribers_throwing_during_exception_or_pending_ends_are_logged_only) {
  RecordedRun run{TrainerOptions()};
  std::vector<std::string> later;
  run.trainer.on(Event::BatchStart, [](State&) { throw std::runtime_error("batch start failed"); });
  run.trainer.on(Event::Exception, [](State&) { throw std::runtime_error("exception handler"); });
  run.trainer.on(Event::Exception, [&](State&) { later.emplace_back("Exception"); });
  run.trainer.on(Event::StepEnd, [](State&) { throw StopTraining("ignored"); });
  run.trainer.on(Event::StepEnd, [](State&) { throw std::runtime_error("step end handler"); });
  run.trainer.on(Event::StepEnd, [&](State&) { later.emplace_back("StepEnd"); });
  run.trainer.on(Event::BatchEnd, [](State&) { throw CancelBatch(); });
  auto batches = make_batches(2, 4);
  CapturedLog log;
  expect_rethrown([&] { run.trainer.fit(batches); }, "batch start failed");
  BOOST_TEST(run.events() ==
             "ActionStart EpochStart StepStart BatchStart Exception BatchEnd "
             "StepEnd EpochEnd ActionEnd");
  // The other subscribers of each event still ran, each once.
  BOOST_TEST(later == (std::vector<std::string>{"Exception", "StepEnd"}),
             boost::test_tools::per_element());
  const std::vector<std::string> logged{
      "a subscriber threw during a guarded emission: exception handler",
      "a subscriber threw during a guarded emission: step end handler",
  };
  BOOST_TEST(log.messages("error", "a subscriber threw") == logged,
             boost::test_tools::per_element());
  BOOST_TEST(!run.trainer.state().stop_requested());
}

BOOST_AUTO_TEST_CASE(a_logger_that_throws_is_disabled_and_the_fit_completes) {
  RecordedRun run(TrainerOptions().max_epochs(2));
  int tracker_calls = 0;
  run.trainer.on(
      Event::StepEnd | Event::EpochEnd,
      [&](State& s) {
        ++tracker_calls;
        if (s.step == 2) throw std::runtime_error("tracker unreachable");
      },
      with_role(Role::Logger).named("tracker"));
  auto batches = make_batches(3, 4);
  CapturedLog log;
  run.trainer.fit(batches);
  // Both epochs ran to their end, without an Exception; the tracker was called until it threw.
  BOOST_TEST(run.events() ==
             join({"ActionStart", "EpochStart", step(1), step(1), step(1), "EpochEnd", "EpochStart",
                   step(1), step(1), step(1), "EpochEnd", "ActionEnd"}));
  BOOST_TEST(run.trainer.state().step == 6);
  BOOST_TEST(tracker_calls == 2);
  const auto& failures = run.trainer.bus().subscriber_failures();
  BOOST_TEST_REQUIRE(failures.size() == 1u);
  BOOST_TEST(failures[0].subscriber == "tracker");
  BOOST_TEST(failures[0].disabled);
  BOOST_TEST(log.messages("error", "tracker threw during StepEnd and is disabled").size() == 1u);
  const std::vector<std::string> summary{
      "fit() completed without 1 disabled subscriber(s) after they threw: tracker (1 failure, "
      "first during StepEnd: tracker unreachable)"};
  BOOST_TEST(log.messages("warning", "fit() completed") == summary,
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(exception_from_eval_batch_start_during_fit_ends_evaluation_epoch_and_action) {
  check_failed_validation_in_fit(EvalFailure::EvalBatchStart);
}

BOOST_AUTO_TEST_CASE(exception_from_the_eval_step_during_fit_ends_evaluation_epoch_and_action) {
  check_failed_validation_in_fit(EvalFailure::EvalStep);
}

BOOST_AUTO_TEST_CASE(exception_from_eval_end_during_fit_ends_epoch_and_action) {
  check_failed_validation_in_fit(EvalFailure::EvalEnd);
}

BOOST_AUTO_TEST_CASE(exception_from_eval_batch_start_in_evaluate_ends_evaluation_and_action) {
  check_failed_evaluate(EvalFailure::EvalBatchStart);
}

BOOST_AUTO_TEST_CASE(exception_from_the_eval_step_in_evaluate_ends_evaluation_and_action) {
  check_failed_evaluate(EvalFailure::EvalStep);
}

BOOST_AUTO_TEST_CASE(exception_from_eval_end_in_evaluate_ends_the_action) {
  check_failed_evaluate(EvalFailure::EvalEnd);
}

BOOST_AUTO_TEST_SUITE_END()
