// Bad input gets a clear torchbus::Error, and the events that did start still end.

#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <support/recorder.hpp>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

struct Setup {
  torch::nn::Sequential model = make_model();
  torch::optim::SGD optimizer{model->parameters(), torch::optim::SGDOptions(0.1)};
  std::shared_ptr<RecordingCallback> recorder = std::make_shared<RecordingCallback>();
  std::unique_ptr<Trainer> trainer;

  explicit Setup(TrainerOptions options = {}, Trainer::LossFunction loss = cross_entropy) {
    trainer = std::make_unique<Trainer>(model, optimizer, std::move(loss),
                                        options.use_registered_subscriptions(false));
    trainer->add(recorder);
  }
  std::string events() const { return joined(recorder->events); }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(bad_input)

BOOST_AUTO_TEST_CASE(loader_without_batches) {
  Setup setup;
  std::vector<Batch> empty;
  const auto message = message_of<DataError>([&] { setup.trainer->fit(empty); });
  BOOST_TEST(has(message, "yielded no batches in epoch 0"));
  BOOST_TEST(setup.events() == "ActionStart EpochStart Exception EpochEnd ActionEnd");
}

BOOST_AUTO_TEST_CASE(validation_loader_without_batches) {
  Setup setup;
  auto train = make_batches(1, 4);
  std::vector<Batch> empty;
  const auto message = message_of<DataError>([&] { setup.trainer->fit(train, empty); });
  BOOST_TEST(has(message, "evaluation data yielded no batches"));
  BOOST_TEST(has(setup.events(), "EvalStart Exception EvalEnd EpochEnd ActionEnd"));
}

BOOST_AUTO_TEST_CASE(accumulation_of_zero) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  const auto message = message_of<ConfigError>(
      [&] { Trainer(model, sgd, cross_entropy, TrainerOptions().accumulate_grad_batches(0)); });
  BOOST_TEST(has(message, "accumulate_grad_batches must be >= 1"));
  BOOST_TEST(has(message, "got 0"));
}

BOOST_AUTO_TEST_CASE(zero_epochs_and_zero_steps) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  const auto message = message_of<ConfigError>(
      [&] { Trainer(model, sgd, cross_entropy, TrainerOptions().max_epochs(0).max_steps(0)); });
  BOOST_TEST(has(message, "max_epochs is 0 and max_steps is 0"));
  BOOST_CHECK_THROW(Trainer(model, sgd, cross_entropy, TrainerOptions().max_epochs(-1)),
                    ConfigError);
  BOOST_CHECK_THROW(Trainer(model, sgd, cross_entropy,
                            TrainerOptions().gradient_clip_norm(1).gradient_clip_value(1)),
                    ConfigError);
}

BOOST_AUTO_TEST_CASE(minimum_epochs_and_steps_past_the_limits) {
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  const auto refused = [&](const TrainerOptions& options) {
    return message_of<ConfigError>([&] { Trainer(model, sgd, cross_entropy, options); });
  };
  BOOST_TEST(has(refused(TrainerOptions().max_epochs(3).min_epochs(4)),
                 "min_epochs is 4 and max_epochs 3; expected min_epochs <= max_epochs"));
  BOOST_TEST(has(refused(TrainerOptions().max_steps(10).min_steps(11)),
                 "min_steps is 11 and max_steps 10; expected min_steps <= max_steps"));
  BOOST_TEST(has(refused(TrainerOptions().min_epochs(-1)), "min_epochs must be >= 0"));
  BOOST_TEST(
      has(refused(TrainerOptions().min_steps(-2)), "min_steps must be >= 0 (0: none), got -2"));
  BOOST_TEST(has(refused(TrainerOptions().val_every_epoch_fraction(1.5)),
                 "val_every_epoch_fraction must be in (0, 1] (a fraction of an epoch), or 0 for "
                 "never, got 1.5"));
  // Without a limit, any minimum is possible.
  BOOST_CHECK_NO_THROW(Trainer(model, sgd, cross_entropy,
                               TrainerOptions().max_epochs(-1).max_steps(5).min_epochs(9)));
}

BOOST_AUTO_TEST_CASE(loss_that_is_not_a_scalar) {
  Setup setup({}, [](const at::Tensor& output, const at::Tensor& target) {
    return torch::nn::functional::cross_entropy(
        output, target, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  });
  auto batches = make_batches(2, 4);
  const auto message = message_of<DataError>([&] { setup.trainer->fit(batches); });
  BOOST_TEST(has(message, "must return a scalar loss (one element), got shape [4]"));
  BOOST_TEST(
      setup.events() ==
      "ActionStart EpochStart StepStart BatchStart Exception BatchEnd StepEnd EpochEnd ActionEnd");
}

BOOST_AUTO_TEST_CASE(target_that_does_not_fit_the_output) {
  Setup setup;
  std::vector<Batch> batches{Batch(torch::randn({4, 4}), torch::zeros({5}, torch::kLong))};
  const auto message = message_of<DataError>([&] { setup.trainer->fit(batches); });
  BOOST_TEST(has(message, "output of shape [4, 3] and target of shape [5]"));
  BOOST_TEST(has(setup.events(), "BatchStart Exception BatchEnd StepEnd EpochEnd ActionEnd"));
}

BOOST_AUTO_TEST_CASE(input_that_does_not_fit_the_model) {
  Setup setup;
  std::vector<Batch> batches{Batch(torch::randn({4, 7}), torch::zeros({4}, torch::kLong))};
  const auto message = message_of<DataError>([&] { setup.trainer->fit(batches); });
  BOOST_TEST(has(message, "forward failed on an input of shape [4, 7]"));
}

BOOST_AUTO_TEST_CASE(unavailable_device) {
  if (torch::cuda::is_available()) return;  // only meaningful without CUDA
  Setup setup(TrainerOptions().device(torch::Device(torch::kCUDA, 0)));
  auto batches = make_batches(1, 4);
  const auto message = message_of<ConfigError>([&] { setup.trainer->fit(batches); });
  BOOST_TEST(has(message, "CUDA is not available"));
  BOOST_TEST(setup.events().empty());  // nothing started
}

BOOST_AUTO_TEST_CASE(cancel_batch_after_backward) {
  Setup setup;
  setup.trainer->on(Event::AfterBackward, [](State&) { throw CancelBatch(); });
  auto batches = make_batches(1, 4);
  const auto message = message_of<ConfigError>([&] { setup.trainer->fit(batches); });
  BOOST_TEST(has(message, "CancelBatch raised at AfterBackward"));
}

BOOST_AUTO_TEST_SUITE_END()
