// Several optimizers: a small GAN learns a 2-D mixture of eight Gaussians. Two optimizer phases
// per batch, each with its own model (the discriminator's step, then the generator's), both
// losses logged, checkpoints every few steps, and a run that was killed continues where its last
// checkpoint left it. docs/trainer.md, "Several optimizers" and "A model per phase".
//
//   example_gan [DIR [EPOCHS]]   checkpoints, metrics.csv and the final weights (model.pt) in DIR
//                                (none: a fresh temporary directory, removed at the end)

#include <torch/torch.h>
#include <torchbus/callbacks/callbacks.hpp>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

/// Noise of 8 -> a 2-D sample.
torch::nn::Sequential make_generator() {
  return torch::nn::Sequential(torch::nn::Linear(8, 64), torch::nn::ReLU(),
                               torch::nn::Linear(64, 64), torch::nn::ReLU(),
                               torch::nn::Linear(64, 2));
}

/// A 2-D sample -> the logit of "real".
torch::nn::Sequential make_discriminator() {
  return torch::nn::Sequential(
      torch::nn::Linear(2, 64),
      torch::nn::LeakyReLU(torch::nn::LeakyReLUOptions().negative_slope(0.2)),
      torch::nn::Linear(64, 1));
}

/// 2048 samples of eight Gaussians (std 0.05) on the unit circle, in batches of 64.
std::vector<torchbus::Batch> mixture() {
  torch::manual_seed(1);
  const auto mode = torch::randint(8, {2048}, torch::kLong);
  const auto angle = mode.to(torch::kFloat) * (2.0 * M_PI / 8.0);
  const auto samples =
      torch::stack({torch::cos(angle), torch::sin(angle)}, 1) + 0.05 * torch::randn({2048, 2});
  std::vector<torchbus::Batch> batches;
  for (int i = 0; i < 32; ++i) batches.emplace_back(samples.narrow(0, 64 * i, 64), at::Tensor());
  return batches;
}

}  // namespace

int main(int argc, char** argv) {
  namespace F = torch::nn::functional;
  const bool temporary = argc < 2;
  const auto directory = temporary ? std::filesystem::temp_directory_path() /
                                         ("torchbus_gan_" + std::to_string(::getpid()))
                                   : std::filesystem::path(argv[1]);
  if (temporary) std::filesystem::remove_all(directory);
  const int epochs = argc > 2 ? std::stoi(argv[2]) : 12;
  const auto batches = mixture();

  torch::manual_seed(0);
  auto generator = make_generator();
  auto discriminator = make_discriminator();
  torch::optim::Adam discriminator_adam(discriminator->parameters(),
                                        torch::optim::AdamOptions(1e-3).betas({0.5, 0.999}));
  torch::optim::Adam generator_adam(generator->parameters(),
                                    torch::optim::AdamOptions(1e-3).betas({0.5, 0.999}));
  // Each phase brings its model (no wrapper module: the trainer keeps them as "discriminator"
  // and "generator"). The discriminator's phase draws the batch's fakes and leaves them in the
  // tensor store; the generator's phase, which runs after the discriminator's update, scores them
  // again.
  auto discriminator_phase =
      torchbus::OptimizerPhase(
          "discriminator", discriminator_adam,
          [generator, discriminator](torchbus::Trainer& trainer, torchbus::Batch& real) mutable {
            const auto fake = generator->forward(torch::randn({real.data.size(0), 8}));
            trainer.state().tensors.set("fake", fake);
            return F::softplus(-discriminator->forward(real.data)).mean() +
                   F::softplus(discriminator->forward(fake.detach())).mean();
          })
          .model(discriminator);
  auto generator_phase = torchbus::OptimizerPhase(
                             "generator", generator_adam,
                             [discriminator](torchbus::Trainer& trainer, torchbus::Batch&) mutable {
                               const auto& fake = trainer.state().tensors.get("fake");
                               return F::softplus(-discriminator->forward(fake)).mean();
                             })
                             .model(generator);
  torchbus::Trainer trainer({discriminator_phase, generator_phase},
                            torchbus::TrainerOptions().max_epochs(epochs).run_identity(
                                "example=gan\nepochs=" + std::to_string(epochs)));
  // Both losses of every epoch in metrics.csv (train_loss_epoch/<phase>); a checkpoint every 16
  // steps, from which a new run in the same directory continues (and the file with it).
  trainer.add(std::make_shared<torchbus::CsvLogger>(
      torchbus::CsvLoggerOptions((directory / "metrics.csv").string())
          .tensors_to_log({})
          .append(true)));
  trainer.add(std::make_shared<torchbus::ModelCheckpoint>(
      torchbus::ModelCheckpointOptions(directory).every_n_steps(16).resume(true)));
  trainer.on(torchbus::Event::EpochEnd, [](torchbus::State& state) {
    const auto& metrics = state.metrics;
    std::cout << "epoch " << state.epoch << ": discriminator loss "
              << metrics.latest("train_loss_epoch/discriminator").value << ", generator loss "
              << metrics.latest("train_loss_epoch/generator").value << "\n";
  });
  trainer.fit(batches);

  // How well the generator covers the eight modes: the share of 1024 fakes within 0.25 of one.
  torch::NoGradGuard no_grad;
  torch::manual_seed(5);
  const auto fake = generator->forward(torch::randn({1024, 8}));
  const auto angles = torch::arange(8, torch::kFloat) * (2.0 * M_PI / 8.0);
  const auto modes = torch::stack({torch::cos(angles), torch::sin(angles)}, 1);
  const auto nearest = torch::cdist(fake, modes).min(1);
  const auto close = (std::get<0>(nearest) < 0.25).to(torch::kFloat).mean().item<double>();
  const auto covered = std::get<1>(nearest).masked_select(std::get<0>(nearest) < 0.25);
  const auto modes_hit = torch::bincount(covered, {}, 8).gt(0).sum().item<std::int64_t>();
  torch::save(trainer.module().parameters(), (directory / "model.pt").string());
  std::cout << "GAN finished: " << trainer.state().step << " steps, "
            << trainer.optimizer_phases()[1].name() << " made "
            << trainer.state().metrics.series("train_loss/generator").size() << " updates; "
            << static_cast<int>(100 * close) << "% of fakes near a mode, " << modes_hit
            << " of 8 modes hit\n";
  if (temporary) std::filesystem::remove_all(directory);
  return 0;
}
