// The trainer computes what a hand-written LibTorch loop computes.

#include <boost/test/unit_test.hpp>
#include <support/fixtures.hpp>

using namespace torchbus;
using namespace torchbus::testing;

BOOST_AUTO_TEST_SUITE(equivalence)

BOOST_AUTO_TEST_CASE(accumulating_four_batches_equals_one_batch_four_times_larger) {
  auto batches = make_batches(4, 8);
  auto merged = merge_batches(batches, 4);

  auto accumulated_model = make_model();
  torch::optim::SGD accumulated_sgd(accumulated_model->parameters(), torch::optim::SGDOptions(0.5));
  Trainer accumulated(
      accumulated_model, accumulated_sgd, cross_entropy,
      TrainerOptions().accumulate_grad_batches(4).use_registered_subscriptions(false));
  accumulated.fit(batches);

  auto large_model = make_model();
  torch::optim::SGD large_sgd(large_model->parameters(), torch::optim::SGDOptions(0.5));
  Trainer large(large_model, large_sgd, cross_entropy,
                TrainerOptions().use_registered_subscriptions(false));
  large.fit(merged);

  BOOST_TEST(accumulated.state().step == 1);
  BOOST_TEST(large.state().step == 1);
  const auto a = accumulated_model->parameters();
  const auto b = large_model->parameters();
  for (std::size_t i = 0; i < a.size(); ++i) {
    BOOST_TEST((a[i] - b[i]).abs().max().item<double>() < 1e-6);
  }
}

BOOST_AUTO_TEST_CASE(trainer_without_callbacks_equals_a_hand_written_loop_bitwise) {
  auto batches = make_batches(6, 8);
  const int epochs = 3;

  auto trained_model = make_model();
  torch::optim::Adam trained_adam(trained_model->parameters(), torch::optim::AdamOptions(1e-2));
  Trainer trainer(trained_model, trained_adam, cross_entropy,
                  TrainerOptions().max_epochs(epochs).use_registered_subscriptions(false));
  trainer.fit(batches);

  auto hand_model = make_model();
  torch::optim::Adam hand_adam(hand_model->parameters(), torch::optim::AdamOptions(1e-2));
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (const auto& batch : batches) {
      hand_adam.zero_grad();
      auto loss = cross_entropy(hand_model->forward(batch.data), batch.target);
      loss.backward();
      hand_adam.step();
    }
  }

  const auto a = trained_model->parameters();
  const auto b = hand_model->parameters();
  BOOST_TEST_REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) BOOST_TEST(torch::equal(a[i], b[i]));
  BOOST_TEST(!torch::equal(a[0], make_model()->parameters()[0]));  // training did change weights
}

// Released gradients (the default) and zeroed ones give the same weights, bit for bit, with
// momentum, weight decay and accumulation; between steps the gradients are undefined or zero.
BOOST_AUTO_TEST_CASE(released_and_zeroed_gradients_train_the_same_weights) {
  auto batches = make_batches(6, 8);
  std::vector<std::vector<at::Tensor>> weights;
  for (const bool set_to_none : {true, false}) {
    auto model = make_model();
    torch::optim::SGD sgd(model->parameters(),
                          torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-3));
    Trainer trainer(model, sgd, cross_entropy,
                    TrainerOptions()
                        .max_epochs(2)
                        .accumulate_grad_batches(2)
                        .set_grads_to_none(set_to_none)
                        .use_registered_subscriptions(false));
    std::vector<std::string> between_steps;
    trainer.on(Event::StepEnd, [&](State& state) {
      const auto grad = state.model->parameters()[0].grad();
      between_steps.push_back(!grad.defined()                               ? "undefined"
                              : torch::equal(grad, torch::zeros_like(grad)) ? "zero"
                                                                            : "other");
    });
    trainer.fit(batches);
    BOOST_TEST(between_steps == std::vector<std::string>(6, set_to_none ? "undefined" : "zero"),
               boost::test_tools::per_element());
    weights.push_back(model->parameters());
  }
  for (std::size_t i = 0; i < weights[0].size(); ++i) {
    BOOST_TEST(torch::equal(weights[0][i], weights[1][i]));
  }
}

namespace {
/// Identity whose backward doubles the incoming gradient in place: it writes to the tensor
/// backward starts from.
struct DoubleGradientInPlace : torch::autograd::Function<DoubleGradientInPlace> {
  static at::Tensor forward(torch::autograd::AutogradContext*, const at::Tensor& input) {
    return input.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list gradients) {
    gradients[0].mul_(2.0);
    return {gradients[0]};
  }
};

/// A train step whose loss changes shape and dtype from batch to batch and passes through
/// DoubleGradientInPlace.
at::Tensor changing_loss(torch::nn::Sequential& model, const Batch& batch, std::int64_t index) {
  auto loss = DoubleGradientInPlace::apply(cross_entropy(model->forward(batch.data), batch.target));
  if (index % 3 == 1) return loss.reshape({1, 1});
  if (index % 3 == 2) return loss.to(torch::kDouble);
  return loss;
}
}  // namespace

// The trainer starts every backward from ones, as `loss.backward()` does, also when the loss
// changes shape or dtype and when a backward function writes to the gradient it receives.
BOOST_AUTO_TEST_CASE(every_backward_starts_from_ones_like_the_loss) {
  auto batches = make_batches(6, 8);

  auto trained_model = make_model();
  torch::optim::SGD trained_sgd(trained_model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(trained_model, trained_sgd, cross_entropy,
                  TrainerOptions().max_epochs(2).use_registered_subscriptions(false));
  std::int64_t index = 0;
  trainer.set_train_step(
      [&](Trainer&, Batch& batch) { return changing_loss(trained_model, batch, index++); });
  trainer.fit(batches);

  auto hand_model = make_model();
  torch::optim::SGD hand_sgd(hand_model->parameters(), torch::optim::SGDOptions(0.1));
  std::int64_t hand_index = 0;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (const auto& batch : batches) {
      hand_sgd.zero_grad();
      changing_loss(hand_model, batch, hand_index++).backward();
      hand_sgd.step();
    }
  }

  BOOST_TEST(index == 12);
  const auto a = trained_model->parameters();
  const auto b = hand_model->parameters();
  for (std::size_t i = 0; i < a.size(); ++i) BOOST_TEST(torch::equal(a[i], b[i]));
}

// A parameter reached from the loss through view functions only keeps a view of the tensor
// backward starts from as its gradient; clipping then writes to it through `.data()`. The next
// backward must still start from ones.
BOOST_AUTO_TEST_CASE(a_gradient_that_is_a_view_of_the_seed_does_not_change_the_next_backward) {
  auto batches = make_batches(4, 8);
  const auto train = [&](bool by_trainer) {
    auto model = make_model();
    const auto offset = model->register_parameter("offset", torch::full({1}, 0.5));
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
    const auto loss_of = [&](const Batch& batch) {
      return cross_entropy(model->forward(batch.data), batch.target) + offset.squeeze();
    };
    if (by_trainer) {
      Trainer trainer(
          model, sgd, cross_entropy,
          TrainerOptions().max_epochs(2).gradient_clip_value(0.05).use_registered_subscriptions(
              false));
      trainer.set_train_step([&](Trainer&, Batch& batch) { return loss_of(batch); });
      trainer.fit(batches);
    } else {
      for (int epoch = 0; epoch < 2; ++epoch) {
        for (const auto& batch : batches) {
          sgd.zero_grad();
          loss_of(batch).backward();
          torch::nn::utils::clip_grad_value_(model->parameters(), 0.05);
          sgd.step();
        }
      }
    }
    return model->named_parameters();
  };
  const auto trained = train(true);
  const auto by_hand = train(false);
  BOOST_TEST_REQUIRE(trained.size() == by_hand.size());
  for (const auto& item : trained) BOOST_TEST(torch::equal(item.value(), by_hand[item.key()]));
  // Each step clips the offset's gradient of 1 to 0.05.
  BOOST_TEST(trained["offset"].item<double>() == 0.5 - 8 * 0.1 * 0.05,
             boost::test_tools::tolerance(1e-6));
}

BOOST_AUTO_TEST_CASE(clipping_by_norm_bounds_the_global_gradient_norm) {
  auto batches = make_batches(3, 8);
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(
      model, sgd,
      [](const at::Tensor& out, const at::Tensor& target) {
        return cross_entropy(out, target) * 1000.0;  // large gradients
      },
      TrainerOptions().gradient_clip_norm(0.5).use_registered_subscriptions(false));
  std::vector<double> norms;
  trainer.on(Event::AfterOptimizerStep, [&](State& s) {
    double squared = 0.0;
    for (const auto& p : s.model->parameters()) squared += p.grad().pow(2).sum().item<double>();
    norms.push_back(std::sqrt(squared));
  });
  trainer.fit(batches);
  BOOST_TEST(norms.size() == 3u);
  for (double norm : norms) BOOST_TEST(norm <= 0.5 + 1e-5);
}

BOOST_AUTO_TEST_CASE(clipping_by_value_bounds_every_element) {
  auto batches = make_batches(2, 8);
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(
      model, sgd,
      [](const at::Tensor& out, const at::Tensor& target) {
        return cross_entropy(out, target) * 1000.0;
      },
      TrainerOptions().gradient_clip_value(0.01).use_registered_subscriptions(false));
  double largest = 0.0;
  trainer.on(Event::AfterOptimizerStep, [&](State& s) {
    for (const auto& p : s.model->parameters())
      largest = std::max(largest, p.grad().abs().max().item<double>());
  });
  trainer.fit(batches);
  BOOST_TEST(largest <= 0.01 + 1e-9);
  BOOST_TEST(largest > 0.0);
}

BOOST_AUTO_TEST_CASE(torch_data_loaders_stacked_and_unstacked) {
  auto batches = make_batches(1, 12);
  struct Rows : torch::data::datasets::Dataset<Rows> {
    at::Tensor data, target;
    torch::data::Example<> get(std::size_t i) override { return {data[i], target[i]}; }
    torch::optional<std::size_t> size() const override { return data.size(0); }
  };
  Rows rows;
  rows.data = batches[0].data;
  rows.target = batches[0].target;

  auto stacked = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      rows.map(torch::data::transforms::Stack<>()), 4);
  auto model = make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, sgd, cross_entropy,
                  TrainerOptions().max_epochs(2).use_registered_subscriptions(false));
  trainer.fit(*stacked);
  BOOST_TEST(trainer.state().step == 6);

  auto unstacked = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(rows, 4);
  auto model2 = make_model();
  torch::optim::SGD sgd2(model2->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer2(model2, sgd2, cross_entropy,
                   TrainerOptions().max_epochs(2).use_registered_subscriptions(false));
  trainer2.fit(*unstacked);
  const auto a = model->parameters();
  const auto b = model2->parameters();
  for (std::size_t i = 0; i < a.size(); ++i) BOOST_TEST(torch::equal(a[i], b[i]));
}

BOOST_AUTO_TEST_SUITE_END()
