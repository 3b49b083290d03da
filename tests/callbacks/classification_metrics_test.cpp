// ClassificationMetrics against a hand-computed confusion matrix, inside evaluate() and fit().

#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <torchbus/callbacks/classification_metrics.hpp>

#include <sstream>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

bool equal_within_1e12(double a, double b) {
  return std::abs(a - b) <= 1e-12;
}

/// Logits whose argmax is `predictions`, for `classes` classes.
at::Tensor logits_for(const std::vector<std::int64_t>& predictions, std::int64_t classes) {
  auto logits = torch::zeros({static_cast<std::int64_t>(predictions.size()), classes});
  for (std::size_t i = 0; i < predictions.size(); ++i) {
    logits[static_cast<std::int64_t>(i)][predictions[i]] = 1.0;
  }
  return logits;
}

at::Tensor labels(const std::vector<std::int64_t>& values) {
  return torch::tensor(values, torch::kLong);
}

/// A trainer whose eval step takes each batch's data as the model's output (logits given).
struct EvalRun {
  torch::nn::Sequential model = make_model();
  torch::optim::SGD sgd{model->parameters(), torch::optim::SGDOptions(0.1)};
  Trainer trainer{model, sgd, cross_entropy, TrainerOptions().use_registered_subscriptions(false)};

  EvalRun() {
    trainer.set_eval_step([](Trainer& t, Batch& batch) {
      t.state().set_batch_output(batch.data);
      return t.compute_loss(batch.data, batch.target);
    });
  }
  double metric(const std::string& name) { return trainer.state().metrics.latest(name).value; }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(classification_metrics)

BOOST_AUTO_TEST_CASE(matches_a_hand_computation) {
  // targets     0 0 1 1 | 2 2 2 0
  // predictions 0 1 1 1 | 2 0 2 0
  // confusion (rows: true, columns: predicted): [[2, 1, 0], [0, 2, 0], [1, 0, 2]]
  EvalRun run;
  auto metrics = std::make_shared<ClassificationMetrics>();
  run.trainer.add(metrics);
  std::vector<Batch> batches;
  batches.emplace_back(logits_for({0, 1, 1, 1}, 3), labels({0, 0, 1, 1}));
  batches.emplace_back(logits_for({2, 0, 2, 0}, 3), labels({2, 2, 2, 0}));
  run.trainer.evaluate(batches);

  const auto expected = torch::tensor({2, 1, 0, 0, 2, 0, 1, 0, 2}, torch::kLong).reshape({3, 3});
  BOOST_TEST(torch::equal(metrics->confusion_matrix(), expected));
  BOOST_TEST(torch::equal(run.trainer.state().tensors.get("confusion_matrix"), expected));
  BOOST_TEST(metrics->num_classes() == 3);

  // precision: 2/3, 2/3, 2/2; recall: 2/3, 2/2, 2/3; F1: 2/3, 0.8, 0.8.
  BOOST_TEST(equal_within_1e12(run.metric("val_accuracy"), 6.0 / 8.0));
  BOOST_TEST(equal_within_1e12(run.metric("val_precision"), (2.0 / 3 + 2.0 / 3 + 1.0) / 3));
  BOOST_TEST(equal_within_1e12(run.metric("val_recall"), (2.0 / 3 + 1.0 + 2.0 / 3) / 3));
  BOOST_TEST(equal_within_1e12(run.metric("val_f1"), (2.0 / 3 + 0.8 + 0.8) / 3));
  BOOST_TEST(equal_within_1e12(run.metric("val_precision_class_0"), 2.0 / 3));
  BOOST_TEST(equal_within_1e12(run.metric("val_precision_class_2"), 1.0));
  BOOST_TEST(equal_within_1e12(run.metric("val_recall_class_1"), 1.0));
  BOOST_TEST(equal_within_1e12(run.metric("val_recall_class_2"), 2.0 / 3));
  BOOST_TEST(equal_within_1e12(run.metric("val_f1_class_0"), 2.0 / 3));
  BOOST_TEST(equal_within_1e12(run.metric("val_f1_class_1"), 0.8));
}

BOOST_AUTO_TEST_CASE(absent_classes_count_as_zero_and_prefix) {
  // 4 classes configured, class 3 never appears: its precision, recall and F1 are 0 and the
  // macro means are over 4 classes. All predictions correct otherwise.
  EvalRun run;
  auto metrics = std::make_shared<ClassificationMetrics>(
      ClassificationMetricsOptions().num_classes(4).prefix("test_").per_class(false));
  run.trainer.add(metrics);
  std::vector<Batch> batches;
  batches.emplace_back(logits_for({0, 1, 2, 2}, 4), labels({0, 1, 2, 2}));
  run.trainer.evaluate(batches);
  BOOST_TEST(equal_within_1e12(run.metric("test_accuracy"), 1.0));
  BOOST_TEST(equal_within_1e12(run.metric("test_precision"), 0.75));
  BOOST_TEST(equal_within_1e12(run.metric("test_recall"), 0.75));
  BOOST_TEST(equal_within_1e12(run.metric("test_f1"), 0.75));
  BOOST_TEST(!run.trainer.state().metrics.contains("test_f1_class_0"));
  BOOST_TEST(metrics->confusion_matrix().sizes() == (std::vector<std::int64_t>{4, 4}));
}

BOOST_AUTO_TEST_CASE(dense_outputs_with_extra_dimensions) {
  // Segmentation-like: output [N, C, L], target [N, L].
  EvalRun run;
  auto metrics = std::make_shared<ClassificationMetrics>();
  run.trainer.add(metrics);
  auto output = torch::zeros({1, 2, 3});
  output[0][1][0] = 1.0;  // position 0 predicts 1, positions 1 and 2 predict 0
  std::vector<Batch> batches;
  batches.emplace_back(output, labels({1, 1, 0}).reshape({1, 3}));
  run.trainer.evaluate(batches);
  const auto expected = torch::tensor({1, 0, 1, 1}, torch::kLong).reshape({2, 2});
  BOOST_TEST(torch::equal(metrics->confusion_matrix(), expected));
}

BOOST_AUTO_TEST_CASE(each_evaluation_of_a_fit_starts_afresh) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, sgd, cross_entropy,
                  TrainerOptions().max_epochs(3).use_registered_subscriptions(false));
  trainer.add(std::make_shared<ClassificationMetrics>());
  std::vector<std::int64_t> totals;
  trainer.on(Event::EpochEnd, [&](State& state) {
    totals.push_back(state.tensors.get("confusion_matrix").sum().item<std::int64_t>());
  });
  // The accuracy recorded equals one computed from the model on the validation data.
  std::vector<double> accuracy_by_hand;
  auto validation = make_batches(3, 5, 4, 3, 21);
  trainer.on(
      Event::EvalEnd,
      [&](State&) {
        std::int64_t correct = 0;
        for (auto& batch : validation) {
          correct +=
              model->forward(batch.data).argmax(1).eq(batch.target).sum().item<std::int64_t>();
        }
        accuracy_by_hand.push_back(static_cast<double>(correct) / 15.0);
      },
      -200);
  auto train = make_batches(4, 4);
  trainer.fit(train, validation);
  BOOST_TEST(totals == (std::vector<std::int64_t>{15, 15, 15}), boost::test_tools::per_element());
  const auto& series = trainer.state().metrics.series("val_accuracy");
  BOOST_REQUIRE_EQUAL(series.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i)
    BOOST_TEST(equal_within_1e12(series[i].value, accuracy_by_hand[i]));
}

BOOST_AUTO_TEST_CASE(bad_input) {
  BOOST_CHECK_THROW(ClassificationMetrics(ClassificationMetricsOptions().num_classes(1)),
                    ConfigError);
  BOOST_CHECK_THROW(ClassificationMetrics(ClassificationMetricsOptions().num_classes(-2)),
                    ConfigError);
  BOOST_CHECK_THROW(ClassificationMetrics(ClassificationMetricsOptions().output("")), ConfigError);

  {  // more classes in the output than configured
    EvalRun run;
    run.trainer.add(
        std::make_shared<ClassificationMetrics>(ClassificationMetricsOptions().num_classes(2)));
    std::vector<Batch> batches;
    batches.emplace_back(logits_for({0, 2}, 3), labels({0, 2}));
    BOOST_CHECK_EXCEPTION(run.trainer.evaluate(batches), DataError, [](const DataError& error) {
      return contains(error.what(), "has 3 class scores") && contains(error.what(), "expected 2");
    });
  }
  {  // a target outside [0, C)
    EvalRun run;
    run.trainer.set_eval_step([](Trainer& t, Batch& batch) {
      t.state().set_batch_output(batch.data);
      return batch.data.sum();
    });
    run.trainer.add(std::make_shared<ClassificationMetrics>());
    std::vector<Batch> batches;
    batches.emplace_back(logits_for({0, 1}, 3), labels({0, 5}));
    BOOST_CHECK_THROW(run.trainer.evaluate(batches), DataError);
  }
  {  // a custom eval step that stores no output
    auto model = make_model();
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
    Trainer trainer(model, sgd, cross_entropy,
                    TrainerOptions().use_registered_subscriptions(false));
    trainer.set_eval_step([](Trainer& t, Batch& batch) {
      auto logits = t.forward(batch.data);
      t.state().tensors.set("logits", logits);
      return t.compute_loss(logits, batch.target);
    });
    trainer.add(std::make_shared<ClassificationMetrics>());
    auto batches = make_batches(1, 4);
    BOOST_CHECK_EXCEPTION(trainer.evaluate(batches), ConfigError, [](const ConfigError& error) {
      return contains(error.what(), "'output'") &&
             contains(error.what(), "present: loss, target, logits") &&
             contains(error.what(), "state.set_batch_output");
    });
  }
}

BOOST_AUTO_TEST_CASE(state_round_trips) {
  EvalRun run;
  auto metrics = std::make_shared<ClassificationMetrics>();
  run.trainer.add(metrics);
  std::vector<Batch> batches;
  batches.emplace_back(logits_for({0, 1, 1}, 3), labels({0, 0, 2}));
  run.trainer.evaluate(batches);

  torch::serialize::OutputArchive out;
  metrics->save_state(out);
  std::stringstream stream;
  out.save_to(stream);
  torch::serialize::InputArchive in;
  in.load_from(stream);
  ClassificationMetrics restored;
  restored.load_state(in);
  BOOST_TEST(restored.num_classes() == 3);
  BOOST_TEST(torch::equal(restored.confusion_matrix(), metrics->confusion_matrix()));

  // A state for 3 classes does not fit a callback configured for 5.
  std::stringstream again;
  torch::serialize::OutputArchive out2;
  metrics->save_state(out2);
  out2.save_to(again);
  torch::serialize::InputArchive in2;
  in2.load_from(again);
  ClassificationMetrics five(ClassificationMetricsOptions().num_classes(5));
  BOOST_CHECK_THROW(five.load_state(in2), ConfigError);
}

BOOST_AUTO_TEST_CASE(default_role_and_name) {
  ClassificationMetrics metrics;
  BOOST_TEST((metrics.role() == Role::Metrics));
  BOOST_TEST(metrics.name() == "classification_metrics");
}

BOOST_AUTO_TEST_SUITE_END()
