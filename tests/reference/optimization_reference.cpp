// Runs EMA, SWA (with update_batch_norm) and the trainer's gradient clipping on a small model with
// a batch-norm layer, and writes what they produced next to their inputs: per case a state_dict
// file (torchbus::state_dict_bytes, read by Python's torch.load) with the raw weights and the
// averages of every step or epoch, the gradients before and after clipping, and the model after
// fit(); cases.json says what each case ran. compare_optimization.py recomputes the averages with
// torch.optim.swa_utils (AveragedModel, update_bn) and the clipping with torch.nn.utils.
// Usage: optimization_reference OUT_DIR

#include <nlohmann/json.hpp>
#include <support/fixtures.hpp>
#include <torchbus/callbacks/ema.hpp>
#include <torchbus/callbacks/swa.hpp>
#include <torchbus/state_dict.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>

using namespace torchbus;
using namespace torchbus::testing;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

/// Linear -> BatchNorm1d -> ReLU -> Linear, as Python's nn.Sequential of the same layers.
torch::nn::Sequential make_batch_norm_model() {
  torch::manual_seed(5);
  return torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::BatchNorm1d(8),
                               torch::nn::ReLU(), torch::nn::Linear(8, 3));
}

/// The tensors one case writes, each under "<tag>/<name>".
struct Record {
  NamedTensors tensors;

  void add(const std::string& tag, const NamedTensors& named) {
    for (const auto& [name, tensor] : named) {
      tensors.emplace_back(tag + "/" + name, tensor.detach().clone());
    }
  }
  /// `values` named after the first values.size() entries of `names` (a prefix of the model's
  /// parameters and buffers).
  void add(const std::string& tag, const NamedTensors& names,
           const std::vector<at::Tensor>& values) {
    NamedTensors named;
    for (std::size_t i = 0; i < values.size(); ++i)
      named.emplace_back(names.at(i).first, values[i]);
    add(tag, named);
  }
  void write(const fs::path& path) const {
    std::ofstream out(path, std::ios::binary);
    out << state_dict_bytes(tensors);
    if (!out) throw std::runtime_error("cannot write " + path.string());
  }
};

/// The gradients of the model's parameters, named as its parameters.
NamedTensors gradients_of(torch::nn::Module& model) {
  NamedTensors gradients;
  for (const auto& parameter : model.named_parameters()) {
    gradients.emplace_back(parameter.key(), parameter.value().grad());
  }
  return gradients;
}

/// EMA over `steps` optimizer steps (one epoch): the weights before fit(), the raw weights and
/// the averages after every step, and the model after fit() (apply_at_end: the averages).
json ema_case(const std::string& name, EMAOptions options, int steps, const fs::path& dir) {
  auto model = make_batch_norm_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  Trainer trainer(model, sgd, cross_entropy, TrainerOptions().use_registered_subscriptions(false));
  auto ema = std::make_shared<EMA>(options);
  trainer.add(ema);
  Record record;
  record.add("initial", state_dict_of(*model));
  // A subscriber without a role runs after EMA (Role::WeightAveraging) at StepEnd.
  trainer.on(Event::StepEnd, [&](State& state) {
    const auto step = "step" + std::to_string(state.step);
    record.add(step + "/raw", state_dict_of(*model));
    record.add(step + "/average", state_dict_of(*model), ema->average());
  });
  trainer.fit(make_batches(steps, 6));
  record.add("final", state_dict_of(*model));
  record.write(dir / (name + ".pt"));
  return json{{"name", name},
              {"kind", "ema"},
              {"steps", steps},
              {"decay", options.decay()},
              {"every_n_steps", options.every_n_steps()},
              {"average_buffers", options.average_buffers()},
              {"apply_at_end", options.apply_at_end()}};
}

/// SWA (`options`, with a start_epoch and a swa_lr) with update_batch_norm on `bn_batches`
/// batches: the learning rate of every step, the raw weights and the average at every epoch end,
/// the batch-norm data and the model after fit().
json swa_case(const std::string& name, std::int64_t epochs, SWAOptions options, int bn_batches,
              const fs::path& dir) {
  auto model = make_batch_norm_model();
  const double base_lr = 0.1;
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(base_lr).momentum(0.9));
  Trainer trainer(model, sgd, cross_entropy,
                  TrainerOptions().max_epochs(epochs).use_registered_subscriptions(false));
  auto bn_data = make_batches(bn_batches, 5, 4, 3, /*seed=*/11);
  auto swa = std::make_shared<SWA>(
      options.batch_norm_data(std::make_shared<RangeSource<std::vector<Batch>>>(bn_data)));
  trainer.add(swa);
  json lrs = json::array();  // [epoch, learning rate] of every optimizer step
  trainer.on(Event::BeforeOptimizerStep, [&](State& state) {
    lrs.push_back({state.epoch, state.optimizer->param_groups()[0].options().get_lr()});
  });
  Record record;
  trainer.on(Event::EpochEnd, [&](State& state) {
    const auto epoch = "epoch" + std::to_string(state.epoch);
    record.add(epoch + "/raw", state_dict_of(*model));
    if (!swa->average().empty())
      record.add(epoch + "/average", state_dict_of(*model), swa->average());
  });
  trainer.fit(make_batches(3, 6));
  for (std::size_t i = 0; i < bn_data.size(); ++i) {
    record.tensors.emplace_back("bn_data/" + std::to_string(i), bn_data[i].data);
  }
  record.add("final", state_dict_of(*model));
  record.write(dir / (name + ".pt"));
  return json{{"name", name},
              {"kind", "swa"},
              {"epochs", epochs},
              {"start_epoch", options.start_epoch().value()},
              {"base_lr", base_lr},
              {"swa_lr", options.swa_lr().value()},
              {"annealing_epochs", options.annealing_epochs()},
              {"annealing", options.annealing() == SWAAnnealing::Cosine ? "cos" : "linear"},
              {"lr", lrs},
              {"bn_batches", bn_batches}};
}

/// The trainer's clipping over `steps` optimizer steps: the gradients at BeforeOptimizerStep (as
/// the backward left them) and at AfterOptimizerStep (as the optimizer applied them).
/// `clips`: whether the threshold is meant to be reached (at least once).
json clip_case(const std::string& name, TrainerOptions options, int steps, bool clips,
               const fs::path& dir) {
  auto model = make_batch_norm_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, sgd, cross_entropy, options.use_registered_subscriptions(false));
  Record record;
  trainer.on(Event::BeforeOptimizerStep, [&](State& state) {
    record.add("step" + std::to_string(state.step) + "/raw_grad", gradients_of(*model));
  });
  trainer.on(Event::AfterOptimizerStep, [&](State& state) {
    record.add("step" + std::to_string(state.step) + "/clipped_grad", gradients_of(*model));
  });
  trainer.fit(make_batches(steps * static_cast<int>(options.accumulate_grad_batches()), 6));
  record.write(dir / (name + ".pt"));
  return json{{"name", name},
              {"kind", "clip"},
              {"steps", steps},
              {"clips", clips},
              {"clip_norm", options.gradient_clip_norm()},
              {"clip_value", options.gradient_clip_value()},
              {"accumulate_grad_batches", options.accumulate_grad_batches()}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: optimization_reference OUT_DIR\n";
    return 2;
  }
  const fs::path dir(argv[1]);
  fs::create_directories(dir);
  json cases = json::array();
  cases.push_back(ema_case("ema", EMAOptions().decay(0.9), 6, dir));
  cases.push_back(
      ema_case("ema_every_2_steps_parameters_only",
               EMAOptions().decay(0.75).every_n_steps(2).average_buffers(false).apply_at_end(false),
               7, dir));
  cases.push_back(swa_case("swa_update_bn", 5,
                           SWAOptions().start_epoch(2).swa_lr(0.02).annealing_epochs(2), 3, dir));
  cases.push_back(swa_case(
      "swa_linear_annealing", 6,
      SWAOptions().start_epoch(1).swa_lr(0.01).annealing_epochs(3).annealing(SWAAnnealing::Linear),
      2, dir));
  cases.push_back(clip_case("clip_norm", TrainerOptions().gradient_clip_norm(0.3), 4, true, dir));
  cases.push_back(clip_case("clip_norm_not_reached", TrainerOptions().gradient_clip_norm(100.0), 2,
                            false, dir));
  cases.push_back(
      clip_case("clip_value", TrainerOptions().gradient_clip_value(0.05), 4, true, dir));
  cases.push_back(clip_case("clip_norm_accumulated",
                            TrainerOptions().gradient_clip_norm(0.3).accumulate_grad_batches(2), 3,
                            true, dir));

  std::ofstream out(dir / "cases.json");
  out << json{{"cases", cases}}.dump(1) << '\n';
  if (!out) {
    std::cerr << "optimization_reference: cannot write " << (dir / "cases.json") << '\n';
    return 1;
  }
  std::cout << "optimization_reference: " << cases.size() << " cases written to " << dir << '\n';
  return 0;
}
