#pragma once

// A run with shuffling (a torch::data loader with RandomSampler), dropout and k = 2 that records
// the rows of every batch it trains on: for exact-resume tests, in-process and across a kill.

#include <torch/torch.h>
#include <torchbus/optimizer_state.hpp>
#include <torchbus/torchbus.hpp>

#include <string>
#include <vector>

namespace torchbus::testing {

/// 60 rows whose first input column is the row's index, so a batch can be identified.
struct IndexedRows : torch::data::datasets::Dataset<IndexedRows> {
  at::Tensor data, target;
  IndexedRows() {
    torch::manual_seed(123);
    data = torch::randn({60, 5});
    data.select(1, 0).copy_(torch::arange(60, torch::kFloat));
    target = torch::randint(3, {60}, torch::kLong);
  }
  torch::data::Example<> get(std::size_t i) override { return {data[i], target[i]}; }
  torch::optional<std::size_t> size() const override { return 60; }
};

/// 3 epochs of 60 shuffled rows in batches of 8 (8 batches, the last of 4), k = 2 (4 steps per
/// epoch), Adam, dropout, seed 11. `seen` gets one "global_batch:row,row,..." line per batch.
struct ResumeRun {
  torch::nn::Sequential model;
  torch::optim::Adam optimizer;
  Trainer trainer;
  std::vector<std::string> seen;

  explicit ResumeRun(std::uint64_t init_seed = 5, std::string identity = "",
                     Precision precision = Precision::Float32)
      : model(make_model(init_seed)),
        optimizer(model->parameters(), torch::optim::AdamOptions(1e-2)),
        trainer(model, optimizer, loss,
                TrainerOptions()
                    .max_epochs(3)
                    .accumulate_grad_batches(2)
                    .seed(11)
                    .run_identity(std::move(identity))
                    .precision(precision)
                    .use_registered_subscriptions(false)) {
    trainer.set_train_step([this](Trainer& t, Batch& batch) {
      std::string line = std::to_string(t.state().global_batch) + ":";
      const auto rows = batch.data.select(1, 0).to(torch::kLong);
      for (std::int64_t i = 0; i < rows.size(0); ++i)
        line += std::to_string(rows[i].item<std::int64_t>()) + ",";
      seen.push_back(line);
      return loss(t.forward(batch.data), batch.target);
    });
  }

  void fit() {
    IndexedRows rows;
    auto loader = torch::data::make_data_loader<torch::data::samplers::RandomSampler>(
        rows.map(torch::data::transforms::Stack<>()), 8);
    trainer.fit(*loader);
  }

  static torch::nn::Sequential make_model(std::uint64_t seed) {
    torch::manual_seed(seed);
    return torch::nn::Sequential(torch::nn::Linear(5, 16), torch::nn::ReLU(),
                                 torch::nn::Dropout(0.2), torch::nn::Linear(16, 3));
  }
  static at::Tensor loss(const at::Tensor& output, const at::Tensor& target) {
    return torch::nn::functional::cross_entropy(output, target);
  }
};

/// Copies of every parameter of `module`.
inline std::vector<at::Tensor> snapshot_parameters(torch::nn::Module& module) {
  std::vector<at::Tensor> copies;
  for (const auto& parameter : module.parameters()) copies.push_back(parameter.detach().clone());
  return copies;
}

/// Every tensor of Adam's state, in parameter order.
inline std::vector<at::Tensor> adam_state(torch::optim::Adam& optimizer) {
  std::vector<at::Tensor> tensors;
  for (const auto& parameter : optimizer.param_groups()[0].params()) {
    const auto& state =
        static_cast<const torch::optim::AdamParamState&>(*optimizer_state_of(optimizer, parameter));
    tensors.push_back(state.exp_avg());
    tensors.push_back(state.exp_avg_sq());
    tensors.push_back(torch::tensor(state.step()));
  }
  return tensors;
}

/// The uninterrupted run's sequence equals the interrupted run's batches up to the resumed
/// position followed by the resumed run's.
inline std::vector<std::string> stitch(const std::vector<std::string>& before,
                                       const std::vector<std::string>& after) {
  std::vector<std::string> out;
  const auto resumed_at = std::stoll(after.front().substr(0, after.front().find(':')));
  for (const auto& line : before) {
    if (std::stoll(line.substr(0, line.find(':'))) < resumed_at) out.push_back(line);
  }
  out.insert(out.end(), after.begin(), after.end());
  return out;
}

}  // namespace torchbus::testing
