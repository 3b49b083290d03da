// The same program on one process or many: launch it plain, with mpirun or with torchrun.
//   ./example_distributed
//   mpirun -np 2 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29500 ./example_distributed
//   torchrun --nproc_per_node 2 ./example_distributed   (or set RANK, WORLD_SIZE, MASTER_*
//   yourself)
// Optional argument: the number of optimizer steps (default 60).

#include <torch/torch.h>
#include <torchbus/torchbus.hpp>

#include <chrono>
#include <cstdlib>
#include <iostream>

/// 4096 samples of a learnable 784-feature, 10-class problem, the same on every rank.
class Synthetic : public torch::data::datasets::Dataset<Synthetic> {
 public:
  Synthetic() {
    torch::manual_seed(0);
    inputs_ = torch::randn({4096, 784});
    targets_ = inputs_.narrow(1, 0, 10).argmax(1);
  }
  torch::data::Example<> get(std::size_t i) override {
    return {inputs_[static_cast<std::int64_t>(i)], targets_[static_cast<std::int64_t>(i)]};
  }
  c10::optional<std::size_t> size() const override { return 4096; }

 private:
  at::Tensor inputs_, targets_;
};

/// Trains the MLP for `steps` optimizer steps on this process's rank of the launcher's run.
void train(std::int64_t steps) {
  auto group = torchbus::ProcessGroup::from_environment();  // a world of one without a launcher
  torch::nn::Sequential model(torch::nn::Linear(784, 256), torch::nn::ReLU(),
                              torch::nn::Linear(256, 10));
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  torchbus::Trainer trainer(
      model, optimizer,
      [](const at::Tensor& output, const at::Tensor& target) {
        return torch::nn::functional::cross_entropy(output, target);
      },
      torchbus::TrainerOptions().max_epochs(-1).max_steps(steps).seed(1));
  trainer.set_process_group(group);

  trainer.on(torchbus::Event::ProcessGroupStart, [](torchbus::State& state) {
    if (state.rank == 0) std::cout << "process group up: " << state.world_size << " rank(s)\n";
  });
  // Every rank's loss is the average over all ranks (the trainer reduces it with the gradients).
  trainer.on(torchbus::Event::StepEnd, torchbus::every(20), [](torchbus::State& state) {
    const auto losses = torchbus::gather(state, state.tensors.get("loss"));  // one per rank
    if (state.rank == 0)
      std::cout << "step " << state.step << " loss " << losses[0].item<double>() << "\n";
  });

  // Each rank reads its own shard; 64 samples per rank and step.
  auto loader = torch::data::make_data_loader(Synthetic().map(torch::data::transforms::Stack<>()),
                                              torchbus::DistributedSampler(4096, group.get()),
                                              torch::data::DataLoaderOptions(64));
  const auto start = std::chrono::steady_clock::now();
  trainer.fit(*loader);
  const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
  if (group->rank() == 0) {
    std::cout << "samples_per_second=" << 64.0 * group->world_size() * steps / seconds.count()
              << "\ndistributed example finished: " << trainer.state().step << " steps on "
              << group->world_size() << " rank(s)\n";
  }
}

int main(int argc, char** argv) {
  try {
    train(argc > 1 ? std::atoll(argv[1]) : 60);
    return 0;
  } catch (const std::exception& error) {
    // Any rank's failure ends here: a rank that died (`rank 0: all_reduce failed after 0.1 s: rank
    // 1 closed the connection ...`), a timeout, a bad launch environment. Exiting non-zero lets
    // the launcher end the run.
    std::cerr << error.what() << "\n";
    return 1;
  }
}
