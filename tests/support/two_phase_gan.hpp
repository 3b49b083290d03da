#pragma once

// Test support: a tiny GAN trained in two optimizer phases (discriminator, then generator), and
// the hand-written LibTorch loop that does what the trainer's phases do.

#include <torch/torch.h>
#include <torchbus/optimizer_state.hpp>
#include <torchbus/torchbus.hpp>

#include <memory>
#include <string>
#include <vector>

namespace torchbus::testing {

/// A generator (noise of 3 -> sample of 4) and a discriminator (sample -> logit), fixed weights.
struct TinyGanImpl : torch::nn::Module {
  TinyGanImpl() {
    torch::manual_seed(3);
    generator = register_module("generator", torch::nn::Linear(3, 4));
    discriminator = register_module(
        "discriminator",
        torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::Tanh(), torch::nn::Linear(8, 1)));
  }
  torch::nn::Linear generator{nullptr};
  torch::nn::Sequential discriminator{nullptr};
};
TORCH_MODULE(TinyGan);

/// `count` batches of 8: real samples as data, the generator's noise as target.
inline std::vector<Batch> gan_batches(int count, std::uint64_t seed = 11) {
  torch::manual_seed(seed);
  std::vector<Batch> batches;
  for (int i = 0; i < count; ++i) {
    batches.emplace_back(torch::randn({8, 4}) + 1.0, torch::randn({8, 3}));
  }
  return batches;
}

/// TinyGan's halves as two separate modules with its initial weights, for phases that bring
/// their models (OptimizerPhase::model).
struct SeparateGan {
  SeparateGan() {
    torch::manual_seed(3);
    generator = torch::nn::Linear(3, 4);
    discriminator =
        torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::Tanh(), torch::nn::Linear(8, 1));
  }
  torch::nn::Linear generator{nullptr};
  torch::nn::Sequential discriminator{nullptr};
};

/// The discriminator's loss on real samples and (detached) fakes.
inline at::Tensor discriminator_loss(torch::nn::Sequential& discriminator, const at::Tensor& real,
                                     const at::Tensor& fake) {
  namespace F = torch::nn::functional;
  return F::softplus(-discriminator->forward(real)).mean() +
         F::softplus(discriminator->forward(fake.detach())).mean();
}
inline at::Tensor discriminator_loss(TinyGan& gan, const at::Tensor& real, const at::Tensor& fake) {
  return discriminator_loss(gan->discriminator, real, fake);
}

/// The generator's loss: its fakes taken for real.
inline at::Tensor generator_loss(torch::nn::Sequential& discriminator, const at::Tensor& fake) {
  return torch::nn::functional::softplus(-discriminator->forward(fake)).mean();
}
inline at::Tensor generator_loss(TinyGan& gan, const at::Tensor& fake) {
  return generator_loss(gan->discriminator, fake);
}

/// A TinyGan, an Adam per half, and a trainer of the two phases: "discriminator" (every batch;
/// it leaves the fakes in the tensor store as "fake") and "generator" (every
/// `generator_every` batches; it reads them).
struct GanRun {
  TinyGan gan;
  torch::optim::Adam discriminator_adam{gan->discriminator->parameters(),
                                        torch::optim::AdamOptions(1e-2)};
  torch::optim::Adam generator_adam{gan->generator->parameters(), torch::optim::AdamOptions(2e-2)};
  Trainer trainer;

  explicit GanRun(TrainerOptions options = {}, std::int64_t generator_every = 1)
      : trainer(gan.ptr(), phases(generator_every), options.use_registered_subscriptions(false)) {}

  std::vector<OptimizerPhase> phases(std::int64_t generator_every) {
    auto gan_ = gan;
    return {OptimizerPhase("discriminator", discriminator_adam,
                           [gan_](Trainer& trainer, Batch& batch) mutable {
                             auto fake = gan_->generator->forward(batch.target);
                             trainer.state().tensors.set("fake", fake);
                             return discriminator_loss(gan_, batch.data, fake);
                           }),
            OptimizerPhase("generator", generator_adam, [gan_](Trainer& trainer, Batch&) mutable {
              return generator_loss(gan_, trainer.state().tensors.get("fake"));
            }).every_n_batches(generator_every)};
  }
};

/// GanRun's phases on a SeparateGan, each phase bringing its model, in a trainer built from the
/// phases alone.
struct SeparateGanRun {
  SeparateGan gan;
  torch::optim::Adam discriminator_adam{gan.discriminator->parameters(),
                                        torch::optim::AdamOptions(1e-2)};
  torch::optim::Adam generator_adam{gan.generator->parameters(), torch::optim::AdamOptions(2e-2)};
  Trainer trainer;

  explicit SeparateGanRun(TrainerOptions options = {}, std::int64_t generator_every = 1)
      : trainer(phases(generator_every), options.use_registered_subscriptions(false)) {}

  std::vector<OptimizerPhase> phases(std::int64_t generator_every) {
    auto generator = gan.generator;
    auto discriminator = gan.discriminator;
    return {OptimizerPhase("discriminator", discriminator_adam,
                           [generator, discriminator](Trainer& trainer, Batch& batch) mutable {
                             auto fake = generator->forward(batch.target);
                             trainer.state().tensors.set("fake", fake);
                             return discriminator_loss(discriminator, batch.data, fake);
                           })
                .model(discriminator),
            OptimizerPhase("generator", generator_adam,
                           [discriminator](Trainer& trainer, Batch&) mutable {
                             return generator_loss(discriminator,
                                                   trainer.state().tensors.get("fake"));
                           })
                .model(generator)
                .every_n_batches(generator_every)};
  }
};

/// What the trainer's phases do, written by hand: per window of k batches (shorter at the end of
/// the data), per batch: the fakes; the discriminator's loss / (its batches in the window),
/// backward, and after the window's last batch its step; then, on the generator's batches, its
/// loss / (its batches in the window) into the generator's gradients only, and after its last
/// batch of the window its step.
inline void hand_written_gan_loop(TinyGan& gan, torch::optim::Optimizer& discriminator_optimizer,
                                  torch::optim::Optimizer& generator_optimizer,
                                  const std::vector<Batch>& batches, int epochs, int k,
                                  int generator_every) {
  const auto generator_parameters = gan->generator->parameters();
  std::int64_t global_batch = 0;
  const auto n = static_cast<int>(batches.size());
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (int start = 0; start < n; start += k) {
      const int window = std::min(k, n - start);
      int generator_due = 0;
      for (int i = 0; i < window; ++i)
        generator_due += (global_batch + i + 1) % generator_every == 0;
      int generator_seen = 0;
      for (int i = 0; i < window; ++i) {
        const auto& batch = batches[start + i];
        const auto fake = gan->generator->forward(batch.target);
        auto d_loss = discriminator_loss(gan, batch.data, fake);
        if (window > 1) d_loss = d_loss / static_cast<double>(window);
        d_loss.backward();
        if (i == window - 1) {
          discriminator_optimizer.step();
          discriminator_optimizer.zero_grad();
        }
        if ((global_batch + i + 1) % generator_every == 0) {
          ++generator_seen;
          auto g_loss = generator_loss(gan, fake);
          if (generator_due > 1) g_loss = g_loss / static_cast<double>(generator_due);
          const auto grads = torch::autograd::grad({g_loss}, generator_parameters);
          for (std::size_t p = 0; p < grads.size(); ++p) {
            auto parameter = generator_parameters[p];
            if (parameter.grad().defined()) {
              parameter.mutable_grad().add_(grads[p]);
            } else {
              parameter.mutable_grad() = grads[p].clone();
            }
          }
          if (generator_seen == generator_due) {
            generator_optimizer.step();
            generator_optimizer.zero_grad();
          }
        }
      }
      global_batch += window;
    }
  }
}

/// Whether two Adams hold the same state, bit for bit, for parameters in the same order.
inline bool same_adam_state(const torch::optim::Adam& a, const torch::optim::Adam& b) {
  const auto& pa = a.param_groups();
  const auto& pb = b.param_groups();
  if (pa.size() != pb.size()) return false;
  for (std::size_t g = 0; g < pa.size(); ++g) {
    if (pa[g].params().size() != pb[g].params().size()) return false;
    for (std::size_t i = 0; i < pa[g].params().size(); ++i) {
      const auto* found_a = optimizer_state_of(a, pa[g].params()[i]);
      const auto* found_b = optimizer_state_of(b, pb[g].params()[i]);
      if ((found_a == nullptr) != (found_b == nullptr)) return false;
      if (found_a == nullptr) continue;
      const auto& sa = static_cast<const torch::optim::AdamParamState&>(*found_a);
      const auto& sb = static_cast<const torch::optim::AdamParamState&>(*found_b);
      if (sa.step() != sb.step() || !torch::equal(sa.exp_avg(), sb.exp_avg()) ||
          !torch::equal(sa.exp_avg_sq(), sb.exp_avg_sq())) {
        return false;
      }
    }
  }
  return true;
}

/// Whether two modules' parameters are equal, bit for bit.
inline bool same_parameters(torch::nn::Module& a, torch::nn::Module& b) {
  const auto pa = a.parameters();
  const auto pb = b.parameters();
  if (pa.size() != pb.size()) return false;
  for (std::size_t i = 0; i < pa.size(); ++i) {
    if (!torch::equal(pa[i], pb[i])) return false;
  }
  return true;
}

}  // namespace torchbus::testing
