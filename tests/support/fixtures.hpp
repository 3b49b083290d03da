#pragma once

// Test support: small deterministic data and models for trainer tests.

#include <torch/torch.h>
#include <torchbus/torchbus.hpp>

#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace torchbus::testing {

/// `count` batches of `batch_size` rows with `features` inputs and class targets in [0, classes).
inline std::vector<Batch> make_batches(int count, int batch_size, int features = 4, int classes = 3,
                                       std::uint64_t seed = 7) {
  torch::manual_seed(seed);
  std::vector<Batch> batches;
  for (int i = 0; i < count; ++i) {
    auto data = torch::randn({batch_size, features});
    auto target = torch::randint(classes, {batch_size}, torch::kLong);
    batches.emplace_back(data, target);
  }
  return batches;
}

/// Concatenates groups of `group` consecutive batches into single batches.
inline std::vector<Batch> merge_batches(const std::vector<Batch>& batches, int group) {
  std::vector<Batch> merged;
  for (std::size_t i = 0; i < batches.size(); i += group) {
    std::vector<at::Tensor> data, target;
    for (std::size_t j = i; j < i + group && j < batches.size(); ++j) {
      data.push_back(batches[j].data);
      target.push_back(batches[j].target);
    }
    merged.emplace_back(torch::cat(data), torch::cat(target));
  }
  return merged;
}

/// A small classifier with fixed initial weights.
inline torch::nn::Sequential make_model(int features = 4, int classes = 3, std::uint64_t seed = 1) {
  torch::manual_seed(seed);
  return torch::nn::Sequential(torch::nn::Linear(features, 8), torch::nn::ReLU(),
                               torch::nn::Linear(8, classes));
}

/// The cross-entropy loss used by most tests.
inline at::Tensor cross_entropy(const at::Tensor& output, const at::Tensor& target) {
  return torch::nn::functional::cross_entropy(output, target);
}

/// Copies of every parameter of `module`.
inline std::vector<at::Tensor> snapshot(torch::nn::Module& module) {
  std::vector<at::Tensor> copies;
  for (const auto& parameter : module.parameters()) copies.push_back(parameter.detach().clone());
  return copies;
}

/// Whether every tensor of `a` equals its counterpart in `b`, bit for bit.
inline bool all_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i])) return false;
  }
  return true;
}

/// The largest absolute difference between `a` and `b`, computed in double precision.
inline double max_difference(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

/// The value of `metric` that `history` recorded at `step`; std::out_of_range when it has none.
inline double at_step(const MetricHistory& history, const std::string& metric, std::int64_t step) {
  for (const auto& point : history.series(metric)) {
    if (point.step == step) return point.value;
  }
  throw std::out_of_range("no point of " + metric + " at step " + std::to_string(step));
}

/// A model, an SGD optimizer (lr 0.1) and a Trainer on them, without registered subscriptions.
struct Run {
  torch::nn::Sequential model = make_model();
  torch::optim::SGD optimizer{model->parameters(), torch::optim::SGDOptions(0.1)};
  Trainer trainer;

  explicit Run(TrainerOptions options = {})
      : trainer(model, optimizer, cross_entropy, options.use_registered_subscriptions(false)) {}
};

/// Makes `trainer`'s next fit resume from the checkpoint, written at `path`, of a Run with
/// `options` that fitted `batches` (what the resume restores: its counters, weights, generators).
inline void resume_after_a_run(Trainer& trainer, TrainerOptions options, std::vector<Batch> batches,
                               const std::filesystem::path& path) {
  Run first(std::move(options));
  first.trainer.fit(batches);
  first.trainer.save_checkpoint(path);
  trainer.resume_from(path);
}

/// Copies a callback's state into `to` through a serialized archive.
template <typename CallbackType>
void round_trip(const CallbackType& from, CallbackType& to) {
  torch::serialize::OutputArchive out;
  from.save_state(out);
  std::stringstream stream;
  out.save_to(stream);
  torch::serialize::InputArchive in;
  in.load_from(stream);
  to.load_state(in);
}

}  // namespace torchbus::testing
