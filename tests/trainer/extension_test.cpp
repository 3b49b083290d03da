// Custom steps, subclassing, callbacks that learn their trainer, decorators on a trainer.

#include <boost/test/unit_test.hpp>
#include <support/fixtures.hpp>
#include <support/recorder.hpp>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

/// pytorch-accelerated style: override the steps; callbacks run after the hook of the same point.
class TracingTrainer : public Trainer {
 public:
  using Trainer::Trainer;
  std::vector<std::string>* trace = nullptr;

 protected:
  at::Tensor train_step(Batch& batch) override {
    trace->emplace_back("hook:train_step");
    auto output = forward(batch.data);
    auto loss = compute_loss(output, batch.target);
    state().tensors.set("loss", loss);
    return loss;
  }
  void optimizer_step() override {
    trace->emplace_back("hook:optimizer_step");
    Trainer::optimizer_step();
  }
};

class ReadsItsTrainer : public Callback {
 public:
  std::int64_t k_seen = 0;
  void on_added(Trainer& trainer) override { k_seen = trainer.options().accumulate_grad_batches(); }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(extension)

BOOST_AUTO_TEST_CASE(subclass_hooks_run_before_callbacks_of_the_same_point) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  TracingTrainer trainer(model, sgd, cross_entropy,
                         TrainerOptions().use_registered_subscriptions(false));
  std::vector<std::string> trace;
  trainer.trace = &trace;
  trainer.on(Event::BeforeBackward, [&](State& s) {
    trace.push_back(s.tensors.contains("loss") ? "BeforeBackward(loss)" : "BeforeBackward");
  });
  trainer.on(Event::AfterOptimizerStep, [&](State&) { trace.emplace_back("AfterOptimizerStep"); });
  auto batches = make_batches(1, 4);
  trainer.fit(batches);
  BOOST_TEST(trace == (std::vector<std::string>{"hook:train_step", "BeforeBackward(loss)",
                                                "hook:optimizer_step", "AfterOptimizerStep"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(custom_steps_without_subclassing) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, sgd, cross_entropy, TrainerOptions().use_registered_subscriptions(false));
  trainer.set_train_step([](Trainer& t, Batch& batch) {
    auto output = t.forward(batch.data);
    t.state().tensors.set("confidence", torch::softmax(output, 1).max());
    return t.compute_loss(output, batch.target);
  });
  int eval_calls = 0;
  trainer.set_eval_step([&](Trainer& t, Batch& batch) {
    ++eval_calls;
    return t.compute_loss(t.forward(batch.data), batch.target);
  });
  std::vector<double> confidences;
  trainer.on(Event::BatchEnd,
             [&](State& s) { confidences.push_back(s.tensors.get("confidence").item<double>()); });
  auto batches = make_batches(3, 4);
  auto validation = make_batches(2, 4);
  trainer.fit(batches, validation);
  BOOST_TEST(confidences.size() == 3u);
  for (double c : confidences) BOOST_TEST((c > 0.0 && c <= 1.0));
  BOOST_TEST(eval_calls == 2);
}

BOOST_AUTO_TEST_CASE(callback_learns_its_trainer_when_added) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, sgd, cross_entropy,
                  TrainerOptions().accumulate_grad_batches(5).use_registered_subscriptions(false));
  auto callback = std::make_shared<ReadsItsTrainer>();
  trainer.add(callback);
  BOOST_TEST(callback->k_seen == 5);
}

BOOST_AUTO_TEST_CASE(decorated_lambdas_and_filters_on_a_trainer) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, sgd, cross_entropy,
                  TrainerOptions().max_epochs(2).use_registered_subscriptions(false));
  std::vector<std::int64_t> steps;
  trainer.add(on_step_end(every(3), [&](State& s) { steps.push_back(s.step); }));
  auto batches = make_batches(5, 4);
  trainer.fit(batches);
  BOOST_TEST(steps == (std::vector<std::int64_t>{3, 6, 9}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(custom_event_emitted_from_a_custom_train_step) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, sgd, cross_entropy, TrainerOptions().use_registered_subscriptions(false));
  const auto verified = trainer.bus().register_event("batch_verified");
  std::vector<std::int64_t> verified_batches;
  trainer.bus().on("batch_verified", [&](State& s) { verified_batches.push_back(s.global_batch); });
  trainer.set_train_step([verified](Trainer& t, Batch& batch) {
    if (batch.data.isfinite().all().item<bool>()) verified.emit(t.state());
    return t.compute_loss(t.forward(batch.data), batch.target);
  });
  auto batches = make_batches(3, 4);
  trainer.fit(batches);
  BOOST_TEST(verified_batches == (std::vector<std::int64_t>{0, 1, 2}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
