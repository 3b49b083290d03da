// Parameters by name: frozen parts of a model stay as they were, groups take their own learning
// rates, patterns that match nothing are named.

#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <torchbus/callbacks/parameter_selection.hpp>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

/// A backbone (Linear 4 -> 8) and a head (Linear 8 -> 3), by those names.
struct TwoPartImpl : torch::nn::Module {
  TwoPartImpl()
      : backbone(register_module("backbone", torch::nn::Linear(4, 8))),
        head(register_module("head", torch::nn::Linear(8, 3))) {
    torch::manual_seed(3);
    for (auto& parameter : parameters()) {
      torch::NoGradGuard no_grad;
      parameter.uniform_(-0.5, 0.5);
    }
  }
  at::Tensor forward(const at::Tensor& input) { return head(torch::relu(backbone(input))); }
  torch::nn::Linear backbone;
  torch::nn::Linear head;
};

/// `model`'s weights after one epoch of SGD over four batches, through the trainer.
void train_one_epoch(const std::shared_ptr<TwoPartImpl>& model,
                     torch::optim::Optimizer& optimizer) {
  Trainer trainer(model, optimizer, cross_entropy,
                  TrainerOptions().use_registered_subscriptions(false));
  auto batches = make_batches(4, 4);
  trainer.fit(batches);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(parameter_selection)

BOOST_AUTO_TEST_CASE(a_frozen_backbone_keeps_its_weights) {
  auto model = std::make_shared<TwoPartImpl>();
  const auto backbone_before = snapshot(*model->backbone);
  const auto head_before = snapshot(*model->head);
  BOOST_TEST(set_trainable(*model, "backbone.*", false) == 2);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  train_one_epoch(model, sgd);
  BOOST_TEST(all_equal(snapshot(*model->backbone), backbone_before));
  BOOST_TEST(!all_equal(snapshot(*model->head), head_before));
  BOOST_TEST(!model->backbone->weight.requires_grad());
  BOOST_TEST(set_trainable(*model, "backbone.*", true) == 2);
  BOOST_TEST(model->backbone->weight.requires_grad());
}

BOOST_AUTO_TEST_CASE(split_parameters_gives_groups_their_own_learning_rates) {
  auto model = std::make_shared<TwoPartImpl>();
  const auto groups = split_parameters(*model, {"backbone.*"});
  BOOST_TEST_REQUIRE(groups.size() == 2u);
  BOOST_TEST_REQUIRE(groups[0].size() == 2u);
  BOOST_TEST(groups[0][0].is_same(model->backbone->weight));
  BOOST_TEST(groups[0][1].is_same(model->backbone->bias));
  BOOST_TEST_REQUIRE(groups[1].size() == 2u);
  BOOST_TEST(groups[1][0].is_same(model->head->weight));
  // The backbone's group at a tenth of the head's rate: the same run as a model trained with one
  // group at 0.1 where the backbone's gradients are scaled by a tenth (plain SGD is linear in
  // its rate).
  std::vector<torch::optim::OptimizerParamGroup> param_groups{
      torch::optim::OptimizerParamGroup(groups[0],
                                        std::make_unique<torch::optim::SGDOptions>(0.01)),
      torch::optim::OptimizerParamGroup(groups[1])};
  torch::optim::SGD grouped(param_groups, torch::optim::SGDOptions(0.1));
  train_one_epoch(model, grouped);
  auto reference = std::make_shared<TwoPartImpl>();
  torch::optim::SGD plain(reference->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(reference, plain, cross_entropy,
                  TrainerOptions().use_registered_subscriptions(false));
  trainer.on(Event::BeforeOptimizerStep, [&](State&) {
    for (auto& parameter : reference->backbone->parameters()) parameter.mutable_grad().mul_(0.1);
  });
  auto batches = make_batches(4, 4);
  trainer.fit(batches);
  const auto trained = snapshot(*model);
  const auto expected = snapshot(*reference);
  BOOST_REQUIRE(trained.size() == expected.size());
  for (std::size_t i = 0; i < trained.size(); ++i) {
    BOOST_TEST(torch::allclose(trained[i], expected[i], 1e-6, 1e-7));
  }
}

BOOST_AUTO_TEST_CASE(a_parameter_goes_to_the_first_pattern_it_matches) {
  auto model = std::make_shared<TwoPartImpl>();
  const auto groups = split_parameters(*model, {"*.weight", "*"});
  BOOST_TEST(groups[0].size() == 2u);  // both weights
  BOOST_TEST(groups[1].size() == 2u);  // both biases
  BOOST_TEST(groups[2].empty());       // nothing left
}

BOOST_AUTO_TEST_CASE(patterns_that_match_nothing_are_config_errors) {
  auto model = std::make_shared<TwoPartImpl>();
  const auto message = message_of<ConfigError>([&] { parameters_matching(*model, "encoder.*"); });
  BOOST_TEST(has(message, "no parameter name matches 'encoder.*'"), message);
  BOOST_TEST(has(message, "backbone.weight, backbone.bias, head.weight, head.bias"), message);
  BOOST_TEST(has(message_of<ConfigError>([&] {
                   split_parameters(*model, {"*", "head.*"});
                 }),
                 "pattern 2 'head.*' matches no parameter the patterns before it left"));
  BOOST_TEST(has(message_of<ConfigError>([&] { set_trainable(*model, "backbone", false); }),
                 "no parameter name matches 'backbone'"));
}

BOOST_AUTO_TEST_SUITE_END()
