// The step's output on State (batch_loss, backward_loss, step_loss, batch_output, batch_target,
// step_learning_rate): at which events each is defined, and that it holds what the model produced
// (computed here again with a forward pass of our own) or the rate the optimizer applied.

#include <torch/torch.h>
#include <boost/test/unit_test.hpp>
#include <support/fixtures.hpp>
#include <torchbus/torchbus.hpp>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

/// Which accessors hold a tensor: one letter each when defined, '-' when not: l(oss), b(ackward
/// loss), s(tep loss), o(utput), t(arget).
std::string defined_values(const State& state) {
  std::string flags;
  flags += state.batch_loss().defined() ? 'l' : '-';
  flags += state.backward_loss().defined() ? 'b' : '-';
  flags += state.step_loss().defined() ? 's' : '-';
  flags += state.batch_output().defined() ? 'o' : '-';
  flags += state.batch_target().defined() ? 't' : '-';
  return flags;
}

/// The different `defined_values` seen at the emissions of each built-in event, by event name.
struct DefinedValues {
  std::map<std::string, std::vector<std::string>> seen;

  explicit DefinedValues(Trainer& trainer) {
    for (std::size_t i = 0; i < kEventCount; ++i) {
      const auto event = static_cast<Event>(i);
      trainer.on(event, [this, event](State& state) {
        auto& flags = seen[std::string(to_string(event))];
        const auto now = defined_values(state);
        if (std::find(flags.begin(), flags.end(), now) == flags.end()) flags.push_back(now);
      });
    }
  }
};

using ValuesSeen = std::map<std::string, std::vector<std::string>>;

}  // namespace

BOOST_AUTO_TEST_SUITE(step_output)

// k = 2, 4 training batches (2 steps), then a validation of 2 batches.
BOOST_AUTO_TEST_CASE(each_value_is_defined_at_its_events_and_holds_what_the_model_produced) {
  Run run(TrainerOptions().accumulate_grad_batches(2));
  auto train = make_batches(4, 4);
  auto validation = make_batches(2, 4, 4, 3, 11);
  DefinedValues defined(run.trainer);

  // Our own forward pass on the batch the trainer runs, with the weights it runs it with (the
  // window's weights: the update comes after its last backward).
  auto expected_output = [&](const at::Tensor& data) {
    torch::NoGradGuard no_grad;
    return run.model->forward(data);
  };
  std::vector<at::Tensor> window_losses;  // our own batch losses of the current window
  int checked_batches = 0, checked_steps = 0, checked_eval_batches = 0;
  run.trainer.on(Event::BeforeBackward, [&](State& state) {
    const auto& batch = train[static_cast<std::size_t>(state.global_batch)];
    const auto output = expected_output(batch.data);
    const auto loss = cross_entropy(output, batch.target);
    BOOST_TEST(torch::equal(state.batch_output(), output));
    BOOST_TEST(torch::equal(state.batch_target(), batch.target));
    BOOST_TEST(torch::equal(state.batch_loss(), loss));
    BOOST_TEST(state.batch_loss().dim() == 0);
    BOOST_TEST(state.batch_loss().requires_grad());  // as the step returned it, with its graph
    // The tensor store keeps them under the framework's names.
    BOOST_TEST(state.tensors.get(tensor_names::kOutput).is_same(state.batch_output()));
    BOOST_TEST(state.tensors.get(tensor_names::kTarget).is_same(state.batch_target()));
    BOOST_TEST(state.tensors.get(tensor_names::kLoss).is_same(state.batch_loss()));
    window_losses.push_back(loss);
  });
  run.trainer.on(Event::AfterBackward, [&](State& state) {
    // What was back-propagated: the batch's loss divided by the window's size.
    BOOST_TEST(torch::equal(state.backward_loss(), window_losses.back() / 2.0));
    ++checked_batches;
  });
  run.trainer.on(Event::AfterOptimizerStep, [&](State& state) {
    BOOST_TEST_REQUIRE(window_losses.size() == 2u);
    // The step's loss: the mean of the window's batch losses.
    BOOST_TEST(torch::equal(state.step_loss(), window_losses[0] / 2.0 + window_losses[1] / 2.0));
  });
  run.trainer.on(Event::StepEnd, [&](State& state) {
    BOOST_TEST_REQUIRE(window_losses.size() == 2u);
    const auto mean = window_losses[0] / 2.0 + window_losses[1] / 2.0;
    BOOST_TEST(torch::equal(state.step_loss(), mean));
    BOOST_TEST(state.tensors.get(tensor_names::kStepLoss).is_same(state.step_loss()));
    BOOST_TEST(!state.tensors.contains(tensor_names::kLoss));  // the batch's, cleared at BatchEnd
    BOOST_TEST(state.metrics.latest(metric_names::kTrainLoss).value == mean.item<double>());
    window_losses.clear();
    ++checked_steps;
  });
  run.trainer.on(Event::EvalBatchEnd, [&](State& state) {
    const auto& batch = validation[static_cast<std::size_t>(state.eval_batch)];
    const auto output = expected_output(batch.data);
    BOOST_TEST(torch::equal(state.batch_output(), output));
    BOOST_TEST(torch::equal(state.batch_target(), batch.target));
    BOOST_TEST(torch::equal(state.batch_loss(), cross_entropy(output, batch.target)));
    ++checked_eval_batches;
  });
  run.trainer.fit(train, validation);

  BOOST_TEST(checked_batches == 4);
  BOOST_TEST(checked_steps == 2);
  BOOST_TEST(checked_eval_batches == 2);
  const ValuesSeen expected{
      {"ActionStart", {"-----"}},        {"EpochStart", {"-----"}},
      {"StepStart", {"-----"}},          {"BatchStart", {"-----"}},
      {"BeforeBackward", {"l--ot"}},     {"AfterBackward", {"lb-ot"}},
      {"BatchEnd", {"lb-ot", "lbsot"}},  {"BeforeOptimizerStep", {"lb-ot"}},
      {"AfterOptimizerStep", {"lbsot"}}, {"StepEnd", {"--s--"}},
      {"EvalStart", {"-----"}},          {"EvalBatchStart", {"-----"}},
      {"EvalBatchEnd", {"l--ot"}},       {"EvalEnd", {"-----"}},
      {"EpochEnd", {"-----"}},           {"ActionEnd", {"-----"}},
  };
  for (const auto& [event, flags] : expected) {
    BOOST_TEST(defined.seen[event] == flags, event);
  }
  BOOST_TEST(defined.seen.size() == expected.size());
}

// A custom step: the loss is the one it returned and the target the batch's; the output is what
// it sets with set_batch_output, if anything. A cancelled batch holds none, and a step whose
// batches were all cancelled has no step loss.
BOOST_AUTO_TEST_CASE(a_custom_step_reports_its_loss_and_sets_its_output) {
  Run run;
  auto train = make_batches(3, 4);
  at::Tensor returned;
  run.trainer.set_train_step([&](Trainer& t, Batch& batch) {
    const auto output = t.forward(batch.data);
    if (t.state().global_batch == 1) t.state().set_batch_output(output);
    returned = t.compute_loss(output, batch.target);
    return returned;
  });
  run.trainer.on(Event::BatchStart, [](State& state) {
    if (state.global_batch == 2) throw CancelBatch();
  });
  std::vector<std::string> at_batch_end, at_step_end;
  run.trainer.on(Event::BatchEnd, [&](State& state) {
    at_batch_end.push_back(defined_values(state));
    if (state.cancelled) return;
    const auto& batch = train[static_cast<std::size_t>(state.global_batch)];
    BOOST_TEST(state.batch_loss().is_same(returned));
    BOOST_TEST(state.backward_loss().is_same(returned));  // a window of one: the loss as is
    BOOST_TEST(state.batch_target().is_same(batch.target));
    BOOST_TEST(!state.tensors.contains(tensor_names::kLoss));  // a custom step stores nothing
  });
  run.trainer.on(Event::StepEnd,
                 [&](State& state) { at_step_end.push_back(defined_values(state)); });
  run.trainer.fit(train);
  BOOST_TEST(at_batch_end == (std::vector<std::string>{"lbs-t", "lbsot", "-----"}),
             boost::test_tools::per_element());
  BOOST_TEST(at_step_end == (std::vector<std::string>{"--s--", "--s--", "-----"}),
             boost::test_tools::per_element());
}

// The rate each update used, measured on the weights: plain SGD moves a weight by -rate x its
// gradient. A warm-up sets a rate at BeforeOptimizerStep (the trainer reads it after that event's
// subscribers), a per-step decay sets the next step's at AfterOptimizerStep (before StepEnd), and
// one step's update is skipped.
BOOST_AUTO_TEST_CASE(the_step_learning_rate_is_the_rate_the_update_used) {
  Run run;  // SGD, rate 0.1, no momentum
  auto train = make_batches(5, 4);
  at::Tensor weight_before, gradient;
  std::vector<std::optional<double>> at_step_start, at_step_end;
  std::vector<double> applied;  // measured on the first weight, per update
  run.trainer.on(Event::StepStart,
                 [&](State& state) { at_step_start.push_back(state.step_learning_rate()); });
  run.trainer.on(Event::BeforeOptimizerStep, [&](State& state) {
    if (state.global_batch == 1) state.optimizer->param_groups()[0].options().set_lr(0.3);
    if (state.global_batch == 3) state.skip_update = true;
    const auto weight = run.model->parameters().front();
    weight_before = weight.detach().clone();
    gradient = weight.grad().clone();
  });
  run.trainer.on(Event::AfterOptimizerStep, [&](State& state) {
    const auto weight = run.model->parameters().front().detach();
    const auto largest = gradient.abs().argmax().item<std::int64_t>();
    const auto moved = (weight_before - weight).flatten()[largest].item<double>();
    applied.push_back(moved / gradient.flatten()[largest].item<double>());
    auto& options = state.optimizer->param_groups()[0].options();
    options.set_lr(options.get_lr() / 2);
  });
  run.trainer.on(Event::StepEnd,
                 [&](State& state) { at_step_end.push_back(state.step_learning_rate()); });
  run.trainer.fit(train);

  BOOST_TEST_REQUIRE(applied.size() == 4u);
  BOOST_TEST_REQUIRE(at_step_end.size() == 5u);
  std::size_t update = 0;
  for (std::size_t i = 0; i < at_step_end.size(); ++i) {
    BOOST_TEST_CONTEXT("step of batch " << i) {
      BOOST_TEST(!at_step_start[i].has_value());
      if (i == 3) {
        BOOST_TEST(!at_step_end[i].has_value());  // no update
        continue;
      }
      BOOST_TEST_REQUIRE(at_step_end[i].has_value());
      BOOST_TEST(*at_step_end[i] == applied[update++], boost::test_tools::tolerance(1e-4));
    }
  }
  // 0.1; the warm-up's 0.3; halved after each update: 0.15; skipped; 0.075.
  BOOST_TEST(*at_step_end[0] == 0.1);
  BOOST_TEST(*at_step_end[1] == 0.3);
  BOOST_TEST(*at_step_end[2] == 0.15);
  BOOST_TEST(*at_step_end[4] == 0.075);
  BOOST_TEST(run.trainer.state().step_learning_rate().value_or(0) == 0.075);  // after the fit
}

BOOST_AUTO_TEST_SUITE_END()
