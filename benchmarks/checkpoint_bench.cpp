// How long a checkpoint blocks the training thread, synchronous against background writes, side by
// side in one process (docs/performance.md, "Checkpoint stalls").
//
// Models (Adam, so a checkpoint holds about 3x the parameters' bytes): cnn = torchbus-train's CNN
// on MNIST-shaped images (batch 64), large = an MLP of 12 Linear(2048, 2048) layers (50.4M
// parameters, batch 16: a checkpoint of ~600 MB). A Trainer runs `--steps` steps with a
// ModelCheckpoint saving every
// `--every` steps (save_top_k 2, save_last on) into a temporary directory on the disk of the
// current directory; variants sync (ModelCheckpointOptions::background(false)) and async (the
// default) alternate over `--rounds` rounds, each on its own copy of the model.
// The stall is the time the training thread spends in ModelCheckpoint's StepEnd hook (measured by
// the Profiler: serialization, and for sync the write, fsync, link and pruning too; for async also
// any wait for the previous write), per checkpoint.
// Output: a table, then name=value lines: checkpoint_stall_ms_<model>_<variant> (median over
// rounds) and checkpoint_stall_ratio_<model> = async / sync (median of per-round ratios).

#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <torchbus-train/model.hpp>
#include <torchbus/callbacks/model_checkpoint.hpp>
#include <torchbus/callbacks/profiler.hpp>
#include <torchbus/torchbus.hpp>

#include <unistd.h>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

struct Options {
  int rounds = 3;
  int steps = 24;
  int every = 8;  // steps between checkpoints: longer than a background write of the CNN's
  std::vector<std::string> models = {"cnn", "large"};
};

/// A model of `name` and one batch of its inputs and targets.
struct Workload {
  torch::nn::Sequential model;
  torch::Tensor inputs;
  torch::Tensor targets;
};

Workload make_workload(const std::string& name) {
  torch::manual_seed(1);
  if (name == "cnn") {
    return {train::make_cnn(28, 28, 10), torch::randn({64, 1, 28, 28}),
            torch::randint(0, 10, {64})};
  }
  return {train::make_mlp(2048, std::vector<std::int64_t>(11, 2048), 2048),
          torch::randn({16, 2048}), torch::randint(0, 2048, {16})};
}

/// Milliseconds per checkpoint that one run's training thread spent in the checkpoint's StepEnd
/// hook.
double run_once(const std::string& model_name, bool background, const Options& options,
                const fs::path& scratch) {
  auto workload = make_workload(model_name);
  torch::optim::Adam optimizer(workload.model->parameters(), torch::optim::AdamOptions(1e-3));
  torchbus::Trainer trainer(
      workload.model, optimizer,
      [](const at::Tensor& output, const at::Tensor& target) {
        return torch::nn::functional::cross_entropy(output, target);
      },
      torchbus::TrainerOptions().max_steps(options.steps).max_epochs(1));
  const auto directory = scratch / (model_name + (background ? "-async" : "-sync"));
  fs::remove_all(directory);
  trainer.add(
      std::make_shared<torchbus::ModelCheckpoint>(torchbus::ModelCheckpointOptions(directory)
                                                      .every_n_steps(options.every)
                                                      .every_n_epochs(0)
                                                      .save_top_k(2)
                                                      .background(background)));
  auto profiler = std::make_shared<torchbus::Profiler>(
      torchbus::ProfilerOptions().log_table(false).warn_share(0));
  trainer.add(profiler);
  std::vector<torchbus::Batch> batches(static_cast<std::size_t>(options.steps),
                                       torchbus::Batch{workload.inputs, workload.targets});
  trainer.fit(batches);
  const double checkpoints = options.steps / options.every;
  double stall_ms = 0;
  for (const auto& row : profiler->rows()) {
    if (row.kind == "subscriber" && row.name == "model_checkpoint" && row.event == "StepEnd") {
      stall_ms = row.total_seconds * 1e3 / checkpoints;
    }
  }
  fs::remove_all(directory);
  return stall_ms;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const auto n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "checkpoint_bench: " << arg << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--rounds") {
      options.rounds = std::max(1, std::stoi(value()));
    } else if (arg == "--steps") {
      options.steps = std::max(1, std::stoi(value()));
    } else if (arg == "--every") {
      options.every = std::max(1, std::stoi(value()));
    } else if (arg == "--quick") {
      options.rounds = 1;
    } else if (arg == "--models") {
      options.models.clear();
      std::string list = value();
      for (std::size_t start = 0; start <= list.size();) {
        const auto comma = std::min(list.find(',', start), list.size());
        options.models.push_back(list.substr(start, comma - start));
        start = comma + 1;
      }
    } else {
      std::cerr << "checkpoint_bench: unknown option '" << arg
                << "' (options: --rounds N, --steps N, --every N, --quick, --models cnn,large)\n";
      std::exit(2);
    }
  }
  for (const auto& model : options.models) {
    if (model != "cnn" && model != "large") {
      std::cerr << "checkpoint_bench: unknown model '" << model << "' (cnn, large)\n";
      std::exit(2);
    }
  }
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  const auto options = parse(argc, argv);
  torch::set_num_threads(1);
  torchbus::logger()->set_level(spdlog::level::warn);
  const auto scratch = fs::current_path() / ("checkpoint_bench." + std::to_string(::getpid()));
  fs::create_directories(scratch);
  std::cout << "model   variant  stall ms/checkpoint   (median of " << options.rounds << " rounds, "
            << options.steps << " steps, a checkpoint every " << options.every << ")\n";
  std::map<std::string, double> results;
  for (const auto& model : options.models) {
    std::vector<double> sync_ms, async_ms, ratios;
    for (int round = 0; round < options.rounds; ++round) {
      // Alternate which variant goes first, so that neither always finds a warm page cache.
      const bool async_first = round % 2 == 1;
      double sync = 0, async = 0;
      if (async_first) async = run_once(model, true, options, scratch);
      sync = run_once(model, false, options, scratch);
      if (!async_first) async = run_once(model, true, options, scratch);
      sync_ms.push_back(sync);
      async_ms.push_back(async);
      ratios.push_back(sync > 0 ? async / sync : 0);
    }
    std::printf("%-7s %-8s %19.1f\n", model.c_str(), "sync", median(sync_ms));
    std::printf("%-7s %-8s %19.1f\n", model.c_str(), "async", median(async_ms));
    results["checkpoint_stall_ms_" + model + "_sync"] = median(sync_ms);
    results["checkpoint_stall_ms_" + model + "_async"] = median(async_ms);
    results["checkpoint_stall_ratio_" + model] = median(ratios);
  }
  fs::remove_all(scratch);
  for (const auto& [name, value] : results) std::cout << name << "=" << value << "\n";
  return 0;
}
