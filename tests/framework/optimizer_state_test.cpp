// optimizer_state_of finds each parameter's own optimizer state, under LibTorch 1.13 (states keyed
// by the TensorImpl's printed address) and 2.x (by the pointer).

#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <boost/test/unit_test.hpp>
#include <torchbus/optimizer_state.hpp>

BOOST_AUTO_TEST_SUITE(optimizer_state)

BOOST_AUTO_TEST_CASE(each_parameter_finds_its_own_adam_moments) {
  torch::manual_seed(2);
  torch::nn::Linear model(3, 2);
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.1));
  for (const auto& parameter : model->parameters()) {
    BOOST_TEST(torchbus::optimizer_state_of(adam, parameter) == nullptr);  // no step yet
  }
  model->forward(torch::randn({4, 3})).pow(2).sum().backward();
  adam.step();
  BOOST_TEST(adam.state().size() == 2u);
  const auto& constant = static_cast<const torch::optim::Optimizer&>(adam);
  for (const auto& parameter : model->parameters()) {
    auto* state = torchbus::optimizer_state_of(adam, parameter);
    BOOST_TEST_REQUIRE(state != nullptr);
    BOOST_TEST(torchbus::optimizer_state_of(constant, parameter) == state);
    // After one step Adam's first moment is (1 - beta1) * grad: this parameter's, no other's.
    const auto& moments = static_cast<const torch::optim::AdamParamState&>(*state);
    BOOST_TEST(moments.step() == 1);
    BOOST_TEST(torch::allclose(moments.exp_avg(), 0.1 * parameter.grad()));
  }
  BOOST_TEST(torchbus::optimizer_state_of(adam, torch::zeros({2, 3})) == nullptr);  // not its
}

BOOST_AUTO_TEST_SUITE_END()
