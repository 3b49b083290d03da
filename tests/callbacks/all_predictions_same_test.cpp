// AllPredictionsSame: detects an evaluation whose predictions are all one value; warns or stops.

#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <torchbus/callbacks/all_predictions_same.hpp>

#include <sstream>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

/// A trainer whose eval step takes each batch's data as the model's output.
struct PredictionRun {
  torch::nn::Sequential model = make_model();
  torch::optim::SGD sgd{model->parameters(), torch::optim::SGDOptions(0.1)};
  Trainer trainer;

  explicit PredictionRun(TrainerOptions options = {})
      : trainer(model, sgd, cross_entropy, options.use_registered_subscriptions(false)) {
    trainer.set_eval_step([](Trainer& t, Batch& batch) {
      t.state().set_batch_output(batch.data);
      return batch.data.sum();
    });
  }
};

/// Logits favouring `classes[i]` in row i.
at::Tensor logits(const std::vector<std::int64_t>& classes) {
  auto out = torch::zeros({static_cast<std::int64_t>(classes.size()), 3});
  for (std::size_t i = 0; i < classes.size(); ++i)
    out[static_cast<std::int64_t>(i)][classes[i]] = 2.0;
  return out;
}

std::vector<Batch> batches_of(std::vector<at::Tensor> outputs) {
  std::vector<Batch> batches;
  for (auto& output : outputs) {
    batches.emplace_back(output, torch::zeros({output.size(0)}, torch::kLong));
  }
  return batches;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(all_predictions_same)

BOOST_AUTO_TEST_CASE(one_class_everywhere_is_detected) {
  PredictionRun run;
  auto callback = std::make_shared<AllPredictionsSame>();
  run.trainer.add(callback);
  auto same = batches_of({logits({1, 1, 1}), logits({1, 1})});
  run.trainer.evaluate(same);
  BOOST_TEST(callback->detections() == 1);
  BOOST_TEST(!run.trainer.state().stop_requested());  // only a warning by default

  auto varied = batches_of({logits({1, 1, 1}), logits({1, 2})});
  run.trainer.evaluate(varied);
  BOOST_TEST(callback->detections() == 1);
}

BOOST_AUTO_TEST_CASE(a_difference_in_a_later_batch_counts) {
  PredictionRun run;
  auto callback = std::make_shared<AllPredictionsSame>();
  run.trainer.add(callback);
  auto data = batches_of({logits({0, 0}), logits({0, 0}), logits({0, 2})});
  run.trainer.evaluate(data);
  BOOST_TEST(callback->detections() == 0);
}

BOOST_AUTO_TEST_CASE(values_without_a_class_dimension) {
  PredictionRun run;
  auto callback = std::make_shared<AllPredictionsSame>();
  run.trainer.add(callback);
  auto constant = batches_of({torch::full({4, 1}, 0.5), torch::full({2, 1}, 0.5)});
  run.trainer.evaluate(constant);
  BOOST_TEST(callback->detections() == 1);
  auto varying = batches_of({torch::full({4, 1}, 0.5), torch::full({2, 1}, 0.25)});
  run.trainer.evaluate(varying);
  BOOST_TEST(callback->detections() == 1);

  // argmax(false): raw values, so different logits with one argmax are not "the same".
  PredictionRun raw;
  auto values = std::make_shared<AllPredictionsSame>(AllPredictionsSameOptions().argmax(false));
  raw.trainer.add(values);
  auto data = batches_of({logits({1, 1, 1})});
  raw.trainer.evaluate(data);
  BOOST_TEST(values->detections() == 0);
}

BOOST_AUTO_TEST_CASE(stop_option_ends_the_fit) {
  // A model whose last layer has zero weights and a bias favouring class 2 predicts 2 for every
  // input; with stop(true) the run ends after the first epoch's evaluation.
  auto model = make_model();
  {
    torch::NoGradGuard no_grad;
    auto last = model->ptr<torch::nn::LinearImpl>(2);
    last->weight.zero_();
    last->bias.copy_(torch::tensor({0.0, 0.0, 5.0}));
  }
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.0));
  Trainer trainer(model, sgd, cross_entropy,
                  TrainerOptions().max_epochs(5).use_registered_subscriptions(false));
  auto callback = std::make_shared<AllPredictionsSame>(AllPredictionsSameOptions().stop(true));
  trainer.add(callback);
  auto train = make_batches(2, 4);
  auto validation = make_batches(2, 4);
  trainer.fit(train, validation);
  const auto& state = trainer.state();
  BOOST_TEST(state.stop_requested());
  BOOST_TEST(state.epoch == 1);
  BOOST_TEST(contains(state.stop_reason(), "all 8 predictions"));
  BOOST_TEST(contains(state.stop_reason(), "are 2"));
}

BOOST_AUTO_TEST_CASE(missing_output_is_a_config_error) {
  PredictionRun run;
  run.trainer.set_eval_step([](Trainer& t, Batch& batch) {
    t.state().tensors.set("scores", batch.data);
    return batch.data.sum();
  });
  run.trainer.add(std::make_shared<AllPredictionsSame>());
  auto data = batches_of({logits({0})});
  BOOST_CHECK_EXCEPTION(run.trainer.evaluate(data), ConfigError, [](const ConfigError& error) {
    return contains(error.what(), "'output'") &&
           contains(error.what(), "present: loss, target, scores") &&
           contains(error.what(), "state.set_batch_output");
  });
  BOOST_CHECK_THROW(AllPredictionsSame(AllPredictionsSameOptions().output("")), ConfigError);
}

BOOST_AUTO_TEST_CASE(state_round_trips) {
  PredictionRun run;
  auto callback = std::make_shared<AllPredictionsSame>();
  run.trainer.add(callback);
  auto same = batches_of({logits({1, 1, 1})});
  run.trainer.evaluate(same);
  run.trainer.evaluate(same);
  BOOST_REQUIRE(callback->detections() == 2);

  torch::serialize::OutputArchive out;
  callback->save_state(out);
  std::stringstream stream;
  out.save_to(stream);
  torch::serialize::InputArchive in;
  in.load_from(stream);
  AllPredictionsSame restored;
  restored.load_state(in);
  BOOST_TEST(restored.detections() == 2);
  BOOST_TEST((restored.role() == Role::Monitor));
  BOOST_TEST(restored.name() == "all_predictions_same");
}

BOOST_AUTO_TEST_CASE(a_state_without_its_entry_is_a_checkpoint_error_naming_it) {
  torch::serialize::OutputArchive out;
  out.write("something_else", c10::IValue(std::int64_t{1}));
  std::stringstream stream;
  out.save_to(stream);
  torch::serialize::InputArchive in;
  in.load_from(stream);
  AllPredictionsSame restored;
  BOOST_TEST(has(message_of<CheckpointError>([&] { restored.load_state(in); }),
                 "the checkpoint has no entry 'detections'"));
}

BOOST_AUTO_TEST_SUITE_END()
