// One rank of the distributed tests: joins the process group from the launcher's environment,
// trains a small MLP on its DistributedSampler shard (validating with ClassificationMetrics) and
// writes what the test compares into
// OUT/rank<r>.txt and OUT/rank<r>.params (or OUT/rank<r>.error when it fails).
//
// Arguments are name=value: out, batch, accumulate, epochs, steps, bucket_bytes, timeout_ms,
// report_ms,
// stop_rank/stop_step/stop_event (request a stop there; event StepEnd by default, or
// AfterBackward), skip_rank/skip_step/skip_event (set skip_update there; AfterBackward by default,
// or BeforeOptimizerStep), throw_rank/throw_step (throw there),
// save_step/save/save_event (rank 0 writes a checkpoint there: at StepEnd by default, or at the
// first EpochStart where state.step is save_step), resume (a checkpoint to continue from),
// mark_step (each rank creates OUT/rank<r>.running there, to tell the test training is under way),
// slow_ms (each step after mark_step sleeps that long, so that a SIGKILL lands mid-run),
// samples=1 (each rank appends "epoch step index" to OUT/rank<r>.samples for every sample it
// trains on, step being the steps completed before it),
// unused=1 (the model has a parameter the forward never uses, and the optimizer weight decay),
// gan=1 (instead: a small GAN in two optimizer phases, discriminator then generator, whose
// generator turns each sample's first 3 features, negated, into a fake; no validation),
// phase_models=1 (with gan=1: each phase brings its half as its model, no wrapper module),
// structured=1 (batches of named fields `features`, `labels`, `index`, `onehot` from a dataset of
// torchbus::Batch samples, collated by the trainer; a forward of the batch returning named logits
// and a loss of the output and the batch; RegressionMetrics of the logits against `onehot`).

#include <torch/torch.h>
#include <torchbus/callbacks/classification_metrics.hpp>
#include <torchbus/callbacks/regression_metrics.hpp>
#include <torchbus/torchbus.hpp>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>

namespace {

/// The 96-sample, 8-feature, 4-class problem, identical on every rank.
class Synthetic : public torch::data::datasets::Dataset<Synthetic> {
 public:
  Synthetic() {
    torch::manual_seed(7);
    inputs_ = torch::randn({96, 8});
    targets_ = torch::randint(0, 4, {96}, torch::kLong);
  }
  /// The index of the sample whose features are `row` (-1: none).
  std::int64_t index_of(const at::Tensor& row) const {
    for (std::int64_t i = 0; i < inputs_.size(0); ++i) {
      if (torch::equal(inputs_[i], row)) return i;
    }
    return -1;
  }
  torch::data::Example<> get(std::size_t index) override {
    const auto i = static_cast<std::int64_t>(index);
    return {inputs_[i], targets_[i]};
  }
  c10::optional<std::size_t> size() const override { return 96; }

 private:
  at::Tensor inputs_;
  at::Tensor targets_;
};

/// The same samples as named fields: `features` [8], `labels` (0-dim) and their `index`.
class NamedSynthetic : public torch::data::datasets::Dataset<NamedSynthetic, torchbus::Batch> {
 public:
  torchbus::Batch get(std::size_t index) override {
    auto pair = plain_.get(index);
    torchbus::Batch sample;
    sample.set("features", pair.data)
        .set("labels", pair.target)
        .set("index", torch::tensor(static_cast<std::int64_t>(index)))
        .set("onehot", torch::one_hot(pair.target, 4).to(torch::kFloat));
    return sample;
  }
  c10::optional<std::size_t> size() const override { return 96; }

 private:
  Synthetic plain_;
};

std::map<std::string, std::string> parse(int argc, char** argv) {
  std::map<std::string, std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto equals = arg.find('=');
    if (equals == std::string::npos) throw torchbus::ConfigError("expected name=value, got " + arg);
    args[arg.substr(0, equals)] = arg.substr(equals + 1);
  }
  return args;
}

std::int64_t number(const std::map<std::string, std::string>& args, const std::string& name,
                    std::int64_t fallback) {
  const auto found = args.find(name);
  return found == args.end() ? fallback : std::stoll(found->second);
}

/// This process's rank as the launcher set it, for file names even when joining failed.
std::string rank_label() {
  for (const char* name : {"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}) {
    if (const char* value = std::getenv(name)) return value;
  }
  return "0";
}

void train(const std::map<std::string, std::string>& args, const std::string& out) {
  const auto group = torchbus::ProcessGroup::from_environment(
      torchbus::DistributedOptions()
          .timeout(std::chrono::milliseconds(number(args, "timeout_ms", 20000)))
          .wait_report_interval(std::chrono::milliseconds(number(args, "report_ms", 5000)))
          .bucket_bytes(number(args, "bucket_bytes", 600)));
  const int rank = group->rank();
  Synthetic dataset;
  torch::manual_seed(3);
  torch::nn::Sequential model(torch::nn::Linear(8, 16), torch::nn::ReLU(),
                              torch::nn::Linear(16, 4));
  const bool unused = number(args, "unused", 0) != 0;
  if (unused) model->register_parameter("unused", torch::ones({3}));
  if (rank != 0) {
    torch::NoGradGuard no_grad;
    for (auto& parameter : model->parameters()) parameter.add_(1.0);  // broadcast must undo this
  }
  torch::optim::SGD optimizer(
      model->parameters(),
      torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(unused ? 0.01 : 0.0));
  const auto options = torchbus::TrainerOptions()
                           .max_epochs(number(args, "epochs", 2))
                           .max_steps(number(args, "steps", -1))
                           .accumulate_grad_batches(number(args, "accumulate", 1))
                           .min_steps(number(args, "min_steps", 0))
                           .seed(11);
  const bool structured = number(args, "structured", 0) != 0;
  auto trainer_holder =
      structured
          ? std::make_unique<torchbus::Trainer>(
                model.ptr(), torchbus::Trainer::BatchForward([&](const torchbus::Batch& batch) {
                  return torchbus::Output{{"logits", model->forward(batch.get("features"))}};
                }),
                optimizer,
                [](const torchbus::Output& output, const torchbus::Batch& batch) {
                  return torch::nn::functional::cross_entropy(output.get("logits"),
                                                              batch.get("labels"));
                },
                options)
          : std::make_unique<torchbus::Trainer>(
                model, optimizer,
                [](const at::Tensor& output, const at::Tensor& target) {
                  return torch::nn::functional::cross_entropy(output, target);
                },
                options);
  auto& trainer = *trainer_holder;
  trainer.set_process_group(group);
  trainer.add(std::make_shared<torchbus::ClassificationMetrics>(
      structured ? torchbus::ClassificationMetricsOptions().output("logits").target("labels")
                 : torchbus::ClassificationMetricsOptions()));
  if (structured) {  // the logits against the one-hot labels, merged over the ranks' shards
    trainer.add(std::make_shared<torchbus::RegressionMetrics>(
        torchbus::RegressionMetricsOptions().output("logits").target("onehot")));
  }

  int group_starts = 0;
  trainer.on(torchbus::Event::ProcessGroupStart, [&](torchbus::State&) { ++group_starts; });
  const auto stop_rank = number(args, "stop_rank", -1);
  const auto stop_step = number(args, "stop_step", -1);
  const auto throw_rank = number(args, "throw_rank", -1);
  const auto throw_step = number(args, "throw_step", -1);
  const auto save_step = number(args, "save_step", -1);
  const auto mark_step = number(args, "mark_step", -1);
  const auto save_event = args.count("save_event") ? args.at("save_event") : "StepEnd";
  bool saved_at_epoch_start = false;  // once: the EpochStart of a resumed epoch, not the next one
  trainer.on(torchbus::Event::EpochStart, [&](torchbus::State& state) {
    if (state.rank == 0 && state.step == save_step && save_event == "EpochStart" &&
        !saved_at_epoch_start) {
      trainer.save_checkpoint(args.at("save"));
      saved_at_epoch_start = true;
    }
  });
  // Collectives per step (StepStart to StepEnd) and those already started when the window's
  // last backward returned, over all steps.
  std::int64_t at_step_start = 0;
  std::int64_t per_step_min = -1;
  std::int64_t per_step_max = -1;
  std::int64_t started_in_backward_min = -1;
  const auto stop_event = args.count("stop_event") ? args.at("stop_event") : "StepEnd";
  const auto stop_here = [&](torchbus::State& state, const char* event) {
    if (state.rank == stop_rank && state.step == stop_step && stop_event == event) {
      state.request_stop("test stop");
    }
  };
  trainer.on(torchbus::Event::StepStart,
             [&](torchbus::State&) { at_step_start = group->collectives(); });
  const auto skip_rank = number(args, "skip_rank", -1);
  const auto skip_step = number(args, "skip_step", -1);
  const auto skip_event = args.count("skip_event") ? args.at("skip_event") : "AfterBackward";
  bool skipped = false;  // once: a skipped update leaves state.step where it was
  const auto skip_here = [&](torchbus::State& state, const char* event) {
    if (state.rank == skip_rank && state.step == skip_step && skip_event == event && !skipped) {
      state.skip_update = skipped = true;
    }
  };
  trainer.on(torchbus::Event::BeforeOptimizerStep,
             [&](torchbus::State& state) { skip_here(state, "BeforeOptimizerStep"); });
  trainer.on(torchbus::Event::AfterBackward, [&](torchbus::State& state) {
    stop_here(state, "AfterBackward");
    skip_here(state, "AfterBackward");
    if (state.window_position + 1 != state.window_size) return;
    const auto started = group->collectives() - at_step_start;
    if (started_in_backward_min < 0 || started < started_in_backward_min) {
      started_in_backward_min = started;
    }
  });
  trainer.on(torchbus::Event::StepEnd, [&](torchbus::State& state) {
    const auto collectives = group->collectives() - at_step_start;
    if (per_step_min < 0 || collectives < per_step_min) per_step_min = collectives;
    per_step_max = std::max(per_step_max, collectives);
    stop_here(state, "StepEnd");
    if (state.step == number(args, "early_stop_step", -1)) state.request_early_stop("early stop");
    if (state.rank == throw_rank && state.step == throw_step) {
      throw std::runtime_error("injected failure at step " + std::to_string(state.step));
    }
    if (state.rank == 0 && state.step == save_step && save_event == "StepEnd") {
      trainer.save_checkpoint(args.at("save"));
    }
    if (state.step == mark_step) std::ofstream(out + "/rank" + std::to_string(rank) + ".running");
    if (mark_step >= 0 && state.step > mark_step) {
      std::this_thread::sleep_for(std::chrono::milliseconds(number(args, "slow_ms", 0)));
    }
  });
  if (args.count("resume")) trainer.resume_from(args.at("resume"));
  std::ofstream samples;
  if (number(args, "samples", 0) != 0) {
    samples.open(out + "/rank" + std::to_string(rank) + ".samples", std::ios::app);
    trainer.set_train_step([&](torchbus::Trainer& t, torchbus::Batch& batch) {
      const auto& state = t.state();
      for (std::int64_t i = 0; i < batch.samples(); ++i) {
        const auto index = structured ? batch.get("index")[i].item<std::int64_t>()
                                      : dataset.index_of(batch.data[i]);
        samples << state.epoch << ' ' << state.step << ' ' << index << '\n';
      }
      samples.flush();
      const auto output = t.forward(static_cast<const torchbus::Batch&>(batch));
      t.state().set_batch_output(output.main());
      return t.compute_loss(output, batch);
    });
  }

  const auto batch_size = static_cast<std::size_t>(number(args, "batch", 8));
  if (structured) {
    auto loader = torch::data::make_data_loader(NamedSynthetic(),
                                                torchbus::DistributedSampler(96, group.get()),
                                                torch::data::DataLoaderOptions(batch_size));
    auto validation = torch::data::make_data_loader(
        NamedSynthetic(), torchbus::DistributedSampler(96, group.get(), /*shuffle=*/false),
        torch::data::DataLoaderOptions(16));
    trainer.fit(*loader, *validation);
  } else {
    auto loader = torch::data::make_data_loader(dataset.map(torch::data::transforms::Stack<>()),
                                                torchbus::DistributedSampler(96, group.get()),
                                                torch::data::DataLoaderOptions(batch_size));
    // Validation on the same samples, each rank its unshuffled shard.
    auto validation = torch::data::make_data_loader(
        Synthetic().map(torch::data::transforms::Stack<>()),
        torchbus::DistributedSampler(96, group.get(), /*shuffle=*/false),
        torch::data::DataLoaderOptions(16));
    trainer.fit(*loader, *validation);
  }

  const auto metric = [&](const std::string& name) {
    const auto& metrics = trainer.state().metrics;
    return metrics.contains(name) ? std::to_string(metrics.latest(name).value) : "none";
  };
  const auto prefix = out + "/rank" + std::to_string(rank);
  std::ofstream(prefix + ".txt") << "step=" << trainer.state().step << "\n"
                                 << "global_batch=" << trainer.state().global_batch << "\n"
                                 << "collectives_per_step_min=" << per_step_min << "\n"
                                 << "collectives_per_step_max=" << per_step_max << "\n"
                                 << "started_in_backward_min=" << started_in_backward_min << "\n"
                                 << "group_starts=" << group_starts << "\n"
                                 << "stop_reason=" << trainer.state().stop_reason() << "\n"
                                 << "val_loss=" << metric("val_loss") << "\n"
                                 << "val_accuracy=" << metric("val_accuracy") << "\n"
                                 << "val_mse=" << metric("val_mse") << "\n"
                                 << "val_r2=" << metric("val_r2") << "\n"
                                 << "val_explained_variance=" << metric("val_explained_variance")
                                 << "\n";
  torch::save(model->parameters(), prefix + ".params");
}

/// A GAN of two optimizer phases on the same shards: the discriminator (every batch) and the
/// generator (every `generator_every` batches), each an Adam.
void train_gan(const std::map<std::string, std::string>& args, const std::string& out) {
  namespace F = torch::nn::functional;
  const auto group = torchbus::ProcessGroup::from_environment(
      torchbus::DistributedOptions().bucket_bytes(number(args, "bucket_bytes", 600)));
  const int rank = group->rank();
  torch::manual_seed(3);
  auto gan = std::make_shared<torch::nn::Module>();
  auto generator = gan->register_module("generator", torch::nn::Linear(3, 8));
  auto discriminator = gan->register_module(
      "discriminator",
      torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::Tanh(), torch::nn::Linear(16, 1)));
  if (rank != 0) {
    torch::NoGradGuard no_grad;
    for (auto& parameter : gan->parameters()) parameter.add_(1.0);  // broadcast must undo this
  }
  torch::optim::Adam discriminator_adam(discriminator->parameters(),
                                        torch::optim::AdamOptions(1e-2));
  torch::optim::Adam generator_adam(generator->parameters(), torch::optim::AdamOptions(2e-2));
  auto discriminator_phase = torchbus::OptimizerPhase(
      "discriminator", discriminator_adam, [&](torchbus::Trainer& self, torchbus::Batch& batch) {
        auto fake = generator->forward(-batch.data.narrow(1, 0, 3));
        self.state().tensors.set("fake", fake);
        return F::softplus(-discriminator->forward(batch.data)).mean() +
               F::softplus(discriminator->forward(fake.detach())).mean();
      });
  auto generator_phase =
      torchbus::OptimizerPhase("generator", generator_adam,
                               [&](torchbus::Trainer& self, torchbus::Batch&) {
                                 const auto& fake = self.state().tensors.get("fake");
                                 return F::softplus(-discriminator->forward(fake)).mean();
                               })
          .every_n_batches(number(args, "generator_every", 1));
  const auto options = torchbus::TrainerOptions()
                           .max_epochs(number(args, "epochs", 2))
                           .accumulate_grad_batches(number(args, "accumulate", 1))
                           .seed(11);
  std::unique_ptr<torchbus::Trainer> trainer_holder;
  if (number(args, "phase_models", 0) != 0) {
    trainer_holder = std::make_unique<torchbus::Trainer>(
        std::vector<torchbus::OptimizerPhase>{discriminator_phase.model(discriminator),
                                              generator_phase.model(generator)},
        options);
  } else {
    trainer_holder = std::make_unique<torchbus::Trainer>(
        gan, std::vector<torchbus::OptimizerPhase>{discriminator_phase, generator_phase}, options);
  }
  auto& trainer = *trainer_holder;
  trainer.set_process_group(group);
  std::int64_t at_step_start = 0;
  std::int64_t per_step_max = 0;
  trainer.on(torchbus::Event::StepStart,
             [&](torchbus::State&) { at_step_start = group->collectives(); });
  trainer.on(torchbus::Event::StepEnd, [&](torchbus::State&) {
    per_step_max = std::max(per_step_max, group->collectives() - at_step_start);
  });
  Synthetic dataset;
  auto loader = torch::data::make_data_loader(
      dataset.map(torch::data::transforms::Stack<>()),
      torchbus::DistributedSampler(96, group.get()),
      torch::data::DataLoaderOptions(static_cast<std::size_t>(number(args, "batch", 8))));
  trainer.fit(*loader);
  const auto prefix = out + "/rank" + std::to_string(rank);
  const auto& metrics = trainer.state().metrics;
  std::ofstream(prefix + ".txt") << "step=" << trainer.state().step << "\n"
                                 << "generator_updates="
                                 << metrics.series("train_loss/generator").size() << "\n"
                                 << "collectives_per_step_max=" << per_step_max << "\n"
                                 << "generator_loss="
                                 << metrics.latest("train_loss/generator").value << "\n";
  torch::save(gan->parameters(), prefix + ".params");
}

}  // namespace

int main(int argc, char** argv) {
  std::string out = ".";
  try {
    const auto args = parse(argc, argv);
    out = args.count("out") ? args.at("out") : out;
    if (number(args, "gan", 0) != 0) {
      train_gan(args, out);
    } else {
      train(args, out);
    }
    return 0;
  } catch (const std::exception& error) {
    std::ofstream(out + "/rank" + rank_label() + ".error") << error.what() << "\n";
    std::cerr << "rank " << rank_label() << ": " << error.what() << "\n";
    return 1;
  }
}
