// Several optimizers: a trainer of optimizer phases computes what a hand-written LibTorch loop of
// the same phases computes, publishes the optimizer events per phase, and resumes exactly.

#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <support/recorder.hpp>
#include <support/scratch.hpp>
#include <support/two_phase_gan.hpp>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

/// Expects `action` to throw ErrorType with a message containing every one of `parts`.
template <typename ErrorType, typename Action>
void check_error(Action&& action, std::initializer_list<const char*> parts) {
  const auto message = message_of<ErrorType>(action);
  for (const auto* part : parts) BOOST_TEST(has(message, part));
}

/// Trains a GanRun and the hand-written loop on the same batches; both must agree bit for bit.
void check_against_hand_written_loop(int batches, int epochs, int k, int generator_every) {
  const auto data = gan_batches(batches);
  GanRun run(TrainerOptions().max_epochs(epochs).accumulate_grad_batches(k), generator_every);
  run.trainer.fit(data);

  TinyGan hand;
  torch::optim::Adam hand_discriminator(hand->discriminator->parameters(),
                                        torch::optim::AdamOptions(1e-2));
  torch::optim::Adam hand_generator(hand->generator->parameters(), torch::optim::AdamOptions(2e-2));
  hand_written_gan_loop(hand, hand_discriminator, hand_generator, data, epochs, k, generator_every);

  BOOST_TEST(same_parameters(*run.gan, *hand));
  BOOST_TEST(same_adam_state(run.discriminator_adam, hand_discriminator));
  BOOST_TEST(same_adam_state(run.generator_adam, hand_generator));
  BOOST_TEST(!same_parameters(*run.gan, *TinyGan()));  // training changed the weights
}

/// The names of `module`'s parameters, in order.
std::vector<std::string> parameter_names(torch::nn::Module& module) {
  std::vector<std::string> names;
  for (const auto& parameter : module.named_parameters()) names.push_back(parameter.key());
  return names;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(optimizer_phases)

// One step semantics: a trainer of one optimizer is a trainer of one unnamed phase. Against a
// trainer of one named phase with the same model, optimizer and loss, it publishes the same events
// in the same order (the update before the window's last BatchEnd) and ends with the same weights,
// with k = 3 and a short last window.
BOOST_AUTO_TEST_CASE(one_optimizer_runs_as_one_phase_with_the_same_events_and_weights) {
  const auto data = make_batches(7, 4);
  const auto options = TrainerOptions().max_epochs(2).accumulate_grad_batches(3);

  auto one_model = make_model();
  torch::optim::SGD one_sgd(one_model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  Trainer one(one_model, one_sgd, cross_entropy, options);
  auto one_recorder = std::make_shared<RecordingCallback>();
  one.add(one_recorder);
  one.fit(data);

  auto phase_model = make_model();
  torch::optim::SGD phase_sgd(phase_model->parameters(),
                              torch::optim::SGDOptions(0.1).momentum(0.9));
  Trainer phased(phase_model.ptr(),
                 {OptimizerPhase("only", phase_sgd,
                                 [&](Trainer&, Batch& batch) {
                                   return cross_entropy(phase_model->forward(batch.data),
                                                        batch.target);
                                 })},
                 options);
  auto phase_recorder = std::make_shared<RecordingCallback>();
  phased.add(phase_recorder);
  phased.fit(data);

  BOOST_TEST(joined(one_recorder->events) == joined(phase_recorder->events));
  BOOST_TEST(has(joined(one_recorder->events),
                 "AfterBackward BeforeOptimizerStep AfterOptimizerStep BatchEnd StepEnd"));
  BOOST_TEST(all_equal(snapshot(*one_model), snapshot(*phase_model)));
  BOOST_TEST(!all_equal(snapshot(*one_model), snapshot(*make_model())));  // it trained
  BOOST_TEST(one.state().step == phased.state().step);
}

BOOST_AUTO_TEST_CASE(two_phases_equal_a_hand_written_loop_bitwise) {
  check_against_hand_written_loop(/*batches=*/6, /*epochs=*/2, /*k=*/1, /*generator_every=*/1);
}

BOOST_AUTO_TEST_CASE(accumulating_three_batches_with_a_short_last_window_equals_the_hand_loop) {
  // 7 batches: windows of 3, 3 and 1 per epoch.
  check_against_hand_written_loop(/*batches=*/7, /*epochs=*/2, /*k=*/3, /*generator_every=*/1);
}

BOOST_AUTO_TEST_CASE(a_phase_every_n_batches_equals_the_hand_loop) {
  check_against_hand_written_loop(/*batches=*/5, /*epochs=*/2, /*k=*/1, /*generator_every=*/3);
  check_against_hand_written_loop(/*batches=*/7, /*epochs=*/2, /*k=*/3, /*generator_every=*/2);
}

BOOST_AUTO_TEST_CASE(each_phase_has_its_backward_and_optimizer_events_named_in_state) {
  GanRun run(TrainerOptions().max_epochs(1).accumulate_grad_batches(2), /*generator_every=*/2);
  std::vector<std::string> events;
  auto& trainer = run.trainer;
  for (const auto event : {Event::StepStart, Event::BatchStart, Event::BatchEnd, Event::StepEnd}) {
    trainer.on(event, [&events, event](State& state) {
      events.push_back(std::string(to_string(event)) + "(" +
                       std::string(state.optimizer_phase_name) + ")");
    });
  }
  for (const auto event : {Event::BeforeBackward, Event::AfterBackward, Event::BeforeOptimizerStep,
                           Event::AfterOptimizerStep}) {
    trainer.on(event, [&, event](State& state) {
      const auto& phase = trainer.optimizer_phases()[state.optimizer_phase];
      BOOST_TEST(state.optimizer == phase.optimizer());
      BOOST_TEST(std::string(state.optimizer_phase_name) == phase.name());
      events.push_back(std::string(to_string(event)) + ":" + phase.name() + "#" +
                       std::to_string(state.optimizer_phase_step));
    });
  }
  trainer.fit(gan_batches(3));
  // Batches 0 and 1 make the first window; the generator runs on batch 1 only (every 2nd
  // batch), and each phase steps after its last backward of the window, inside that batch.
  // The third batch is a window of one without the generator.
  const std::string expected =
      "StepStart(discriminator) BatchStart(discriminator) BeforeBackward:discriminator#0 "
      "AfterBackward:discriminator#0 BatchEnd(discriminator) BatchStart(discriminator) "
      "BeforeBackward:discriminator#0 AfterBackward:discriminator#0 "
      "BeforeOptimizerStep:discriminator#0 AfterOptimizerStep:discriminator#1 "
      "BeforeBackward:generator#0 AfterBackward:generator#0 BeforeOptimizerStep:generator#0 "
      "AfterOptimizerStep:generator#1 BatchEnd(discriminator) StepEnd(discriminator) "
      "StepStart(discriminator) BatchStart(discriminator) BeforeBackward:discriminator#1 "
      "AfterBackward:discriminator#1 BeforeOptimizerStep:discriminator#1 "
      "AfterOptimizerStep:discriminator#2 BatchEnd(discriminator) StepEnd(discriminator)";
  BOOST_TEST(joined(events) == expected);
  BOOST_TEST(trainer.state().step == 2);
}

BOOST_AUTO_TEST_CASE(each_phase_records_its_loss_per_step_and_per_epoch) {
  GanRun run(TrainerOptions().max_epochs(2), /*generator_every=*/2);
  std::vector<double> generator_losses;
  run.trainer.on(Event::AfterOptimizerStep, [&](State& state) {
    if (state.optimizer_phase_name == "generator") {
      generator_losses.push_back(state.step_loss().item<double>());
    }
  });
  run.trainer.fit(gan_batches(4));
  const auto& metrics = run.trainer.state().metrics;
  BOOST_TEST(!metrics.contains(metric_names::kTrainLoss));
  BOOST_TEST(metrics.series("train_loss/discriminator").size() == 8u);
  const auto& generator = metrics.series("train_loss/generator");
  BOOST_TEST_REQUIRE(generator.size() == 4u);  // batches 1, 3, 5, 7
  for (std::size_t i = 0; i < generator.size(); ++i) {
    BOOST_TEST(generator[i].value == generator_losses[i]);
  }
  BOOST_TEST(generator[0].step == 2);  // recorded at the step that made it, as train_loss
  BOOST_TEST(metrics.series("train_loss_epoch/generator").size() == 2u);
  BOOST_TEST(metrics.series("train_loss_epoch/discriminator").size() == 2u);
}

BOOST_AUTO_TEST_CASE(gradient_clipping_applies_to_each_phase_with_its_own_value) {
  // The generator clips its gradient norm to 1e-3; the discriminator uses the options' (off).
  TinyGan gan;
  torch::optim::Adam d(gan->discriminator->parameters(), torch::optim::AdamOptions(1e-2));
  torch::optim::Adam g(gan->generator->parameters(), torch::optim::AdamOptions(2e-2));
  std::vector<OptimizerPhase> phases{
      OptimizerPhase("discriminator", d,
                     [gan](Trainer& trainer, Batch& batch) mutable {
                       auto fake = gan->generator->forward(batch.target);
                       trainer.state().tensors.set("fake", fake);
                       return discriminator_loss(gan, batch.data, fake);
                     }),
      OptimizerPhase("generator", g, [gan](Trainer& trainer, Batch&) mutable {
        return generator_loss(gan, trainer.state().tensors.get("fake"));
      }).gradient_clip_norm(1e-3)};
  Trainer trainer(gan.ptr(), phases, TrainerOptions().use_registered_subscriptions(false));
  std::vector<double> norms[2];
  trainer.on(Event::AfterOptimizerStep, [&](State& state) {
    double total = 0.0;
    for (const auto& group : state.optimizer->param_groups()) {
      for (const auto& parameter : group.params()) {
        if (parameter.grad().defined()) total += parameter.grad().pow(2).sum().item<double>();
      }
    }
    norms[state.optimizer_phase].push_back(std::sqrt(total));
  });
  trainer.fit(gan_batches(3));
  BOOST_TEST_REQUIRE(norms[1].size() == 3u);
  for (const auto norm : norms[1]) BOOST_TEST(norm <= 1.001e-3);
  for (const auto norm : norms[0]) BOOST_TEST(norm > 1e-2);
}

BOOST_AUTO_TEST_CASE(a_run_resumed_from_a_mid_run_checkpoint_ends_with_the_same_weights) {
  TempDir directory("optimizer_phases");
  const auto data = gan_batches(5);
  const auto options = TrainerOptions().max_epochs(3).accumulate_grad_batches(2);

  GanRun uninterrupted(options, /*generator_every=*/3);
  uninterrupted.trainer.fit(data);

  const auto path = directory.path / "step4.ckpt";
  {
    GanRun interrupted(options, 3);
    interrupted.trainer.on(Event::StepEnd, [&](State& state) {
      if (state.step != 4) return;
      interrupted.trainer.save_checkpoint(path);
      state.request_stop("killed", StopKind::Interrupted);
    });
    interrupted.trainer.fit(data);
    BOOST_TEST(interrupted.trainer.state().step == 4);
    BOOST_TEST(!same_parameters(*interrupted.gan, *uninterrupted.gan));
  }
  GanRun resumed(options, 3);
  resumed.trainer.resume_from(path);
  resumed.trainer.fit(data);
  BOOST_TEST(resumed.trainer.state().step == uninterrupted.trainer.state().step);
  BOOST_TEST(same_parameters(*resumed.gan, *uninterrupted.gan));
  BOOST_TEST(same_adam_state(resumed.discriminator_adam, uninterrupted.discriminator_adam));
  BOOST_TEST(same_adam_state(resumed.generator_adam, uninterrupted.generator_adam));
  BOOST_TEST(resumed.trainer.state().metrics.series("train_loss/generator").size() ==
             uninterrupted.trainer.state().metrics.series("train_loss/generator").size());
}

BOOST_AUTO_TEST_CASE(a_checkpoint_resumes_only_into_a_trainer_of_the_same_phases) {
  TempDir directory("optimizer_phases");
  const auto path = directory.path / "phases.ckpt";
  GanRun run(TrainerOptions().max_epochs(1), 1);
  run.trainer.fit(gan_batches(2));
  run.trainer.save_checkpoint(path);

  Run one_optimizer;
  check_error<CheckpointError>(
      [&] { one_optimizer.trainer.load_checkpoint(path); },
      {"was written by a trainer of several optimizers (optimizer phases discriminator, "
       "generator); this trainer has one optimizer"});

  const auto classic = directory.path / "classic.ckpt";
  one_optimizer.trainer.save_checkpoint(classic);
  GanRun other(TrainerOptions().max_epochs(1), 1);
  check_error<CheckpointError>([&] { other.trainer.load_checkpoint(classic); },
                               {"was written by a trainer of one optimizer; this trainer has "
                                "optimizer phases discriminator, generator"});
}

BOOST_AUTO_TEST_CASE(bad_phases_are_refused_with_what_was_expected) {
  TinyGan gan;
  torch::optim::Adam d(gan->discriminator->parameters(), torch::optim::AdamOptions(1e-2));
  torch::optim::Adam g(gan->generator->parameters(), torch::optim::AdamOptions(1e-2));
  const OptimizerPhase::StepFunction step = [](Trainer&, Batch& batch) { return batch.data.sum(); };
  const auto build = [&](std::vector<OptimizerPhase> phases) {
    Trainer trainer(gan.ptr(), std::move(phases),
                    TrainerOptions().use_registered_subscriptions(false));
  };
  check_error<ConfigError>([&] { build({}); }, {"needs at least one phase, got none"});
  check_error<ConfigError>(
      [&] {
        build({OptimizerPhase("a", d, step), OptimizerPhase("a", g, step)});
      },
      {"two optimizer phases are named 'a'"});
  check_error<ConfigError>([&] { build({OptimizerPhase("", d, step)}); },
                           {"needs a name without line breaks, got ''"});
  check_error<ConfigError>([&] { build({OptimizerPhase("d", d, nullptr)}); },
                           {"optimizer phase 'd' has no step function"});
  check_error<ConfigError>([&] { build({OptimizerPhase("d", d, step).every_n_batches(0)}); },
                           {"every_n_batches must be >= 1, got 0"});
  check_error<ConfigError>(
      [&] {
        build({OptimizerPhase("d", d, step), OptimizerPhase("e", d, step)});
      },
      {"is in the optimizers of phases 'd' and 'e'"});
  torch::optim::SGD stranger({torch::zeros({2}, torch::requires_grad())},
                             torch::optim::SGDOptions(0.1));
  check_error<ConfigError>(
      [&] { build({OptimizerPhase("s", stranger, step)}); },
      {"optimizer phase 's' trains a tensor of shape [2] that is not a parameter "
       "of the trainer's model"});

  Trainer trainer(gan.ptr(), {OptimizerPhase("d", d, step)},
                  TrainerOptions().use_registered_subscriptions(false));
  check_error<ConfigError>([&] { trainer.set_train_step(step); },
                           {"trains with each phase's step function"});
  check_error<ConfigError>([&] { trainer.evaluate(gan_batches(1)); },
                           {"no forward and loss of its own", "set_eval_step"});
  check_error<ConfigError>(
      [&] {
        trainer.forward(torch::zeros({1, 3}));
      },
      {"a trainer of optimizer phases has no forward of its own"});
  check_error<ConfigError>([&] { trainer.compute_loss(torch::zeros({1}), torch::zeros({1})); },
                           {"a trainer of optimizer phases has no loss function of its own"});
}

BOOST_AUTO_TEST_CASE(phases_with_models_of_their_own_equal_a_wrapper_and_the_hand_loop_bitwise) {
  // A GAN given as two modules (no wrapper) trains as the same GAN in one wrapper module, and as
  // the hand-written loop: 7 batches, windows of 3, 3 and 1, the generator every 2nd batch.
  const auto data = gan_batches(7);
  const auto options = TrainerOptions().max_epochs(2).accumulate_grad_batches(3);
  SeparateGanRun separate(options, /*generator_every=*/2);
  separate.trainer.fit(data);
  GanRun wrapped(options, 2);
  wrapped.trainer.fit(data);
  TinyGan hand;
  torch::optim::Adam hand_discriminator(hand->discriminator->parameters(),
                                        torch::optim::AdamOptions(1e-2));
  torch::optim::Adam hand_generator(hand->generator->parameters(), torch::optim::AdamOptions(2e-2));
  hand_written_gan_loop(hand, hand_discriminator, hand_generator, data, 2, 3, 2);

  for (auto* gan : {&*wrapped.gan, &*hand}) {
    BOOST_TEST(same_parameters(*separate.gan.generator, *gan->generator));
    BOOST_TEST(same_parameters(*separate.gan.discriminator, *gan->discriminator));
  }
  for (auto* adam : {&wrapped.discriminator_adam, &hand_discriminator}) {
    BOOST_TEST(same_adam_state(separate.discriminator_adam, *adam));
  }
  for (auto* adam : {&wrapped.generator_adam, &hand_generator}) {
    BOOST_TEST(same_adam_state(separate.generator_adam, *adam));
  }
  BOOST_TEST(!same_parameters(*separate.gan.generator, *SeparateGan().generator));
  // The trainer trains one module holding each phase's model under the phase's name.
  BOOST_TEST(joined(parameter_names(separate.trainer.module())) ==
             "discriminator.0.weight discriminator.0.bias discriminator.2.weight "
             "discriminator.2.bias generator.weight generator.bias");
  BOOST_TEST(separate.trainer.state().model == &separate.trainer.module());
}

BOOST_AUTO_TEST_CASE(a_phase_model_beside_the_trainers_model_is_kept_under_the_phase_name) {
  SeparateGan gan;
  torch::optim::Adam d(gan.discriminator->parameters(), torch::optim::AdamOptions(1e-2));
  torch::optim::Adam g(gan.generator->parameters(), torch::optim::AdamOptions(2e-2));
  auto generator = gan.generator;
  auto discriminator = gan.discriminator;
  Trainer trainer(gan.discriminator.ptr(),
                  {OptimizerPhase("discriminator", d,
                                  [=](Trainer& trainer, Batch& batch) mutable {
                                    auto fake = generator->forward(batch.target);
                                    trainer.state().tensors.set("fake", fake);
                                    return discriminator_loss(discriminator, batch.data, fake);
                                  }),
                   OptimizerPhase("generator", g,
                                  [=](Trainer& trainer, Batch&) mutable {
                                    return generator_loss(discriminator,
                                                          trainer.state().tensors.get("fake"));
                                  })
                       .model(gan.generator)},
                  TrainerOptions().use_registered_subscriptions(false).max_epochs(1));
  BOOST_TEST(joined(parameter_names(trainer.module())) ==
             "model.0.weight model.0.bias model.2.weight model.2.bias generator.weight "
             "generator.bias");
  trainer.fit(gan_batches(2));
  BOOST_TEST(!same_parameters(*gan.generator, *SeparateGan().generator));
  // Its train()/eval() reach both models.
  trainer.module().eval();
  BOOST_TEST(!gan.generator->is_training());
  BOOST_TEST(!gan.discriminator->is_training());
}

BOOST_AUTO_TEST_CASE(phases_with_models_resume_from_a_mid_run_checkpoint_exactly) {
  TempDir directory("optimizer_phase_models");
  const auto data = gan_batches(5);
  const auto options = TrainerOptions().max_epochs(3).accumulate_grad_batches(2);
  SeparateGanRun uninterrupted(options, /*generator_every=*/3);
  uninterrupted.trainer.fit(data);

  const auto path = directory.path / "step4.ckpt";
  {
    SeparateGanRun interrupted(options, 3);
    interrupted.trainer.on(Event::StepEnd, [&](State& state) {
      if (state.step != 4) return;
      interrupted.trainer.save_checkpoint(path);
      state.request_stop("killed", StopKind::Interrupted);
    });
    interrupted.trainer.fit(data);
    BOOST_TEST(!same_parameters(*interrupted.gan.generator, *uninterrupted.gan.generator));
  }
  SeparateGanRun resumed(options, 3);
  resumed.trainer.resume_from(path);
  resumed.trainer.fit(data);
  BOOST_TEST(resumed.trainer.state().step == uninterrupted.trainer.state().step);
  BOOST_TEST(same_parameters(*resumed.gan.generator, *uninterrupted.gan.generator));
  BOOST_TEST(same_parameters(*resumed.gan.discriminator, *uninterrupted.gan.discriminator));
  BOOST_TEST(same_adam_state(resumed.discriminator_adam, uninterrupted.discriminator_adam));
  BOOST_TEST(same_adam_state(resumed.generator_adam, uninterrupted.generator_adam));
}

BOOST_AUTO_TEST_CASE(unusable_phase_models_are_refused_with_what_was_expected) {
  SeparateGan gan;
  torch::optim::Adam d(gan.discriminator->parameters(), torch::optim::AdamOptions(1e-2));
  torch::optim::Adam g(gan.generator->parameters(), torch::optim::AdamOptions(1e-2));
  const OptimizerPhase::StepFunction step = [](Trainer&, Batch& batch) { return batch.data.sum(); };
  const auto options = TrainerOptions().use_registered_subscriptions(false);
  const auto alone = [&](std::vector<OptimizerPhase> phases) { Trainer trainer(phases, options); };
  const auto beside = [&](std::vector<OptimizerPhase> phases) {
    Trainer trainer(gan.discriminator.ptr(), phases, options);
  };
  const auto d_phase = OptimizerPhase("d", d, step).model(gan.discriminator);
  check_error<ConfigError>(
      [&] { alone({OptimizerPhase("d", d, step).model(std::shared_ptr<torch::nn::Module>())}); },
      {"optimizer phase 'd' was given a null model"});
  check_error<ConfigError>(
      [&] {
        alone({d_phase, OptimizerPhase("g", g, step).model(torch::nn::Linear(nullptr))});
      },
      {"optimizer phase 'g' was given a null model"});
  check_error<ConfigError>(
      [&] {
        alone({d_phase, OptimizerPhase("g", g, step).model(gan.discriminator)});
      },
      {"optimizer phases 'd' and 'g' were given the same model"});
  check_error<ConfigError>([&] { beside({d_phase}); },
                           {"optimizer phase 'd' was given the trainer's model as its own"});
  check_error<ConfigError>(
      [&] {
        alone({d_phase, OptimizerPhase("g.1", g, step).model(gan.generator)});
      },
      {"optimizer phase 'g.1' has a model", "cannot contain '.'"});
  check_error<ConfigError>([&] { beside({OptimizerPhase("model", g, step).model(gan.generator)}); },
                           {"optimizer phase 'model' has a model", "rename the phase"});
  check_error<ConfigError>(
      [&] {
        alone({d_phase, OptimizerPhase("g", g, step)});
      },
      {"optimizer phase 'g' has no model", "OptimizerPhase::model"});
  // An optimizer trains the phase's model and the trainer's model only.
  check_error<ConfigError>(
      [&] {
        alone({d_phase, OptimizerPhase("g", d, step).model(gan.generator)});
      },
      {"optimizer phase 'g' trains a tensor of shape [8, 4] that is not a parameter of the "
       "phase's model"});
  torch::nn::Linear other(4, 4);
  check_error<ConfigError>(
      [&] { beside({OptimizerPhase("g", g, step).model(other)}); },
      {"optimizer phase 'g' trains a tensor of shape [4, 3] that is not a parameter of the "
       "phase's model or the trainer's model"});
}

BOOST_AUTO_TEST_SUITE_END()
