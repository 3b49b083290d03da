// EMA and SWA of one optimizer phase (their `phase` option): they average that phase's model
// only, and the swap at the end leaves every other weight as training left it.

#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <support/scratch.hpp>
#include <support/two_phase_gan.hpp>
#include <torchbus/callbacks/ema.hpp>
#include <torchbus/callbacks/swa.hpp>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

/// Trains `trainer` with an EMA of the phase "generator" (decay 0.8); `generator` and
/// `discriminator` are its halves. Checks the average against one computed by hand over the
/// generator's weights after every step, and that only the generator ends with it.
void check_ema_of_the_generator(Trainer& trainer, torch::nn::Module& generator,
                                torch::nn::Module& discriminator) {
  auto ema = std::make_shared<EMA>(
      EMAOptions().decay(0.8).phase("generator").evaluate_with_average(false));
  trainer.add(ema);
  std::vector<at::Tensor> average;  // in double precision
  trainer.on(Event::StepStart, [&](State&) {
    if (!average.empty()) return;
    for (const auto& p : generator.parameters()) average.push_back(p.detach().to(at::kDouble));
  });
  std::vector<at::Tensor> last_generator;
  std::vector<at::Tensor> last_discriminator;
  trainer.on(Event::StepEnd, [&](State&) {
    last_generator = snapshot(generator);
    last_discriminator = snapshot(discriminator);
    const auto parameters = generator.parameters();
    for (std::size_t i = 0; i < average.size(); ++i) {
      average[i] = 0.8 * average[i] + 0.2 * parameters[i].detach().to(at::kDouble);
    }
  });
  trainer.fit(gan_batches(4));

  BOOST_TEST(ema->updates() == 8);
  BOOST_TEST_REQUIRE(ema->average().size() == average.size());
  for (std::size_t i = 0; i < average.size(); ++i) {
    const auto error = max_difference(ema->average()[i], average[i]);
    BOOST_TEST(error < 1e-6, "tensor " << i << " off by " << error);
  }
  // apply_at_end: the generator holds the average; the discriminator its last raw weights.
  BOOST_TEST(all_equal(snapshot(generator), ema->average()));
  BOOST_TEST(!all_equal(snapshot(generator), last_generator));
  BOOST_TEST(all_equal(snapshot(discriminator), last_discriminator));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(phase_weight_averaging)

BOOST_AUTO_TEST_CASE(an_ema_of_a_phase_with_a_model_averages_that_model_only) {
  SeparateGanRun run(TrainerOptions().max_epochs(2));
  check_ema_of_the_generator(run.trainer, *run.gan.generator, *run.gan.discriminator);
}

BOOST_AUTO_TEST_CASE(an_ema_of_a_phase_without_a_model_averages_its_optimizers_parameters) {
  GanRun run(TrainerOptions().max_epochs(2));
  check_ema_of_the_generator(run.trainer, *run.gan->generator, *run.gan->discriminator);
}

BOOST_AUTO_TEST_CASE(an_ema_of_a_phase_resumed_mid_run_continues_the_same_average_bit_for_bit) {
  TempDir directory("phase_weight_averaging");
  const auto path = directory.path / "step3.ckpt";
  const auto data = gan_batches(4);
  const auto options = TrainerOptions().max_epochs(2);
  const auto ema_options = EMAOptions().decay(0.8).phase("generator");
  SeparateGanRun uninterrupted(options);
  auto uninterrupted_ema = std::make_shared<EMA>(ema_options);
  uninterrupted.trainer.add(uninterrupted_ema);
  uninterrupted.trainer.fit(data);
  {
    SeparateGanRun interrupted(options);
    interrupted.trainer.add(std::make_shared<EMA>(ema_options));
    interrupted.trainer.on(Event::StepEnd, [&](State& state) {
      if (state.step != 3) return;
      interrupted.trainer.save_checkpoint(path);
      state.request_stop("killed", StopKind::Interrupted);
    });
    interrupted.trainer.fit(data);
  }
  SeparateGanRun resumed(options);
  auto resumed_ema = std::make_shared<EMA>(ema_options);
  resumed.trainer.add(resumed_ema);
  resumed.trainer.resume_from(path);
  resumed.trainer.fit(data);
  BOOST_TEST(resumed_ema->updates() == uninterrupted_ema->updates());
  BOOST_TEST(all_equal(resumed_ema->average(), uninterrupted_ema->average()));
  BOOST_TEST(all_equal(snapshot(*resumed.gan.generator), snapshot(*uninterrupted.gan.generator)));
  BOOST_TEST(
      all_equal(snapshot(*resumed.gan.discriminator), snapshot(*uninterrupted.gan.discriminator)));
}

BOOST_AUTO_TEST_CASE(an_swa_of_a_phase_averages_that_phase_and_anneals_its_learning_rate_only) {
  SeparateGanRun run(TrainerOptions().max_epochs(3));
  auto swa = std::make_shared<SWA>(
      SWAOptions().start_epoch(1).swa_lr(0.05).annealing_epochs(1).phase("generator"));
  run.trainer.add(swa);
  std::vector<at::Tensor> sum;  // the generator's weights at the averaged epochs' ends
  std::vector<at::Tensor> last_discriminator;
  std::vector<double> generator_lrs;
  std::vector<double> discriminator_lrs;
  run.trainer.on(Event::StepEnd, [&](State&) {
    last_discriminator = snapshot(*run.gan.discriminator);
    generator_lrs.push_back(run.generator_adam.param_groups()[0].options().get_lr());
    discriminator_lrs.push_back(run.discriminator_adam.param_groups()[0].options().get_lr());
  });
  run.trainer.on(Event::EpochEnd, [&](State& state) {
    if (state.epoch < 1) return;
    const auto parameters = run.gan.generator->parameters();
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      const auto value = parameters[i].detach().to(at::kDouble);
      if (sum.size() <= i) {
        sum.push_back(value.clone());
      } else {
        sum[i] += value;
      }
    }
  });
  run.trainer.fit(gan_batches(3));

  BOOST_TEST(swa->averaged() == 2);
  const auto generator = snapshot(*run.gan.generator);
  BOOST_TEST_REQUIRE(generator.size() == sum.size());
  for (std::size_t i = 0; i < sum.size(); ++i) {
    const auto error = max_difference(generator[i], sum[i] / 2.0);
    BOOST_TEST(error < 1e-6, "tensor " << i << " off by " << error);
  }
  BOOST_TEST(all_equal(snapshot(*run.gan.discriminator), last_discriminator));
  // Epoch 0 at the optimizers' own rates; from epoch 1 the generator's at swa_lr.
  BOOST_TEST_REQUIRE(generator_lrs.size() == 9u);
  for (std::size_t i = 0; i < 9; ++i) {
    BOOST_TEST(generator_lrs[i] == (i < 3 ? 2e-2 : 0.05));
    BOOST_TEST(discriminator_lrs[i] == 1e-2);
  }
}

BOOST_AUTO_TEST_CASE(an_swa_of_a_phase_recomputes_its_models_batch_norm_with_the_forward_given) {
  // Both halves have a batch-norm layer; only the generator's is recomputed, on batches of noise
  // through the generator's forward.
  torch::manual_seed(3);
  torch::nn::Linear linear(3, 4);
  torch::nn::BatchNorm1d generator_norm(4);
  torch::nn::Sequential generator(linear, generator_norm);
  torch::nn::BatchNorm1d discriminator_norm(4);
  torch::nn::Sequential discriminator(torch::nn::Linear(4, 4), discriminator_norm,
                                      torch::nn::Linear(4, 1));
  torch::optim::SGD g(generator->parameters(), torch::optim::SGDOptions(0.1));
  torch::optim::SGD d(discriminator->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer({OptimizerPhase("discriminator", d,
                                  [=](Trainer& trainer, Batch& batch) mutable {
                                    auto fake = generator->forward(batch.target);
                                    trainer.state().tensors.set("fake", fake);
                                    return discriminator_loss(discriminator, batch.data, fake);
                                  })
                       .model(discriminator),
                   OptimizerPhase("generator", g,
                                  [=](Trainer& trainer, Batch&) mutable {
                                    return generator_loss(discriminator,
                                                          trainer.state().tensors.get("fake"));
                                  })
                       .model(generator)},
                  TrainerOptions().max_epochs(2).use_registered_subscriptions(false));
  std::vector<Batch> noise;
  for (int i = 0; i < 3; ++i) noise.emplace_back(torch::randn({8, 3}), at::Tensor());
  trainer.add(std::make_shared<SWA>(
      SWAOptions()
          .start_epoch(0)
          .phase("generator")
          .batch_norm_data(std::make_shared<RangeSource<std::vector<Batch>>>(noise))
          .batch_norm_forward(
              [generator](const at::Tensor& input) mutable { return generator->forward(input); })));
  at::Tensor discriminator_mean;
  trainer.on(Event::StepEnd,
             [&](State&) { discriminator_mean = discriminator_norm->running_mean.clone(); });
  trainer.fit(gan_batches(3));

  // update_bn: the cumulative average of the batches' means through the averaged linear layer.
  torch::NoGradGuard no_grad;
  auto expected = torch::zeros({4}, torch::kDouble);
  for (const auto& batch : noise) expected += linear->forward(batch.data).mean(0).to(at::kDouble);
  const auto error = max_difference(generator_norm->running_mean, expected / 3.0);
  BOOST_TEST(error < 1e-6, "running mean off by " << error);
  BOOST_TEST(generator_norm->num_batches_tracked.item<std::int64_t>() == 3);
  BOOST_TEST(torch::equal(discriminator_norm->running_mean, discriminator_mean));
}

BOOST_AUTO_TEST_CASE(a_phase_the_trainer_does_not_have_is_refused_at_fit_start) {
  const auto refused = [](std::shared_ptr<Callback> callback, const std::string& expected) {
    SeparateGanRun run(TrainerOptions().max_epochs(1));
    run.trainer.add(callback);
    const auto message = message_of<ConfigError>([&] { run.trainer.fit(gan_batches(2)); });
    BOOST_TEST(has(message, expected), message);
    BOOST_TEST(run.trainer.state().step == 0);
  };
  refused(std::make_shared<EMA>(EMAOptions().phase("critic")),
          "EMA 'ema': the trainer has no optimizer phase named 'critic'; its phases are "
          "discriminator, generator");
  refused(std::make_shared<SWA>(SWAOptions().phase("critic")),
          "SWA 'swa': the trainer has no optimizer phase named 'critic'; its phases are "
          "discriminator, generator");
  // Recomputing batch-norm statistics needs a forward, which a trainer of phases lacks.
  auto noise = gan_batches(1);
  refused(std::make_shared<SWA>(
              SWAOptions()
                  .phase("generator")
                  .batch_norm_data(std::make_shared<RangeSource<std::vector<Batch>>>(noise))),
          "SWA 'swa': a trainer of optimizer phases has no forward of its own");
}

BOOST_AUTO_TEST_SUITE_END()
