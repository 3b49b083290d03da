// Ending an epoch early: state.request_epoch_end(reason) and CancelEpoch (docs/events.md).

#include <boost/test/unit_test.hpp>
#include <support/event_sequence.hpp>
#include <support/scratch.hpp>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

/// What State says about an epoch end at each EpochStart and EpochEnd: "<event>:<reason>", with
/// "-" when no epoch end was requested.
struct EpochEndWatch {
  std::vector<std::string> seen;

  explicit EpochEndWatch(Trainer& trainer) {
    for (const Event event : {Event::EpochStart, Event::EpochEnd}) {
      trainer.on(
          event,
          [this, event](State& s) {
            seen.push_back(std::string(to_string(event)) + ":" +
                           (s.epoch_end_requested() ? s.epoch_end_reason() : "-"));
          },
          -10);  // before the subscribers that request
    }
  }
};

/// The gradients of `model` with `weights` for the mean loss over `batches` (of equal size).
std::vector<at::Tensor> mean_gradients(const std::vector<at::Tensor>& weights,
                                       const std::vector<Batch>& batches) {
  auto reference = make_model();
  auto parameters = reference->parameters();
  {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < parameters.size(); ++i) parameters[i].copy_(weights[i]);
  }
  const auto merged = merge_batches(batches, static_cast<int>(batches.size())).front();
  cross_entropy(reference->forward(merged.data), merged.target).backward();
  std::vector<at::Tensor> gradients;
  for (const auto& parameter : parameters) gradients.push_back(parameter.grad().clone());
  return gradients;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(epoch_end)

BOOST_AUTO_TEST_CASE(requested_at_step_end_validates_and_starts_the_next_epoch) {
  RecordedRun run(TrainerOptions().max_epochs(2));
  EpochEndWatch watch(run.trainer);
  run.trainer.on(Event::StepEnd, [](State& s) {
    if (s.epoch == 0 && s.step == 2) s.request_epoch_end("enough of epoch 0");
  });
  std::vector<std::int64_t> epochs_at_start;
  run.trainer.on(Event::EpochStart, [&](State& s) { epochs_at_start.push_back(s.epoch); });
  auto train = make_batches(4, 4);
  auto validation = make_batches(1, 4, 4, 3, 99);
  run.trainer.fit(train, validation);
  BOOST_TEST(run.events() ==
             join({"ActionStart EpochStart", step(1), step(1), evaluation(1), "EpochEnd EpochStart",
                   step(1), step(1), step(1), step(1), evaluation(1), "EpochEnd ActionEnd"}));
  BOOST_TEST(watch.seen == (std::vector<std::string>{"EpochStart:-", "EpochEnd:enough of epoch 0",
                                                     "EpochStart:-", "EpochEnd:-"}),
             boost::test_tools::per_element());
  BOOST_TEST(epochs_at_start == (std::vector<std::int64_t>{0, 1}),
             boost::test_tools::per_element());
  const auto& state = run.trainer.state();
  BOOST_TEST(state.epoch == 2);
  BOOST_TEST(state.step == 6);
  BOOST_TEST(state.global_batch == 6);
  BOOST_TEST(!state.epoch_end_requested());
  BOOST_TEST(!state.stop_requested());
  // The shortened epoch's train loss is the mean of its two steps.
  const auto& epoch_loss = state.metrics.series("train_loss_epoch");
  BOOST_TEST(epoch_loss.size() == 2u);
  BOOST_TEST(epoch_loss[0].epoch == 0);
  BOOST_TEST(epoch_loss[0].value == state.metrics.epoch_mean("train_loss", 0));
}

BOOST_AUTO_TEST_CASE(requested_at_batch_end_mid_window_steps_a_short_window) {
  RecordedRun run(TrainerOptions().max_epochs(2).accumulate_grad_batches(3));
  auto train = make_batches(7, 5);
  std::vector<at::Tensor> weights_before_cut, cut_gradients;
  std::vector<std::int64_t> window_sizes_at_step_end;
  run.trainer.on(Event::StepStart, [&](State& s) {
    if (s.global_batch == 3) weights_before_cut = snapshot(*s.model);
  });
  run.trainer.on(Event::BatchEnd, [](State& s) {
    if (s.global_batch == 4) s.request_epoch_end("cut");  // the second batch of the 2nd window
  });
  run.trainer.on(Event::BeforeOptimizerStep, [&](State& s) {
    if (s.global_batch != 5) return;  // counts the cut window's two batches
    cut_gradients.clear();
    for (const auto& p : s.model->parameters()) cut_gradients.push_back(p.grad().clone());
  });
  run.trainer.on(Event::StepEnd,
                 [&](State& s) { window_sizes_at_step_end.push_back(s.window_size); });
  run.trainer.fit(train);
  const std::string cut_step =
      join({"StepStart", batch(), batch(), "BeforeOptimizerStep AfterOptimizerStep StepEnd"});
  BOOST_TEST(run.events() ==
             join({"ActionStart EpochStart", step(3), cut_step, "EpochEnd EpochStart", step(3),
                   step(3), step(1), "EpochEnd ActionEnd"}));
  BOOST_TEST(window_sizes_at_step_end == (std::vector<std::int64_t>{3, 2, 3, 3, 1}),
             boost::test_tools::per_element());
  BOOST_TEST(run.trainer.state().epoch == 2);
  BOOST_TEST(run.trainer.state().step == 5);
  BOOST_TEST(run.trainer.state().global_batch == 12);  // 5 trained in epoch 0, 7 in epoch 1
  // The short window's gradient is the mean over its two batches, as one batch of both.
  const auto expected = mean_gradients(weights_before_cut, {train[3], train[4]});
  BOOST_TEST_REQUIRE(cut_gradients.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    BOOST_TEST(torch::allclose(cut_gradients[i], expected[i], 1e-5, 1e-7));
  }
  // So is its loss.
  const auto& loss = run.trainer.state().metrics.series("train_loss");
  auto reference = make_model();
  {
    torch::NoGradGuard no_grad;
    auto parameters = reference->parameters();
    for (std::size_t i = 0; i < parameters.size(); ++i) parameters[i].copy_(weights_before_cut[i]);
  }
  const auto merged = merge_batches({train[3], train[4]}, 2).front();
  const double expected_loss =
      cross_entropy(reference->forward(merged.data), merged.target).item<double>();
  BOOST_TEST(loss[1].value == expected_loss, boost::test_tools::tolerance(1e-5));
}

BOOST_AUTO_TEST_CASE(cancel_epoch_thrown_from_a_slot_finishes_the_batch) {
  RecordedRun run(TrainerOptions().max_epochs(2));
  EpochEndWatch watch(run.trainer);
  int later_subscriber_calls = 0;
  run.trainer.on(Event::BatchStart, [](State& s) {
    if (s.global_batch == 1) throw CancelEpoch("from BatchStart");
  });
  run.trainer.on(
      Event::BatchStart, [&](State&) { ++later_subscriber_calls; }, 5);
  auto train = make_batches(3, 4);
  run.trainer.fit(train);
  // The batch it was thrown in still trains; the epoch ends at its boundary.
  BOOST_TEST(run.events() ==
             join({"ActionStart EpochStart", step(1), step(1), "EpochEnd EpochStart", step(1),
                   step(1), step(1), "EpochEnd ActionEnd"}));
  BOOST_TEST(watch.seen == (std::vector<std::string>{"EpochStart:-", "EpochEnd:from BatchStart",
                                                     "EpochStart:-", "EpochEnd:-"}),
             boost::test_tools::per_element());
  BOOST_TEST(later_subscriber_calls == 5);
  BOOST_TEST(run.trainer.state().step == 5);
}

BOOST_AUTO_TEST_CASE(cancel_epoch_thrown_from_the_train_step_cancels_that_batch) {
  RecordedRun run(TrainerOptions().max_epochs(2).accumulate_grad_batches(3));
  EpochEndWatch watch(run.trainer);
  std::vector<bool> cancelled_at_batch_end;
  run.trainer.set_train_step([](Trainer& trainer, Batch& batch) {
    if (trainer.state().global_batch == 1) throw CancelEpoch("from the train step");
    return cross_entropy(trainer.forward(batch.data), batch.target);
  });
  run.trainer.on(Event::BatchEnd, [&](State& s) { cancelled_at_batch_end.push_back(s.cancelled); });
  std::vector<at::Tensor> weights_before, first_gradients;
  run.trainer.on(Event::StepStart, [&](State& s) {
    if (s.global_batch == 0) weights_before = snapshot(*s.model);
  });
  run.trainer.on(Event::BeforeOptimizerStep, [&](State& s) {
    if (s.step != 0) return;
    for (const auto& p : s.model->parameters()) first_gradients.push_back(p.grad().clone());
  });
  auto train = make_batches(3, 4);
  run.trainer.fit(train);
  BOOST_TEST(run.events() ==
             join({"ActionStart EpochStart StepStart", batch(),
                   "BatchStart BatchEnd BeforeOptimizerStep AfterOptimizerStep StepEnd "
                   "EpochEnd EpochStart",
                   step(3), "EpochEnd ActionEnd"}));
  BOOST_TEST(cancelled_at_batch_end == (std::vector<bool>{false, true, false, false, false}),
             boost::test_tools::per_element());
  BOOST_TEST(watch.seen[1] == "EpochEnd:from the train step");
  // A window of two batches, one cancelled: as a cancelled batch in a full window, it counts in
  // the window's size, so the gradient is half the first batch's.
  const auto full = mean_gradients(weights_before, {train[0]});
  BOOST_TEST_REQUIRE(first_gradients.size() == full.size());
  for (std::size_t i = 0; i < full.size(); ++i) {
    BOOST_TEST(torch::allclose(first_gradients[i], full[i] / 2.0, 1e-5, 1e-7));
  }
}

BOOST_AUTO_TEST_CASE(with_a_stop_request_the_epoch_ends_and_the_run_stops) {
  RecordedRun run(TrainerOptions().max_epochs(3).accumulate_grad_batches(3));
  EpochEndWatch watch(run.trainer);
  run.trainer.on(Event::BatchEnd, [](State& s) {
    if (s.global_batch == 1) {
      s.request_epoch_end("epoch over");
      s.request_stop("run over");
    }
  });
  auto train = make_batches(6, 4);
  auto validation = make_batches(1, 4, 4, 3, 99);
  run.trainer.fit(train, validation);
  // The window steps with two batches; a stop skips the epoch's validation.
  BOOST_TEST(run.events() ==
             join({"ActionStart EpochStart StepStart", batch(), batch(),
                   "BeforeOptimizerStep AfterOptimizerStep StepEnd EpochEnd ActionEnd"}));
  BOOST_TEST(watch.seen == (std::vector<std::string>{"EpochStart:-", "EpochEnd:epoch over"}),
             boost::test_tools::per_element());
  const auto& state = run.trainer.state();
  BOOST_TEST(state.stop_reason() == "run over");
  BOOST_TEST(state.step == 1);
  BOOST_TEST(state.epoch == 1);  // the epoch ended: a resume starts the next one
  BOOST_TEST(state.batch_in_epoch == 0);
}

BOOST_AUTO_TEST_CASE(requested_at_epoch_start_ends_the_epoch_without_batches) {
  RecordedRun run(TrainerOptions().max_epochs(3));
  run.trainer.on(Event::EpochStart, [](State& s) {
    if (s.epoch == 1) s.request_epoch_end("skip epoch 1");
  });
  auto train = make_batches(2, 4);
  auto validation = make_batches(1, 4, 4, 3, 99);
  run.trainer.fit(train, validation);
  const auto full = join({"EpochStart", step(1), step(1), evaluation(1), "EpochEnd"});
  // The empty epoch changed no weight since the last validation: it does not validate them again
  // (nor would Lightning, which validates after a batch).
  BOOST_TEST(run.events() ==
             join({"ActionStart", full, "EpochStart", "EpochEnd", full, "ActionEnd"}));
  BOOST_TEST(run.trainer.state().epoch == 3);
  BOOST_TEST(run.trainer.state().step == 4);
}

BOOST_AUTO_TEST_CASE(a_checkpoint_at_the_end_of_a_shortened_epoch_resumes_at_the_next) {
  const TempDir dir("epoch_end");
  const auto file = dir.path / "cut.tbckpt";
  Run first(TrainerOptions().max_epochs(2));
  first.trainer.on(Event::StepEnd, [](State& s) {
    if (s.step == 2) s.request_epoch_end("cut");
  });
  first.trainer.on(Event::EpochEnd, [&](State& s) {
    if (s.epoch == 0) first.trainer.save_checkpoint(file);
  });
  auto train = make_batches(4, 4);
  first.trainer.fit(train);

  RecordedRun resumed(TrainerOptions().max_epochs(2));
  std::vector<std::int64_t> position;
  resumed.trainer.on(Event::EpochStart, [&](State& s) {
    position = {s.epoch, s.step, s.batch_in_epoch};
  });
  resumed.trainer.resume_from(file);
  resumed.trainer.fit(train);
  BOOST_TEST(position == (std::vector<std::int64_t>{1, 2, 0}), boost::test_tools::per_element());
  BOOST_TEST(resumed.events() == join({"ActionStart EpochStart", step(1), step(1), step(1), step(1),
                                       "EpochEnd ActionEnd"}));
  const auto original = snapshot(*first.model);
  const auto continued = snapshot(*resumed.model);
  for (std::size_t i = 0; i < original.size(); ++i) {
    BOOST_TEST(torch::equal(original[i], continued[i]));
  }
}

BOOST_AUTO_TEST_CASE(a_request_in_evaluate_changes_nothing_and_is_forgotten) {
  RecordedRun run(TrainerOptions().max_epochs(1));
  run.trainer.on(Event::EvalBatchStart, [](State& s) {
    if (s.eval_batch == 0) throw CancelEpoch("in evaluate");
  });
  auto data = make_batches(2, 4);
  run.trainer.evaluate(data);
  BOOST_TEST(run.events() == join({"ActionStart", evaluation(2), "ActionEnd"}));
  // The next action starts without it.
  run.recorder->events.clear();
  run.trainer.fit(data);
  BOOST_TEST(run.events() ==
             join({"ActionStart EpochStart", step(1), step(1), "EpochEnd ActionEnd"}));
}

BOOST_AUTO_TEST_SUITE_END()
