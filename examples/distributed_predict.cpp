// Predictions on several ranks, written once and in order: each rank trains on its shard (a global
// batch of 16 on one or two ranks), then
// predicts its unshuffled shard of 95 samples (a DistributedSampler pads it to 96, repeating the
// first sample), and a PredictionWriter gathers every rank's rows on rank 0 and writes each sample
// once, ordered by the index an IndexedDataset gives it. docs/builtin-callbacks-loggers.md,
// "PredictionWriter".
//
//   example_distributed_predict [OUT]    one process: OUT/predictions.csv (default: a temporary
//   torchrun --nproc-per-node 2 example_distributed_predict OUT           directory, removed)
//   mpirun -np 2 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29500 example_distributed_predict OUT

#include <torch/torch.h>
#include <torchbus/callbacks/callbacks.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include <unistd.h>

namespace {

/// 95 samples of 8 features in 4 classes, the same on every rank.
class Points : public torch::data::datasets::Dataset<Points> {
 public:
  Points() {
    torch::manual_seed(7);
    inputs_ = torch::randn({95, 8});
    targets_ = inputs_.narrow(1, 0, 4).argmax(1);
  }
  torch::data::Example<> get(std::size_t index) override {
    const auto i = static_cast<std::int64_t>(index);
    return {inputs_[i], targets_[i]};
  }
  c10::optional<std::size_t> size() const override { return 95; }

 private:
  at::Tensor inputs_, targets_;
};

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  const bool temporary = argc < 2;
  const fs::path out =
      temporary ? fs::temp_directory_path() / ("torchbus_predict_" + std::to_string(::getpid()))
                : fs::path(argv[1]);
  const auto group = torchbus::ProcessGroup::from_environment();
  torch::manual_seed(3);
  torch::nn::Sequential model(torch::nn::Linear(8, 16), torch::nn::ReLU(),
                              torch::nn::Linear(16, 4));
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  torchbus::Trainer trainer(
      model, optimizer,
      [](const at::Tensor& output, const at::Tensor& target) {
        return torch::nn::functional::cross_entropy(output, target);
      },
      torchbus::TrainerOptions().max_epochs(3).seed(11));
  trainer.set_process_group(group);
  // Trained on the first 80 samples at a global batch of 16, whatever the number of ranks.
  auto train = torch::data::make_data_loader(
      Points().map(torch::data::transforms::Stack<>()),
      torchbus::DistributedSampler(80, group.get()),
      torch::data::DataLoaderOptions(static_cast<std::size_t>(16 / group->world_size())));
  trainer.fit(*train);

  trainer.set_predict_step([&](torchbus::Trainer&, torchbus::Batch& batch) {
    const auto logits = model->forward(batch.data);
    return torchbus::Output{{"class", logits.argmax(1)}, {"probability", logits.softmax(1)}};
  });
  trainer.add(std::make_shared<torchbus::PredictionWriter>(
      torchbus::PredictionWriterOptions(out / "predictions.csv")
          .outputs({"class", "probability"})));
  auto predict = torch::data::make_data_loader(
      torchbus::IndexedDataset<Points>(Points()),
      torchbus::DistributedSampler(95, group.get(), /*shuffle=*/false),
      torch::data::DataLoaderOptions(10));
  torchbus::RangeSource source(*predict);
  trainer.predict_source(source, /*keep=*/false);  // the writer takes each batch's rows

  if (group->rank() == 0) {
    std::ifstream written(out / "predictions.csv");
    std::int64_t rows = -1;  // the header is not a row
    for (std::string line; std::getline(written, line);) ++rows;
    std::cout << "predicted on " << group->world_size() << " rank(s): " << rows
              << " rows in predictions.csv, one per sample\n";
    if (temporary) fs::remove_all(out);
    return rows == 95 ? 0 : 1;
  }
  return 0;
}
