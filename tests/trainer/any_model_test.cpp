// Any model through the Trainer: a forward of the whole batch returning named outputs, a loss of
// the output and the batch (trained exactly as the same loop written by hand), built-ins reading
// named fields, and the test and predict stages (their events, metrics and state).

#include <torch/torch.h>
#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <support/recorder.hpp>
#include <torchbus/callbacks/classification_metrics.hpp>
#include <torchbus/callbacks/logged_values.hpp>
#include <torchbus/torchbus.hpp>

#include <string>
#include <vector>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

/// A model of two inputs (a sensor of 4 values, one of 2) predicting 2 regression targets, with an
/// auxiliary loss (the squared activations of its hidden layer).
struct TwoInputModelImpl : torch::nn::Module {
  TwoInputModelImpl() {
    torch::manual_seed(3);
    first = register_module("first", torch::nn::Linear(4, 6));
    second = register_module("second", torch::nn::Linear(2, 6));
    head = register_module("head", torch::nn::Linear(6, 2));
  }
  /// The prediction and the auxiliary loss.
  std::pair<at::Tensor, at::Tensor> forward(const at::Tensor& a, const at::Tensor& b) {
    const auto hidden = torch::tanh(first(a) + second(b));
    return {head(hidden), hidden.pow(2).mean()};
  }
  torch::nn::Linear first{nullptr}, second{nullptr}, head{nullptr};
};
TORCH_MODULE(TwoInputModel);

/// `count` batches of `rows` samples: inputs `a` [rows, 4], `b` [rows, 2], targets `y` [rows, 2].
std::vector<Batch> two_input_batches(int count, int rows) {
  torch::manual_seed(11);
  std::vector<Batch> batches;
  for (int i = 0; i < count; ++i) {
    Batch batch;
    const auto a = torch::randn({rows, 4});
    const auto b = torch::randn({rows, 2});
    batch.set("a", a).set("b", b).set("y", a.narrow(1, 0, 2) - b);
    batches.push_back(std::move(batch));
  }
  return batches;
}

Output two_input_forward(TwoInputModel& model, const Batch& batch) {
  const auto [prediction, aux] = model->forward(batch.get("a"), batch.get("b"));
  return Output{{"prediction", prediction}, {"aux_loss", aux}};
}

at::Tensor two_input_loss(const Output& output, const Batch& batch) {
  return torch::mse_loss(output.get("prediction"), batch.get("y")) + 0.1 * output.get("aux_loss");
}

/// The Trainer of a TwoInputModel, batch forward and batch loss.
struct TwoInputRun {
  TwoInputModel model;
  torch::optim::SGD optimizer{model->parameters(), torch::optim::SGDOptions(0.05)};
  Trainer trainer;

  explicit TwoInputRun(TrainerOptions options = TrainerOptions().max_epochs(2))
      : trainer(model.ptr(), Trainer::BatchForward([this](const Batch& batch) {
                  return two_input_forward(model, batch);
                }),
                optimizer, two_input_loss, options.use_registered_subscriptions(false)) {}
};

/// Batches of `features` and `labels` only (the pair left empty), for a classifier.
std::vector<Batch> labelled_batches(int count, int rows) {
  std::vector<Batch> batches;
  for (auto& pair : make_batches(count, rows)) {
    Batch batch;
    batch.set("features", pair.data).set("labels", pair.target);
    batches.push_back(std::move(batch));
  }
  return batches;
}

/// A classifier on `features`, its logits named "logits", against `labels`.
struct LabelledRun {
  torch::nn::Sequential model = make_model();
  torch::optim::SGD optimizer{model->parameters(), torch::optim::SGDOptions(0.1)};
  Trainer trainer;

  explicit LabelledRun(TrainerOptions options = TrainerOptions().max_epochs(1))
      : trainer(
            model.ptr(), Trainer::BatchForward([this](const Batch& batch) {
              return Output{{"logits", model->forward(batch.get("features"))}};
            }),
            optimizer,
            [](const Output& output, const Batch& batch) {
              return torch::nn::functional::cross_entropy(output.get("logits"),
                                                          batch.get("labels"));
            },
            options.use_registered_subscriptions(false)) {}
};

/// Records "<event>:<action>" for each of `events`.
void record_actions(Trainer& trainer, const std::vector<Event>& events,
                    std::vector<std::string>& seen) {
  for (const auto event : events) {
    trainer.on(event, [&seen, event](State& state) {
      const char* action = state.action == Action::Test      ? "test"
                           : state.action == Action::Predict ? "predict"
                           : state.action == Action::Fit     ? "fit"
                                                             : "evaluate";
      seen.push_back(std::string(to_string(event)) + ":" + action);
    });
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(batch_forward)

BOOST_AUTO_TEST_CASE(a_two_input_model_with_an_auxiliary_loss_trains_as_the_hand_written_loop) {
  const auto batches = two_input_batches(5, 8);
  TwoInputRun run;
  run.trainer.fit(batches);

  TwoInputModel reference;  // the same initial weights (seeded)
  torch::optim::SGD optimizer(reference->parameters(), torch::optim::SGDOptions(0.05));
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (const auto& batch : batches) {
      optimizer.zero_grad();
      two_input_loss(two_input_forward(reference, batch), batch).backward();
      optimizer.step();
    }
  }
  BOOST_TEST(all_equal(snapshot(*run.model), snapshot(*reference)));
}

BOOST_AUTO_TEST_CASE(named_outputs_and_batch_fields_reach_the_subscribers) {
  TwoInputRun run(TrainerOptions().max_epochs(1));
  int checked = 0;
  run.trainer.on(Event::BatchEnd | Event::EvalBatchEnd, [&](State& state) {
    const auto& prediction = state.tensors.get("prediction");
    BOOST_TEST(prediction.sizes() == (std::vector<std::int64_t>{8, 2}));
    BOOST_TEST(state.batch_output().is_same(prediction));  // the first named output is the main
    BOOST_TEST(state.tensors.get("output").is_same(prediction));
    BOOST_TEST(state.tensors.get("aux_loss").dim() == 0);
    // A built-in's option may name a field of the batch.
    const auto* y = find_step_tensor(state, "y");
    BOOST_REQUIRE(y != nullptr);
    BOOST_TEST(y->is_same(state.batch()->get("y")));
    const auto names = step_tensor_names(state);
    BOOST_TEST((std::find(names.begin(), names.end(), "b") != names.end()));
    ++checked;
  });
  const auto batches = two_input_batches(2, 8);
  run.trainer.fit(batches, batches);
  BOOST_TEST(checked == 4);
}

BOOST_AUTO_TEST_CASE(classification_metrics_read_the_fields_they_are_given) {
  LabelledRun run;
  run.trainer.add(std::make_shared<ClassificationMetrics>(
      ClassificationMetricsOptions().output("logits").target("labels").per_class(false)));
  const auto batches = labelled_batches(3, 10);
  run.trainer.evaluate(batches);

  torch::NoGradGuard no_grad;
  double correct = 0;
  for (const auto& batch : batches) {
    correct += run.model->forward(batch.get("features"))
                   .argmax(1)
                   .eq(batch.get("labels"))
                   .sum()
                   .item<double>();
  }
  BOOST_TEST(run.trainer.state().metrics.latest("val_accuracy").value == correct / 30.0);
}

BOOST_AUTO_TEST_CASE(a_failing_forward_or_loss_names_the_batch_fields_and_outputs) {
  TwoInputRun run;
  Batch bad;
  bad.set("a", torch::randn({8, 5})).set("b", torch::randn({8, 2})).set("y", torch::randn({8, 2}));
  const std::vector<Batch> forward_fails{bad};
  const auto forward_error = message_of<DataError>([&] { run.trainer.fit(forward_fails); });
  BOOST_TEST(has(forward_error,
                 "the model's forward failed on a batch of a [8, 5], b [8, 2], "
                 "y [8, 2]"));

  Batch short_target = two_input_batches(1, 8).front();
  short_target.set("y", torch::randn({8, 3}));
  const std::vector<Batch> loss_fails{short_target};
  const auto loss_error = message_of<DataError>([&] { run.trainer.fit(loss_fails); });
  BOOST_TEST(has(loss_error,
                 "the loss failed on outputs prediction [8, 2], aux_loss [] and a "
                 "batch of a [8, 4], b [8, 2], y [8, 3]"));
}

BOOST_AUTO_TEST_CASE(a_model_holder_trains_with_a_loss_of_the_whole_batch) {
  // Trainer(model, optimizer, BatchLoss): the forward runs on `data`, the loss reads a weight.
  auto batches = make_batches(4, 6);
  for (auto& batch : batches) batch.set("weight", torch::rand({6}));
  const auto weighted = [](const Output& output, const Batch& batch) {
    const auto per_sample = torch::nn::functional::cross_entropy(
        output.main(), batch.target,
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
    return (per_sample * batch.get("weight")).mean();
  };
  auto model = make_model();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, optimizer, weighted,
                  TrainerOptions().max_epochs(1).use_registered_subscriptions(false));
  trainer.fit(batches);

  auto reference = make_model();
  torch::optim::SGD reference_optimizer(reference->parameters(), torch::optim::SGDOptions(0.1));
  for (const auto& batch : batches) {
    reference_optimizer.zero_grad();
    weighted(Output(reference->forward(batch.data)), batch).backward();
    reference_optimizer.step();
  }
  BOOST_TEST(all_equal(snapshot(*model), snapshot(*reference)));
  // The tensor-taking calls run on a batch of that tensor alone.
  const auto input = torch::randn({2, 4});
  BOOST_TEST(torch::equal(trainer.forward(input), model->forward(input)));
  BOOST_TEST(has(message_of<DataError>([&] {
                   trainer.compute_loss(model->forward(input), torch::zeros({2}, torch::kLong));
                 }),
                 "the batch has no tensor 'weight'; its fields: target"));
}

BOOST_AUTO_TEST_CASE(sample_field_names_the_field_that_counts_the_samples) {
  // Time-major tokens [5, N] come first: by the default rule every batch counts 5 samples.
  std::vector<Batch> batches;
  for (const std::int64_t rows : {2, 6}) {
    Batch batch;
    batch.set("tokens", torch::zeros({5, rows})).set("labels", torch::zeros({rows}));
    batches.push_back(std::move(batch));
  }
  const auto mean_loss = [&](TrainerOptions options) {
    auto model = make_model();
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
    Trainer trainer(model, optimizer, cross_entropy, options.use_registered_subscriptions(false));
    trainer.set_eval_step([](Trainer& self, Batch&) {  // losses 1 and 3
      return torch::tensor(self.state().eval_batch == 0 ? 1.0 : 3.0);
    });
    return trainer.evaluate(batches);
  };
  BOOST_TEST(mean_loss(TrainerOptions()) == 2.0);
  BOOST_TEST(mean_loss(TrainerOptions().sample_field("labels")) == (1.0 * 2 + 3.0 * 6) / 8);
  BOOST_TEST(has(message_of<DataError>([&] { mean_loss(TrainerOptions().sample_field("ids")); }),
                 "counted by its field 'ids' (TrainerOptions::sample_field), and the batch has "
                 "none; its fields: tokens, labels"));
  Batch listed;
  listed.set_list("boxes", {torch::zeros({3, 4}), torch::zeros({1, 4})});
  BOOST_TEST(listed.samples("boxes") == 2);
}

BOOST_AUTO_TEST_CASE(an_output_names_its_tensors) {
  const auto logits = torch::randn({2, 3});
  Output output(logits);
  output.set("aux_loss", torch::zeros({}));
  BOOST_TEST(output.main().is_same(logits));
  BOOST_TEST(output.get("output").is_same(logits));
  BOOST_TEST(output.names() == "output, aux_loss");
  BOOST_TEST(has(message_of<DataError>([&] { output.get("boxes"); }),
                 "the model's output has no tensor 'boxes'; its outputs: output, aux_loss"));
  Output named{{"logits", logits}, {"features", torch::ones({2, 5})}};
  BOOST_TEST(named.main().is_same(logits));
  named.set("logits", torch::ones({2, 3}));  // replacing the main one by name replaces the main
  BOOST_TEST(torch::equal(named.main(), torch::ones({2, 3})));
  BOOST_TEST(Output().names() == "none");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(test_stage)

BOOST_AUTO_TEST_CASE(test_records_test_metrics_and_subscribers_tell_it_from_validation) {
  auto model = make_model();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, optimizer, cross_entropy,
                  TrainerOptions().max_epochs(1).use_registered_subscriptions(false));
  trainer.add(std::make_shared<ClassificationMetrics>(ClassificationMetricsOptions()));
  std::vector<std::string> seen;
  record_actions(trainer, {Event::ActionStart, Event::EvalStart, Event::EvalEnd, Event::ActionEnd},
                 seen);
  const auto train = make_batches(3, 8);
  const auto held_out = make_batches(2, 8, 4, 3, /*seed=*/21);
  trainer.fit(train, train);
  const auto val_points = trainer.state().metrics.length("val_loss");
  const double validation = trainer.evaluate(held_out);
  const double test = trainer.test(held_out);

  BOOST_TEST(test == validation);  // the same evaluation, under another name
  const auto& metrics = trainer.state().metrics;
  BOOST_TEST(metrics.latest("test_loss").value == test);
  BOOST_TEST(metrics.latest("test_accuracy").value == metrics.latest("val_accuracy").value);
  BOOST_TEST(metrics.length("val_loss") == val_points + 1);  // evaluate()'s, not test()'s
  BOOST_TEST(metrics.length("test_f1") == 1u);
  BOOST_TEST(joined(seen) ==
             "ActionStart:fit EvalStart:fit EvalEnd:fit ActionEnd:fit "
             "ActionStart:evaluate EvalStart:evaluate EvalEnd:evaluate ActionEnd:evaluate "
             "ActionStart:test EvalStart:test EvalEnd:test ActionEnd:test");
  BOOST_TEST(model->is_training());  // back in training mode after the test
}

BOOST_AUTO_TEST_CASE(test_runs_limit_test_batches_under_no_grad) {
  auto model = make_model();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, optimizer, cross_entropy,
                  TrainerOptions()
                      .limit_test_batches(BatchLimit::count(2))
                      .use_registered_subscriptions(false));
  int batches = 0;
  trainer.on(Event::EvalBatchEnd, [&](State& state) {
    BOOST_TEST(!state.training);
    BOOST_TEST(!state.batch_loss().requires_grad());
    ++batches;
  });
  const auto before = snapshot(*model);
  trainer.test(make_batches(5, 4));
  BOOST_TEST(batches == 2);
  BOOST_TEST(all_equal(snapshot(*model), before));
  BOOST_TEST(has(message_of<ConfigError>([] {
                   TrainerOptions().limit_test_batches(BatchLimit::fraction(1.5)).validate();
                 }),
                 "limit_test_batches"));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(predict_stage)

BOOST_AUTO_TEST_CASE(predict_returns_each_batch_in_order_under_inference_mode_with_its_events) {
  auto model = make_model();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, optimizer, cross_entropy,
                  TrainerOptions().use_registered_subscriptions(false));
  auto recorder = std::make_shared<RecordingCallback>();
  trainer.add(recorder);
  std::vector<std::int64_t> counters;
  trainer.on(Event::PredictBatchStart | Event::PredictBatchEnd, [&](State& state) {
    BOOST_TEST((state.action == Action::Predict));
    BOOST_TEST(!state.training);
    BOOST_TEST(state.batch() != nullptr);
    counters.push_back(state.predict_batch);
  });
  trainer.on(Event::PredictBatchEnd, [&](State& state) {
    BOOST_TEST(c10::InferenceMode::is_enabled());
    BOOST_TEST(state.batch_output().sizes() == (std::vector<std::int64_t>{4, 3}));
  });
  const auto batches = make_batches(3, 4);
  const auto before = snapshot(*model);
  const auto predictions = trainer.predict(batches);

  BOOST_TEST(joined(recorder->events) ==
             "ActionStart PredictStart PredictBatchStart PredictBatchEnd PredictBatchStart "
             "PredictBatchEnd PredictBatchStart PredictBatchEnd PredictEnd ActionEnd");
  BOOST_TEST(counters == (std::vector<std::int64_t>{0, 0, 1, 1, 2, 2}));
  BOOST_REQUIRE(predictions.size() == 3u);
  model->eval();
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < batches.size(); ++i) {
    BOOST_TEST(torch::equal(predictions[i].main(), model->forward(batches[i].data)));
  }
  BOOST_TEST(all_equal(snapshot(*model), before));
  BOOST_TEST((trainer.state().action == Action::None));
}

BOOST_AUTO_TEST_CASE(a_predict_step_returns_named_outputs_and_cancelled_batches_are_skipped) {
  LabelledRun run;
  run.trainer.set_predict_step([&](Trainer& trainer, Batch& batch) {
    const auto logits = trainer.forward(batch).get("logits");
    return Output{{"class", logits.argmax(1)}, {"probability", logits.softmax(1)}};
  });
  run.trainer.on(Event::PredictBatchStart, [](State& state) {
    if (state.predict_batch == 1) throw CancelBatch();
  });
  std::vector<std::string> stored;
  run.trainer.on(Event::PredictBatchEnd, [&](State& state) {
    if (!state.cancelled) stored = state.tensors.names();
  });
  const auto predictions = run.trainer.predict(labelled_batches(3, 5));
  BOOST_REQUIRE(predictions.size() == 2u);
  BOOST_TEST(predictions[0].get("class").sizes() == (std::vector<std::int64_t>{5}));
  BOOST_TEST(stored == (std::vector<std::string>{"class", "probability", "output"}));
  BOOST_TEST(has(message_of<DataError>([&] { run.trainer.predict(std::vector<Batch>{}); }),
                 "the predict data yielded no batches"));
}

BOOST_AUTO_TEST_CASE(a_trainer_of_optimizer_phases_predicts_with_the_step_it_is_given) {
  auto model = make_model();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model.ptr(),
                  {OptimizerPhase("only", optimizer,
                                  [&](Trainer&, Batch& batch) {
                                    return cross_entropy(model->forward(batch.data), batch.target);
                                  })},
                  TrainerOptions().use_registered_subscriptions(false));
  const auto batches = make_batches(2, 4);
  BOOST_TEST(has(message_of<ConfigError>([&] { trainer.predict(batches); }),
                 "give it a predict step (set_predict_step) or override predict_step"));
  trainer.set_predict_step(
      [&](Trainer&, Batch& batch) { return Output(model->forward(batch.data)); });
  BOOST_TEST(trainer.predict(batches).size() == 2u);
}

BOOST_AUTO_TEST_CASE(the_end_events_owed_after_a_failing_step_see_no_batch) {
  // The loop's batch is gone when the owed EvalBatchEnd and PredictBatchEnd are published.
  auto model = make_model();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, optimizer, cross_entropy,
                  TrainerOptions().use_registered_subscriptions(false));
  trainer.set_eval_step([](Trainer&, Batch&) -> at::Tensor { throw std::runtime_error("eval"); });
  trainer.set_predict_step([](Trainer&, Batch&) -> Output { throw std::runtime_error("predict"); });
  std::vector<bool> batch_seen;
  trainer.on(Event::EvalBatchEnd | Event::PredictBatchEnd,
             [&](State& state) { batch_seen.push_back(state.batch() != nullptr); });
  const auto batches = make_batches(2, 3);
  BOOST_CHECK_THROW(trainer.evaluate(batches), std::runtime_error);
  BOOST_CHECK_THROW(trainer.predict(batches), std::runtime_error);
  BOOST_TEST(batch_seen == (std::vector<bool>{false, false}));
}

BOOST_AUTO_TEST_CASE(limit_predict_batches_and_fast_dev_run_shorten_a_predict_run) {
  auto model = make_model();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer limited(model, optimizer, cross_entropy,
                  TrainerOptions()
                      .limit_predict_batches(BatchLimit::fraction(0.5))
                      .use_registered_subscriptions(false));
  BOOST_TEST(limited.predict(make_batches(4, 2)).size() == 2u);
  Trainer quick(model, optimizer, cross_entropy,
                TrainerOptions().fast_dev_run(1).use_registered_subscriptions(false));
  BOOST_TEST(quick.predict(make_batches(4, 2)).size() == 1u);
}

BOOST_AUTO_TEST_SUITE_END()
