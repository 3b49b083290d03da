// EMA: the average against a hand computation, evaluation with the average, exact resume.

#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <support/scratch.hpp>
#include <torchbus/callbacks/ema.hpp>

#include <stdexcept>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

/// Ten steps (two epochs of five batches), validation after each epoch.
void fit_ten_steps(Run& run) {
  run.trainer.fit(make_batches(5, 8), make_batches(2, 8, 4, 3, 99));
}

TrainerOptions two_epochs() {
  return TrainerOptions().max_epochs(2);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ema)

BOOST_AUTO_TEST_CASE(the_average_is_the_hand_computed_one_and_ends_in_the_model) {
  Run run(two_epochs());
  auto ema = std::make_shared<EMA>(EMAOptions().decay(0.9).every_n_steps(2));
  run.trainer.add(ema);
  // Weights before the first step and after every step, in double precision.
  std::vector<at::Tensor> average;
  run.trainer.on(Event::StepStart, [&](State&) {
    if (average.empty()) {
      for (const auto& p : run.model->parameters()) average.push_back(p.detach().to(at::kDouble));
    }
  });
  std::vector<at::Tensor> last_raw;
  run.trainer.on(Event::StepEnd, [&](State& state) {
    last_raw = snapshot(*run.model);
    if (state.step % 2 != 0) return;
    const auto parameters = run.model->parameters();
    for (std::size_t i = 0; i < average.size(); ++i) {
      average[i] = 0.9 * average[i] + 0.1 * parameters[i].detach().to(at::kDouble);
    }
  });
  fit_ten_steps(run);

  BOOST_TEST(ema->updates() == 5);
  BOOST_REQUIRE(ema->average().size() == average.size());
  for (std::size_t i = 0; i < average.size(); ++i) {
    const double error =
        (ema->average()[i].to(at::kDouble) - average[i]).abs().max().item<double>();
    BOOST_TEST(error < 1e-6, "tensor " << i << " off by " << error);
  }
  // apply_at_end: the model holds the average, not the last raw weights.
  const auto final_weights = snapshot(*run.model);
  for (std::size_t i = 0; i < average.size(); ++i) {
    BOOST_TEST(torch::equal(final_weights[i], ema->average()[i]));
  }
  BOOST_TEST(!all_equal(final_weights, last_raw));
}

BOOST_AUTO_TEST_CASE(validation_sees_the_average_and_training_continues_from_the_raw_weights) {
  Run run(two_epochs());
  auto ema = std::make_shared<EMA>(EMAOptions().decay(0.5).apply_at_end(false));
  run.trainer.add(ema);
  std::vector<at::Tensor> raw_at_eval_start;
  std::vector<at::Tensor> seen_in_eval;
  int checked_evaluations = 0;
  run.trainer.on(
      Event::EvalStart, [&](State&) { raw_at_eval_start = snapshot(*run.model); }, -1000);
  run.trainer.on(Event::EvalBatchStart, [&](State& state) {
    if (state.eval_batch == 0) seen_in_eval = snapshot(*run.model);
  });
  run.trainer.on(
      Event::EvalEnd,
      [&](State&) {
        BOOST_TEST(all_equal(seen_in_eval, ema->average()));
        BOOST_TEST(!all_equal(seen_in_eval, raw_at_eval_start));
        BOOST_TEST(all_equal(snapshot(*run.model), raw_at_eval_start));
        ++checked_evaluations;
      },
      1000);
  std::vector<at::Tensor> last_raw;
  run.trainer.on(Event::StepEnd, [&](State&) { last_raw = snapshot(*run.model); });
  fit_ten_steps(run);
  BOOST_TEST(checked_evaluations == 2);
  BOOST_TEST(all_equal(snapshot(*run.model), last_raw));  // apply_at_end(false)
}

BOOST_AUTO_TEST_CASE(an_exception_in_validation_leaves_the_raw_weights) {
  Run run(two_epochs());
  run.trainer.add(std::make_shared<EMA>(EMAOptions().decay(0.5)));
  std::vector<at::Tensor> raw;
  run.trainer.on(
      Event::EvalStart, [&](State&) { raw = snapshot(*run.model); }, -1000);
  run.trainer.on(Event::EvalBatchEnd, [](State&) { throw std::runtime_error("broken metric"); });
  BOOST_CHECK_THROW(fit_ten_steps(run), std::runtime_error);
  BOOST_TEST(all_equal(snapshot(*run.model), raw));
}

BOOST_AUTO_TEST_CASE(a_resume_mid_epoch_continues_the_same_average_bit_for_bit) {
  const auto folder = scratch("ema", "resume");
  const auto options = EMAOptions().decay(0.8).every_n_steps(3);
  Run whole(two_epochs());
  auto uninterrupted = std::make_shared<EMA>(options);
  whole.trainer.add(uninterrupted);
  fit_ten_steps(whole);

  Run first(two_epochs());
  first.trainer.add(std::make_shared<EMA>(options));
  first.trainer.on(
      Event::StepEnd,
      [&](State& state) {
        if (state.step == 7) {
          first.trainer.save_checkpoint(folder / "step7.tbckpt");
          throw std::runtime_error("killed");
        }
      },
      1000);
  BOOST_CHECK_THROW(fit_ten_steps(first), std::runtime_error);

  Run second(two_epochs());
  auto resumed = std::make_shared<EMA>(options);
  second.trainer.add(resumed);
  second.trainer.resume_from(folder / "step7.tbckpt");
  fit_ten_steps(second);
  BOOST_TEST(resumed->updates() == uninterrupted->updates());
  BOOST_TEST(all_equal(resumed->average(), uninterrupted->average()));
  BOOST_TEST(all_equal(snapshot(*second.model), snapshot(*whole.model)));
}

BOOST_AUTO_TEST_CASE(copy_to_writes_the_average_into_a_model_of_the_same_shape) {
  Run run(two_epochs());
  auto ema = std::make_shared<EMA>(EMAOptions().decay(0.5).apply_at_end(false));
  run.trainer.add(ema);
  fit_ten_steps(run);
  auto copy = make_model(4, 3, 42);
  ema->copy_to(*copy);
  BOOST_TEST(all_equal(snapshot(*copy), ema->average()));
  auto other = make_model(5, 3);
  const auto message = message_of<ConfigError>([&] { ema->copy_to(*other); });
  BOOST_TEST(has(message,
                 "copy_to: tensor 0 of the averages has shape [8, 4], the model's has "
                 "[8, 5]"));
}

BOOST_AUTO_TEST_CASE(evaluate_after_fit_swaps_in_the_average_and_changes_nothing_for_good) {
  Run run(two_epochs());
  auto ema = std::make_shared<EMA>(EMAOptions().decay(0.5));
  run.trainer.add(ema);
  fit_ten_steps(run);
  {
    torch::NoGradGuard no_grad;
    for (auto& parameter : run.model->parameters()) parameter.fill_(0.25);
  }
  const auto set_by_hand = snapshot(*run.model);
  std::vector<at::Tensor> seen;
  run.trainer.on(Event::EvalBatchStart, [&](State&) { seen = snapshot(*run.model); });
  run.trainer.evaluate(make_batches(1, 8));
  BOOST_TEST(all_equal(seen, ema->average()));
  BOOST_TEST(all_equal(snapshot(*run.model), set_by_hand));  // apply_at_end is for fit() only
}

BOOST_AUTO_TEST_CASE(options_out_of_range_are_refused_by_name) {
  BOOST_TEST(has(message_of<ConfigError>([] { EMA(EMAOptions().decay(1.0)); }), "decay"));
  BOOST_TEST(
      has(message_of<ConfigError>([] { EMA(EMAOptions().every_n_steps(0)); }), "every_n_steps"));
}

BOOST_AUTO_TEST_SUITE_END()
