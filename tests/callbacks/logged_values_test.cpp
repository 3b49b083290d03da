// What loggers read from State (logged_values.hpp): the learning rate, and the warnings about a
// value that cannot be logged, written once.

#include <torch/torch.h>
#include <boost/test/unit_test.hpp>
#include <support/captured_log.hpp>
#include <support/errors.hpp>
#include <torchbus/callback.hpp>
#include <torchbus/callbacks/logged_values.hpp>
#include <torchbus/state.hpp>

#include <optional>
#include <string>
#include <vector>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

/// Options of an optimizer that does not say its learning rate (get_lr is not overridden).
struct NoLrOptions : torch::optim::OptimizerCloneableOptions<NoLrOptions> {};

/// The one warning `warn` writes (checked to be exactly one).
template <typename Warn>
std::string warning_of(Warn warn) {
  CapturedLog log;
  warn();
  const auto warnings = log.messages("warning");
  BOOST_TEST_REQUIRE(warnings.size() == 1u);
  return warnings[0];
}

}  // namespace

BOOST_AUTO_TEST_SUITE(logged_values)

BOOST_AUTO_TEST_CASE(the_learning_rate_is_read_from_the_first_parameter_group) {
  auto weight = torch::zeros({2}, torch::requires_grad());
  torch::optim::SGD sgd({weight}, torch::optim::SGDOptions(0.25));
  sgd.add_param_group(
      torch::optim::OptimizerParamGroup({torch::zeros({1}, torch::requires_grad())},
                                        std::make_unique<torch::optim::SGDOptions>(0.5)));
  State state;
  state.optimizer = &sgd;
  const Callback logger("csv");
  bool warned = false;
  CapturedLog log;
  BOOST_TEST(learning_rate_or_warn_once(state, warned, {"CsvLogger", logger}, "-").value() == 0.25);
  static_cast<torch::optim::SGDOptions&>(sgd.param_groups()[0].options()).lr(0.125);
  BOOST_TEST(learning_rate_or_warn_once(state, warned, {"CsvLogger", logger}, "-").value() ==
             0.125);
  BOOST_TEST(!warned);
  BOOST_TEST(log.messages("warning").empty());
}

BOOST_AUTO_TEST_CASE(a_missing_learning_rate_is_warned_about_once) {
  State state;  // no optimizer
  const Callback logger("csv");
  bool warned = false;
  CapturedLog log;
  for (int i = 0; i < 3; ++i) {
    BOOST_TEST(!learning_rate_or_warn_once(state, warned, {"CsvLogger", logger},
                                           "the lr column stays empty"));
  }
  BOOST_TEST(warned);
  const auto warnings = log.messages("warning");
  BOOST_TEST_REQUIRE(warnings.size() == 1u);
  BOOST_TEST(warnings[0] ==
             "CsvLogger 'csv': cannot read the learning rate (the optimizer has no parameter "
             "group); the lr column stays empty (reported once)");
}

BOOST_AUTO_TEST_CASE(options_without_a_learning_rate_are_named_in_one_line) {
  auto weight = torch::zeros({2}, torch::requires_grad());
  torch::optim::SGD sgd({weight}, torch::optim::SGDOptions(0.1));
  sgd.param_groups()[0].set_options(std::make_unique<NoLrOptions>());
  State state;
  state.optimizer = &sgd;
  const Callback logger("report");
  bool warned = false;
  const auto warning = warning_of([&] {
    BOOST_TEST(!learning_rate_or_warn_once(state, warned, {"RunReport", logger}, "no chart"));
    BOOST_TEST(!learning_rate_or_warn_once(state, warned, {"RunReport", logger}, "no chart"));
  });
  BOOST_TEST(contains(warning, "RunReport 'report': cannot read the learning rate ("), warning);
  BOOST_TEST(contains(warning, "get_lr()"), warning);
  BOOST_TEST(!contains(warning, "\n"), warning);  // no LibTorch backtrace
}

BOOST_AUTO_TEST_CASE(a_tensor_that_cannot_be_logged_is_described) {
  State state;
  state.step = 7;
  state.tensors.set("confidence", torch::tensor(0.5));
  state.tensors.set("logits", torch::zeros({2, 3}));
  const Callback logger("log");
  const WarningSource source{"SimpleLogger", logger};
  auto warn = [&](const std::string& name, const at::Tensor* tensor) {
    return warning_of(
        [&] { warn_tensor_not_logged(state, name, tensor, source, "it is skipped"); });
  };
  BOOST_TEST(
      warn("accuracy", nullptr) ==
      "SimpleLogger 'log': no tensor named 'accuracy' at step 7 (present: confidence, logits); it "
      "is skipped (reported once)");
  const at::Tensor undefined;
  BOOST_TEST(warn("x", &undefined) ==
             "SimpleLogger 'log': tensor 'x' is undefined at step 7; it is skipped (reported "
             "once)");
  const auto complex = torch::zeros({1}, torch::kComplexFloat);
  BOOST_TEST(warn("z", &complex) ==
             "SimpleLogger 'log': tensor 'z' of shape [1] is complex at step 7; it is skipped "
             "(reported once)");
  const auto empty = torch::zeros({0, 3});
  BOOST_TEST(warn("e", &empty) ==
             "SimpleLogger 'log': tensor 'e' of shape [0, 3] is empty at step 7; it is skipped "
             "(reported once)");
  BOOST_TEST(warn("logits", state.tensors.find("logits")) ==
             "SimpleLogger 'log': tensor 'logits' of shape [2, 3] is not a scalar at step 7; it is "
             "skipped (reported once)");
  State nothing;
  BOOST_TEST(
      contains(warning_of([&] { warn_tensor_not_logged(nothing, "loss", nullptr, source, "-"); }),
               "(present: none)"));
}

// The framework's names stand for State's typed values, whatever the store holds under them.
BOOST_AUTO_TEST_CASE(the_framework_names_are_the_typed_values) {
  State state;
  const auto output = torch::ones({2, 3});
  state.set_batch_output(output);
  state.tensors.set("output", torch::zeros({2, 3}));  // a custom step's own tensor
  state.tensors.set("loss", torch::tensor(0.5));
  state.tensors.set("step_loss", torch::tensor(0.5));
  state.tensors.set("confidence", torch::tensor(0.25));
  BOOST_TEST(find_step_tensor(state, "output") == &state.batch_output());
  BOOST_TEST(find_step_tensor(state, "output")->is_same(output));
  // No batch loss, no step loss, no target outside a run: none, though the store has them.
  BOOST_TEST(find_step_tensor(state, "loss") == nullptr);
  BOOST_TEST(find_step_tensor(state, "step_loss") == nullptr);
  BOOST_TEST(find_step_tensor(state, "target") == nullptr);
  BOOST_TEST(find_step_tensor(state, "confidence") == state.tensors.find("confidence"));
  BOOST_TEST(find_step_tensor(state, "accuracy") == nullptr);
  BOOST_TEST(step_tensor_names(state) == (std::vector<std::string>{"output", "confidence"}));
}

BOOST_AUTO_TEST_SUITE_END()
