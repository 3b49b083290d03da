// TerminateOnNaN: a non-finite loss, tensor or gradient skips its step's update and stops the run.

#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <torchbus/callbacks/terminate_on_nan.hpp>

#include <limits>
#include <sstream>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

/// Cross-entropy that returns NaN on its `bad_call`-th call (0-based).
Trainer::LossFunction nan_at_call(int bad_call, int* calls) {
  return [bad_call, calls](const at::Tensor& output, const at::Tensor& target) {
    auto loss = cross_entropy(output, target);
    if ((*calls)++ == bad_call) loss = loss * std::numeric_limits<double>::quiet_NaN();
    return loss;
  };
}

bool equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i])) return false;
  }
  return true;
}

/// Snapshots the weights at the StepStart of step `step` (0-based).
struct WeightsBefore {
  std::vector<at::Tensor> weights;
  void watch(Trainer& trainer, std::int64_t step) {
    trainer.on(Event::StepStart, [this, &trainer, step](State& state) {
      if (state.step == step && weights.empty()) weights = snapshot(trainer.module());
    });
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(terminate_on_nan)

BOOST_AUTO_TEST_CASE(nan_loss_stops_with_the_weights_from_before_that_step) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  int calls = 0;
  Trainer trainer(model, sgd, nan_at_call(3, &calls),
                  TrainerOptions().max_epochs(2).use_registered_subscriptions(false));
  auto callback = std::make_shared<TerminateOnNaN>();
  trainer.add(callback);
  WeightsBefore before;
  before.watch(trainer, 3);
  std::vector<bool> skipped;
  trainer.on(Event::StepEnd, [&](State& state) { skipped.push_back(state.update_skipped); });
  int after_optimizer = 0;
  trainer.on(Event::AfterOptimizerStep, [&](State&) { ++after_optimizer; });
  int epochs_started = 0;
  trainer.on(Event::EpochStart, [&](State&) { ++epochs_started; });

  auto batches = make_batches(6, 4);
  trainer.fit(batches);

  const auto& state = trainer.state();
  BOOST_TEST(state.stop_requested());
  BOOST_TEST(state.step == 3);  // steps 0..2 updated; step 3 was skipped
  BOOST_TEST(after_optimizer == 3);
  BOOST_TEST(skipped == (std::vector<bool>{false, false, false, true}),
             boost::test_tools::per_element());
  BOOST_TEST(epochs_started == 1);  // max_epochs is 2, but no second epoch started
  BOOST_REQUIRE(!before.weights.empty());
  BOOST_TEST(equal(snapshot(trainer.module()), before.weights));
  BOOST_TEST(callback->triggered());
  BOOST_TEST(contains(state.stop_reason(), "tensor 'loss'"));
  BOOST_TEST(contains(state.stop_reason(), "batch 3"));
  BOOST_TEST(contains(state.stop_reason(), "step 3"));
  BOOST_TEST(contains(state.stop_reason(), "epoch 0"));
  BOOST_TEST(state.metrics.series("train_loss").size() == 3u);
}

BOOST_AUTO_TEST_CASE(nan_in_any_batch_of_a_window_skips_the_whole_step) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  int calls = 0;
  // k = 3: batches 0-2 are step 0, batches 3-5 step 1; batch 4 is NaN.
  Trainer trainer(model, sgd, nan_at_call(4, &calls),
                  TrainerOptions().accumulate_grad_batches(3).use_registered_subscriptions(false));
  trainer.add(std::make_shared<TerminateOnNaN>());
  WeightsBefore before;
  before.watch(trainer, 1);
  int batches_run = 0;
  trainer.on(Event::BatchEnd, [&](State&) { ++batches_run; });

  auto batches = make_batches(12, 4);
  trainer.fit(batches);

  BOOST_TEST(trainer.state().step == 1);
  BOOST_TEST(batches_run == 6);  // the window finished, then the run stopped
  BOOST_TEST(equal(snapshot(trainer.module()), before.weights));
  BOOST_TEST(contains(trainer.state().stop_reason(), "batch 4"));
  BOOST_TEST(contains(trainer.state().stop_reason(), "step 1"));
}

BOOST_AUTO_TEST_CASE(a_step_skipped_before_its_flags_are_read_leaves_none_to_later_steps) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  int calls = 0;
  Trainer trainer(model, sgd, nan_at_call(2, &calls),
                  TrainerOptions().max_epochs(1).use_registered_subscriptions(false));
  auto callback = std::make_shared<TerminateOnNaN>();
  trainer.add(callback);
  // A subscriber that skips the NaN batch's update: BeforeOptimizerStep does not fire, so
  // TerminateOnNaN's flag of batch 2 is never read at its own step.
  trainer.on(
      Event::AfterBackward,
      [](State& state) {
        if (state.global_batch == 2) state.skip_update = true;
      },
      Placement().after("terminate_on_nan"));
  std::vector<bool> skipped;
  trainer.on(Event::StepEnd, [&](State& state) { skipped.push_back(state.update_skipped); });

  auto batches = make_batches(5, 4);
  trainer.fit(batches);

  BOOST_TEST(!callback->triggered());
  BOOST_TEST(!trainer.state().stop_requested());
  BOOST_TEST(skipped == (std::vector<bool>{false, false, true, false, false}),
             boost::test_tools::per_element());
  BOOST_TEST(trainer.state().step == 4);
}

BOOST_AUTO_TEST_CASE(finite_run_is_untouched) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, sgd, cross_entropy,
                  TrainerOptions().max_epochs(2).use_registered_subscriptions(false));
  auto callback = std::make_shared<TerminateOnNaN>(TerminateOnNaNOptions().check_gradients(true));
  trainer.add(callback);
  auto batches = make_batches(5, 4);
  trainer.fit(batches);
  BOOST_TEST(!trainer.state().stop_requested());
  BOOST_TEST(trainer.state().step == 10);
  BOOST_TEST(!callback->triggered());
}

BOOST_AUTO_TEST_CASE(a_named_tensor_other_than_the_loss) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, sgd, cross_entropy, TrainerOptions().use_registered_subscriptions(false));
  // The loss stays finite; the stored output has an infinity at step 2.
  trainer.set_train_step([](Trainer& t, Batch& batch) {
    auto output = t.forward(batch.data);
    auto loss = t.compute_loss(output, batch.target);
    auto stored = output.detach().clone();
    if (t.state().step == 2) stored[0][0] = std::numeric_limits<float>::infinity();
    t.state().tensors.set("scores", stored);
    return loss;
  });
  trainer.add(
      std::make_shared<TerminateOnNaN>(TerminateOnNaNOptions().tensors({"loss", "scores"})));
  WeightsBefore before;
  before.watch(trainer, 2);
  auto batches = make_batches(6, 4);
  trainer.fit(batches);
  BOOST_TEST(trainer.state().step == 2);
  BOOST_TEST(equal(snapshot(trainer.module()), before.weights));
  BOOST_TEST(contains(trainer.state().stop_reason(), "tensor 'scores'"));
}

// Tensors the host cannot read in place (not contiguous, complex; a GPU's) are checked with tensor
// ops: a float32 probe per tensor. Large finite values give no false alarm, also float64 ones
// beyond float32's range, and every NaN or infinity is found.
BOOST_AUTO_TEST_CASE(tensors_checked_with_tensor_ops_find_exactly_the_non_finite_ones) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto transposed = [](at::Tensor t) { return t.reshape({2, 3}).t(); };
  struct Case {
    std::string what;
    at::Tensor tensor;
    bool finite;
  };
  const std::vector<Case> cases = {
      {"float32 at its maximum", transposed(torch::full({6}, std::numeric_limits<float>::max())),
       true},
      {"float64 beyond float32's range", transposed(torch::full({6}, 1e300, at::kDouble)), true},
      {"an infinity in float32", transposed(torch::tensor({1.0, 2.0, 3.0, 4.0, 5.0, -inf})), false},
      {"a NaN in bfloat16",
       transposed(torch::tensor({1.0, nan, 3.0, 4.0, 5.0, 6.0}).to(at::kBFloat16)), false},
      {"one complex number beyond float32's range",
       torch::complex(torch::full({1}, 1e300, at::kDouble), torch::zeros({1}, at::kDouble)), true},
      {"an infinite imaginary part",
       torch::complex(torch::ones({3}), torch::tensor({0.0, inf, 0.0})), false},
  };
  for (const auto& c : cases) {
    BOOST_TEST_CONTEXT(c.what) {
      auto model = make_model();
      torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
      Trainer trainer(model, sgd, cross_entropy,
                      TrainerOptions().max_steps(1).use_registered_subscriptions(false));
      trainer.set_train_step([&c](Trainer& t, Batch& batch) {
        t.state().tensors.set("checked", c.tensor);
        return t.compute_loss(t.forward(batch.data), batch.target);
      });
      trainer.add(
          std::make_shared<TerminateOnNaN>(TerminateOnNaNOptions().tensors({"loss", "checked"})));
      auto batches = make_batches(2, 4);
      trainer.fit(batches);
      BOOST_TEST(trainer.state().stop_requested() == !c.finite);
      if (!c.finite) BOOST_TEST(contains(trainer.state().stop_reason(), "tensor 'checked'"));
    }
  }
}

BOOST_AUTO_TEST_CASE(non_finite_gradient_with_a_finite_loss) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, sgd, cross_entropy, TrainerOptions().use_registered_subscriptions(false));
  // At step 1, add 0 * sqrt(0): the loss is unchanged, the gradient of sqrt at 0 is infinite, so
  // every weight's gradient becomes NaN.
  trainer.set_train_step([](Trainer& t, Batch& batch) {
    auto loss = t.compute_loss(t.forward(batch.data), batch.target);
    if (t.state().step == 1) {
      for (const auto& parameter : t.module().parameters()) {
        loss = loss + (parameter.sum() * 0.0).sqrt();
      }
    }
    t.state().tensors.set("loss", loss);
    return loss;
  });
  auto callback = std::make_shared<TerminateOnNaN>(TerminateOnNaNOptions().check_gradients(true));
  trainer.add(callback);
  WeightsBefore before;
  before.watch(trainer, 1);
  auto batches = make_batches(4, 4);
  trainer.fit(batches);
  BOOST_TEST(trainer.state().step == 1);
  BOOST_TEST(equal(snapshot(trainer.module()), before.weights));
  BOOST_TEST(contains(trainer.state().stop_reason(), "a gradient"));

  // Without the gradient check the NaN gradient goes through.
  auto model2 = make_model();
  torch::optim::SGD sgd2(model2->parameters(), torch::optim::SGDOptions(0.1));
  Trainer unchecked(model2, sgd2, cross_entropy,
                    TrainerOptions().max_steps(2).use_registered_subscriptions(false));
  unchecked.set_train_step([](Trainer& t, Batch& batch) {
    auto loss = t.compute_loss(t.forward(batch.data), batch.target);
    if (t.state().step == 1) loss = loss + (t.module().parameters()[0].sum() * 0.0).sqrt();
    t.state().tensors.set("loss", loss);
    return loss;
  });
  unchecked.add(std::make_shared<TerminateOnNaN>());
  unchecked.fit(batches);
  BOOST_TEST(!unchecked.state().stop_requested());
}

// The loss checked is the one the step returned (State::batch_loss()): a custom step need not
// store it.
BOOST_AUTO_TEST_CASE(a_custom_steps_loss_is_checked_without_being_stored) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  int calls = 0;
  Trainer trainer(model, sgd, nan_at_call(1, &calls),
                  TrainerOptions().use_registered_subscriptions(false));
  trainer.set_train_step(
      [](Trainer& t, Batch& batch) { return t.compute_loss(t.forward(batch.data), batch.target); });
  trainer.add(std::make_shared<TerminateOnNaN>());
  auto batches = make_batches(4, 4);
  trainer.fit(batches);
  BOOST_TEST(trainer.state().step == 1);
  BOOST_TEST(contains(trainer.state().stop_reason(), "tensor 'loss'"));
  BOOST_TEST(contains(trainer.state().stop_reason(), "batch 1"));
}

BOOST_AUTO_TEST_CASE(a_tensor_the_step_does_not_store_is_a_config_error) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, sgd, cross_entropy, TrainerOptions().use_registered_subscriptions(false));
  trainer.set_train_step([](Trainer& t, Batch& batch) {
    t.state().tensors.set("logits", t.forward(batch.data));
    return t.compute_loss(t.state().tensors.get("logits"), batch.target);
  });
  trainer.add(
      std::make_shared<TerminateOnNaN>(TerminateOnNaNOptions().tensors({"loss", "scores"})));
  auto batches = make_batches(2, 4);
  BOOST_CHECK_EXCEPTION(trainer.fit(batches), ConfigError, [](const ConfigError& error) {
    const std::string message = error.what();
    return contains(message, "tensor 'scores'") &&
           contains(message, "present: loss, target, logits");
  });
}

BOOST_AUTO_TEST_CASE(nothing_to_check_is_a_config_error) {
  BOOST_CHECK_THROW(TerminateOnNaN(TerminateOnNaNOptions().tensors({})), ConfigError);
  BOOST_CHECK_THROW(TerminateOnNaN(TerminateOnNaNOptions().tensors({""})), ConfigError);
  BOOST_CHECK_NO_THROW(TerminateOnNaN(TerminateOnNaNOptions().tensors({}).check_gradients(true)));
}

BOOST_AUTO_TEST_CASE(state_round_trips) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  int calls = 0;
  Trainer trainer(model, sgd, nan_at_call(1, &calls),
                  TrainerOptions().use_registered_subscriptions(false));
  auto callback = std::make_shared<TerminateOnNaN>();
  trainer.add(callback);
  auto batches = make_batches(3, 4);
  trainer.fit(batches);
  BOOST_REQUIRE(callback->triggered());

  TerminateOnNaN restored;
  round_trip(*callback, restored);
  BOOST_TEST(restored.triggered());
  BOOST_TEST(restored.reason() == callback->reason());

  TerminateOnNaN fresh;
  TerminateOnNaN untouched;
  round_trip(untouched, fresh);
  BOOST_TEST(!fresh.triggered());
}

BOOST_AUTO_TEST_CASE(default_role_and_name) {
  TerminateOnNaN callback;
  BOOST_TEST((callback.role() == Role::Monitor));
  BOOST_TEST(callback.name() == "terminate_on_nan");
}

BOOST_AUTO_TEST_SUITE_END()
