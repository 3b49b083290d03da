// detect_anomaly and deterministic: LibTorch's process-wide modes, set for each action and put
// back after it, also when it throws.

#include <ATen/Context.h>
#include <torch/csrc/autograd/anomaly_mode.h>
#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>

#include <stdexcept>

using namespace torchbus;
using namespace torchbus::testing;
using torch::autograd::AnomalyMode;

namespace {

/// A trainer of make_model() whose forward adds `extra(output)` to the model's output.
struct ModedRun {
  torch::nn::Sequential model = make_model();
  torch::optim::SGD sgd{model->parameters(), torch::optim::SGDOptions(0.1)};
  Trainer trainer;
  std::vector<Batch> batches = make_batches(2, 4);

  ModedRun(TrainerOptions options, std::function<at::Tensor(const at::Tensor&)> extra)
      : trainer(model.ptr(), Trainer::Forward([this, extra](const at::Tensor& input) {
                  const auto output = model->forward(input);
                  return output + extra(output);
                }),
                sgd, cross_entropy, options.use_registered_subscriptions(false)) {}
};

/// 0 whose backward is NaN: sqrt's derivative at 0 (1 / 0) times the 0 gradient of `* 0`.
at::Tensor nan_in_backward(const at::Tensor& output) {
  return torch::sqrt(output * 0) * 0;
}

/// 0, through put_, which has no deterministic implementation (LibTorch alerts on CPU too).
at::Tensor through_put(const at::Tensor& output) {
  auto copy = output.detach().flatten().clone();
  copy.put_(torch::tensor({0, 0}), torch::tensor({1.0F, 2.0F}));
  return copy.sum() * 0;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(process_modes)

BOOST_AUTO_TEST_CASE(detect_anomaly_names_the_backward_that_made_nan_and_is_put_back) {
  BOOST_REQUIRE(!AnomalyMode::is_enabled());
  ModedRun plain(TrainerOptions(), nan_in_backward);
  BOOST_CHECK_NO_THROW(plain.trainer.fit(plain.batches));  // the NaN goes unnoticed
  bool enabled_in_fit = false;
  ModedRun detecting(TrainerOptions().detect_anomaly(true), nan_in_backward);
  detecting.trainer.on(Event::BatchStart,
                       [&](State&) { enabled_in_fit = AnomalyMode::is_enabled(); });
  const auto message =
      message_of<std::exception>([&] { detecting.trainer.fit(detecting.batches); });
  BOOST_TEST(enabled_in_fit);
  BOOST_TEST(has(message, "SqrtBackward0' returned nan values in its 0th output"), message);
  BOOST_TEST(!AnomalyMode::is_enabled());  // put back after the exception
  // A process that enabled it keeps it.
  AnomalyMode::set_enabled(true);
  ModedRun again(TrainerOptions().detect_anomaly(true),
                 [](const at::Tensor& output) { return output * 0; });
  again.trainer.fit(again.batches);
  BOOST_TEST(AnomalyMode::is_enabled());
  AnomalyMode::set_enabled(false);
}

BOOST_AUTO_TEST_CASE(deterministic_refuses_nondeterministic_operations_for_the_action_only) {
  auto& context = at::globalContext();
  BOOST_REQUIRE(!context.deterministicAlgorithms());
  ModedRun unchanged(TrainerOptions(), through_put);
  BOOST_CHECK_NO_THROW(unchanged.trainer.fit(unchanged.batches));
  ModedRun strict(TrainerOptions().deterministic(Determinism::On), through_put);
  bool on_in_fit = false;
  strict.trainer.on(Event::BatchStart,
                    [&](State&) { on_in_fit = at::globalContext().deterministicAlgorithms(); });
  const auto message = message_of<std::exception>([&] { strict.trainer.fit(strict.batches); });
  BOOST_TEST(on_in_fit);
  BOOST_TEST(has(message, "put_ does not have a deterministic implementation"), message);
  BOOST_TEST(!context.deterministicAlgorithms());
  // evaluate() too; WarnOnly trains on.
  BOOST_CHECK_THROW(strict.trainer.evaluate(strict.batches), std::exception);
  ModedRun warning(TrainerOptions().deterministic(Determinism::WarnOnly), through_put);
  BOOST_CHECK_NO_THROW(warning.trainer.fit(warning.batches));
  BOOST_TEST(!context.deterministicAlgorithms());
  // Off lifts a process's setting for the action, and puts it back.
  context.setDeterministicAlgorithms(true, false);
  ModedRun lifted(TrainerOptions().deterministic(Determinism::Off), through_put);
  BOOST_CHECK_NO_THROW(lifted.trainer.fit(lifted.batches));
  BOOST_TEST(context.deterministicAlgorithms());
  context.setDeterministicAlgorithms(false, false);
}

BOOST_AUTO_TEST_SUITE_END()
