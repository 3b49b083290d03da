// SWA: the average against a hand computation, the annealed learning rate, batch-norm statistics
// recomputed for the average, exact resume (mid-epoch and after a stop at an epoch's end).

#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <support/scratch.hpp>
#include <torchbus/callbacks/swa.hpp>

#include <cmath>
#include <stdexcept>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

/// Four epochs of three batches (steps 1-3, 4-6, 7-9, 10-12).
std::vector<Batch> train_batches() {
  return make_batches(3, 8);
}

TrainerOptions four_epochs() {
  return TrainerOptions().max_epochs(4);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(swa)

BOOST_AUTO_TEST_CASE(the_model_ends_with_the_mean_of_the_averaged_epochs_weights) {
  Run run(four_epochs());
  auto swa = std::make_shared<SWA>(SWAOptions().start_epoch(1));
  run.trainer.add(swa);
  std::vector<at::Tensor> sum;
  int epochs = 0;
  run.trainer.on(
      Event::EpochEnd,
      [&](State& state) {
        if (state.epoch < 1) return;
        const auto parameters = run.model->parameters();
        for (std::size_t i = 0; i < parameters.size(); ++i) {
          const auto value = parameters[i].detach().to(at::kDouble);
          if (sum.size() <= i) {
            sum.push_back(value.clone());
          } else {
            sum[i] += value;
          }
        }
        ++epochs;
      },
      1000);
  run.trainer.fit(train_batches());
  BOOST_TEST(epochs == 3);
  BOOST_TEST(swa->averaged() == 3);
  const auto final_weights = snapshot(*run.model);
  BOOST_REQUIRE(final_weights.size() == sum.size());
  for (std::size_t i = 0; i < sum.size(); ++i) {
    const auto error = max_difference(final_weights[i], sum[i] / 3.0);
    BOOST_TEST(error < 1e-6, "tensor " << i << " off by " << error);
  }
}

BOOST_AUTO_TEST_CASE(the_learning_rate_anneals_to_swa_lr_from_the_start_fraction_on) {
  Run run(TrainerOptions().max_epochs(5));  // SGD lr 0.1
  run.trainer.add(std::make_shared<SWA>(SWAOptions()
                                            .start_fraction(0.6)  // epoch 3
                                            .swa_lr(0.01)
                                            .annealing_epochs(2)
                                            .annealing(SWAAnnealing::Linear)));
  std::vector<double> first_lr_of_epoch;
  run.trainer.on(
      Event::StepStart,
      [&](State& state) {
        if (state.batch_in_epoch == 0) {
          first_lr_of_epoch.push_back(state.optimizer->param_groups()[0].options().get_lr());
        }
      },
      1000);
  run.trainer.fit(train_batches());
  const std::vector<double> expected{0.1, 0.1, 0.1, 0.1 * 0.5 + 0.01 * 0.5, 0.01};
  BOOST_REQUIRE(first_lr_of_epoch.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    BOOST_TEST(std::abs(first_lr_of_epoch[i] - expected[i]) < 1e-12, "epoch " << i);
  }
  // Cosine: halfway through the annealing the rate is halfway too; at the end it is swa_lr.
  const SWA cosine(SWAOptions().swa_lr(0.0).annealing_epochs(4));
  BOOST_TEST(std::abs(cosine.learning_rate(2, 2, 1.0) - (1.0 + std::cos(std::acos(-1.0) / 4)) / 2) <
             1e-12);
  BOOST_TEST(cosine.learning_rate(5, 2, 1.0) == 0.0);
  BOOST_TEST(cosine.learning_rate(1, 2, 1.0) == 1.0);
}

BOOST_AUTO_TEST_CASE(batch_norm_statistics_are_recomputed_for_the_averaged_weights) {
  torch::manual_seed(3);
  torch::nn::Linear first(4, 6);
  torch::nn::BatchNorm1d norm(6);
  torch::nn::Sequential model(first, norm, torch::nn::ReLU(), torch::nn::Linear(6, 3));
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, sgd, cross_entropy,
                  TrainerOptions().max_epochs(3).use_registered_subscriptions(false));
  auto batches = train_batches();
  auto source = std::make_shared<RangeSource<std::vector<Batch>>>(batches);
  auto swa = std::make_shared<SWA>(SWAOptions().start_epoch(1).batch_norm_data(source));
  trainer.add(swa);
  trainer.fit(batches);

  // By hand: the first layer's outputs with the averaged weights, batch by batch; the running
  // mean is the mean of the batch means, the running variance the mean of the unbiased ones.
  at::Tensor mean_sum, var_sum;
  {
    torch::NoGradGuard no_grad;
    for (const auto& batch : batches) {
      const auto hidden = first->forward(batch.data).to(at::kDouble);
      const auto mean = hidden.mean(0);
      const auto var = hidden.var(0, /*unbiased=*/true);
      mean_sum = mean_sum.defined() ? mean_sum + mean : mean;
      var_sum = var_sum.defined() ? var_sum + var : var;
    }
  }
  const double count = static_cast<double>(batches.size());
  BOOST_TEST(max_difference(norm->running_mean, mean_sum / count) < 1e-6);
  BOOST_TEST(max_difference(norm->running_var, var_sum / count) < 1e-6);
  BOOST_TEST(norm->options.momentum().value() == 0.1);  // restored
  BOOST_TEST(model->is_training());
}

BOOST_AUTO_TEST_CASE(a_resume_mid_epoch_ends_bit_for_bit_as_an_uninterrupted_run) {
  const auto folder = scratch("swa", "resume");
  const auto options = SWAOptions().start_epoch(1).swa_lr(0.05).annealing_epochs(2);
  Run whole(four_epochs());
  auto uninterrupted = std::make_shared<SWA>(options);
  whole.trainer.add(uninterrupted);
  whole.trainer.fit(train_batches());

  Run first(four_epochs());
  first.trainer.add(std::make_shared<SWA>(options));
  first.trainer.on(
      Event::StepEnd,
      [&](State& state) {
        if (state.step == 8) {  // the middle of epoch 2, the second averaged one
          first.trainer.save_checkpoint(folder / "step8.tbckpt");
          throw std::runtime_error("killed");
        }
      },
      1000);
  BOOST_CHECK_THROW(first.trainer.fit(train_batches()), std::runtime_error);

  Run second(four_epochs());
  auto resumed = std::make_shared<SWA>(options);
  second.trainer.add(resumed);
  second.trainer.resume_from(folder / "step8.tbckpt");
  second.trainer.fit(train_batches());
  BOOST_TEST(resumed->averaged() == uninterrupted->averaged());
  BOOST_TEST(all_equal(resumed->average(), uninterrupted->average()));
  BOOST_TEST(all_equal(snapshot(*second.model), snapshot(*whole.model)));
}

BOOST_AUTO_TEST_CASE(a_stop_at_the_last_step_of_an_epoch_then_a_resume_averages_it_once) {
  const auto folder = scratch("swa", "stop_at_epoch_end");
  const auto options = SWAOptions().start_epoch(1);
  Run whole(four_epochs());
  auto uninterrupted = std::make_shared<SWA>(options);
  whole.trainer.add(uninterrupted);
  whole.trainer.fit(train_batches());

  Run first(four_epochs());
  auto stopped = std::make_shared<SWA>(options);
  first.trainer.add(stopped);
  first.trainer.on(Event::StepEnd, [](State& state) {
    if (state.step == 6) state.request_stop("stop at the end of epoch 1", StopKind::Interrupted);
  });
  // Saved at ActionEnd before SWA puts the average into the model (a Role::Checkpoint subscriber,
  // as ModelCheckpoint is).
  first.trainer.on(
      Event::ActionEnd, [&](State&) { first.trainer.save_checkpoint(folder / "stop.tbckpt"); },
      with_role(Role::Checkpoint));
  first.trainer.fit(train_batches());
  BOOST_TEST(stopped->averaged() == 1);  // epoch 1, added when fit ended

  Run second(four_epochs());
  auto resumed = std::make_shared<SWA>(options);
  second.trainer.add(resumed);
  second.trainer.resume_from(folder / "stop.tbckpt");
  second.trainer.fit(train_batches());
  BOOST_TEST(resumed->averaged() == 3);
  BOOST_TEST(all_equal(resumed->average(), uninterrupted->average()));
  BOOST_TEST(all_equal(snapshot(*second.model), snapshot(*whole.model)));
}

BOOST_AUTO_TEST_CASE(options_out_of_range_are_refused_by_name) {
  BOOST_TEST(has(message_of<ConfigError>([] { SWA(SWAOptions().start_fraction(0.0)); }),
                 "start_fraction"));
  BOOST_TEST(has(message_of<ConfigError>([] { SWA(SWAOptions().annealing_epochs(0)); }),
                 "annealing_epochs"));
  BOOST_TEST(has(message_of<ConfigError>([] { SWA(SWAOptions().swa_lr(-1.0)); }), "swa_lr"));
}

BOOST_AUTO_TEST_SUITE_END()
