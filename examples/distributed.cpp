// The same program on one process or many: launch it plain, with mpirun or with torchrun.
//   ./example_distributed
//   mpirun -np 2 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29500 ./example_distributed
//   torchrun --nproc_per_node 2 ./example_distributed   (or set RANK, WORLD_SIZE, MASTER_*
//   yourself)
// Arguments: [steps] [--model mlp|cnn|resnet] [--warmup W] [--log-every N]
//   steps        optimizer steps to time (default 60)
//   --model      mlp: 784-256-10 (default); cnn: the MNIST CNN (two 3x3 convolutions with 32 and
//                64 channels, max-pool 2, 9216-128-10, no dropout) on inputs of MNIST's shape;
//                resnet: ResNet-18's shape at a quarter of its width (small_resnet.hpp) on
//                3x32x32 images
//   --warmup W   run W more steps first and leave them out of samples_per_second (default 0)
//   --log-every  print the loss every N steps (default 20; 0: never, as benchmarks/run does)
// Rank 0 prints samples_per_second: 64 samples per rank and step over the timed steps.

#include <torch/torch.h>
#include <torchbus/torchbus.hpp>

#include "small_resnet.hpp"

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

/// 4096 samples of a learnable 10-class problem (the same on every rank) of one sample's
/// `shape`: 784 features for the MLP, 1x28x28 images for the CNN, 3x32x32 for the ResNet. A batch
/// is one indexing of the data tensors, not 64 samples fetched and stacked one by one.
class Synthetic : public torch::data::datasets::BatchDataset<Synthetic, torch::data::Example<>> {
 public:
  explicit Synthetic(std::vector<std::int64_t> shape) {
    torch::manual_seed(0);
    shape.insert(shape.begin(), 4096);
    inputs_ = torch::randn(shape);
    targets_ = inputs_.flatten(1).narrow(1, 0, 10).argmax(1);
  }
  torch::data::Example<> get_batch(c10::ArrayRef<std::size_t> indices) override {
    const auto index =
        torch::tensor(std::vector<std::int64_t>(indices.begin(), indices.end()), torch::kLong);
    return {inputs_.index_select(0, index), targets_.index_select(0, index)};
  }
  c10::optional<std::size_t> size() const override { return 4096; }

 private:
  at::Tensor inputs_, targets_;
};

struct Options {
  std::int64_t steps = 60;
  std::int64_t warmup = 0;
  std::int64_t log_every = 20;
  std::string model = "mlp";
};

/// Trains the model for warmup + steps optimizer steps on this process's rank of the launcher's
/// run, and has rank 0 print the samples per second of the last `steps`.
void train(const Options& options) {
  namespace nn = torch::nn;
  auto group = torchbus::ProcessGroup::from_environment();  // a world of one without a launcher
  nn::Sequential model;
  std::vector<std::int64_t> sample_shape;
  double lr = 0.05;
  if (options.model == "cnn") {
    model = nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 32, 3)), nn::ReLU(),
                           nn::Conv2d(nn::Conv2dOptions(32, 64, 3)), nn::ReLU(), nn::MaxPool2d(2),
                           nn::Flatten(), nn::Linear(9216, 128), nn::ReLU(), nn::Linear(128, 10));
    sample_shape = {1, 28, 28};
    lr = 0.01;
  } else if (options.model == "resnet") {
    model = nn::Sequential(SmallResnet(10));
    sample_shape = {3, 32, 32};
  } else {
    model = nn::Sequential(nn::Linear(784, 256), nn::ReLU(), nn::Linear(256, 10));
    sample_shape = {784};
  }
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(lr).momentum(0.9));
  const std::int64_t last_step = options.warmup + options.steps;
  torchbus::Trainer trainer(
      model, optimizer,
      [](const at::Tensor& output, const at::Tensor& target) {
        return torch::nn::functional::cross_entropy(output, target);
      },
      torchbus::TrainerOptions().max_epochs(-1).max_steps(last_step).seed(1));
  trainer.set_process_group(group);

  trainer.on(torchbus::Event::ProcessGroupStart, [](torchbus::State& state) {
    if (state.rank == 0) std::cout << "process group up: " << state.world_size << " rank(s)\n";
  });
  // Every rank's loss is the average over all ranks (the trainer reduces it with the gradients).
  if (options.log_every > 0) {
    trainer.on(
        torchbus::Event::StepEnd, torchbus::every(options.log_every), [](torchbus::State& state) {
          const auto losses = torchbus::gather(state, state.step_loss());  // per rank
          if (state.rank == 0)
            std::cout << "step " << state.step << " loss " << losses[0].item<double>() << "\n";
        });
  }
  // The clock: from the start of fit (or the end of the warm-up's last step) to the end of the
  // last step. Every rank waits for the others in each step's all-reduce, so rank 0's clock
  // measures the world.
  auto start = std::chrono::steady_clock::now();
  auto end = start;
  trainer.on(torchbus::Event::StepEnd, [&](torchbus::State& state) {
    if (state.step == options.warmup) start = std::chrono::steady_clock::now();
    if (state.step == last_step) end = std::chrono::steady_clock::now();
  });

  // Each rank reads its own shard; 64 samples per rank and step.
  auto loader = torch::data::make_data_loader(Synthetic(sample_shape),
                                              torchbus::DistributedSampler(4096, group.get()),
                                              torch::data::DataLoaderOptions(64));
  start = std::chrono::steady_clock::now();
  trainer.fit(*loader);
  const std::chrono::duration<double> seconds = end - start;
  if (group->rank() == 0) {
    std::cout << "samples_per_second="
              << 64.0 * group->world_size() * static_cast<double>(options.steps) / seconds.count()
              << "\ndistributed example finished: " << trainer.state().step << " steps on "
              << group->world_size() << " rank(s)\n";
  }
}

constexpr const char* kUsage =
    "arguments: [steps] [--model mlp|cnn|resnet] [--warmup W] [--log-every N] (see the top of "
    "examples/distributed.cpp)";

/// Reads the arguments above; throws std::invalid_argument with a message on bad ones.
Options parse(int argc, char** argv) {
  Options options;
  const auto count = [](const std::string& name, const std::string& text, std::int64_t min) {
    std::size_t used = 0;
    std::int64_t value = -1;
    try {
      value = std::stoll(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != text.size() || value < min)
      throw std::invalid_argument(name + " needs an integer >= " + std::to_string(min) + ", got '" +
                                  text + "'");
    return value;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--model") {
      options.model = value();
      if (options.model != "mlp" && options.model != "cnn" && options.model != "resnet")
        throw std::invalid_argument("--model is mlp, cnn or resnet, got '" + options.model + "'");
    } else if (arg == "--warmup") {
      options.warmup = count(arg, value(), 0);
    } else if (arg == "--log-every") {
      options.log_every = count(arg, value(), 0);
    } else if (!arg.empty() && arg[0] != '-') {
      options.steps = count("steps", arg, 1);
    } else {
      throw std::invalid_argument("unknown option '" + arg + "' (" + kUsage + ")");
    }
  }
  return options;
}

int main(int argc, char** argv) {
  if (argc == 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::cout << kUsage << "\n";
    return 0;
  }
  Options options;
  try {
    options = parse(argc, argv);
  } catch (const std::invalid_argument& error) {
    std::cerr << "example_distributed: " << error.what() << "\n";
    return 2;
  }
  try {
    train(options);
    return 0;
  } catch (const std::exception& error) {
    // Any rank's failure ends here: a rank that died (`rank 0: all_reduce failed after 0.1 s: rank
    // 1 closed the connection ...`), a timeout, a bad launch environment. Exiting non-zero lets
    // the launcher end the run.
    std::cerr << error.what() << "\n";
    return 1;
  }
}
