// torchbus_device_bench: the training step on a device (a GPU, or the CPU), side by side in one
// process: a hand-written LibTorch loop (gradients set to none before each step, as LibTorch 2.x's
// zero_grad() and the Trainer do) against the Trainer without subscribers, with a typical
// set of built-ins, and with add_default_callbacks. MLP 784-256-256-10, batch 256, the data on
// the device, float32, SGD (momentum 0.9) and Adam. Rounds alternate the variants' order; each
// prints µs per step (median, min, max over rounds) and the median of its per-round ratio to the
// hand loop of the same round. On CUDA (built against a LibTorch with CUDA headers) it also counts
// host syncs per step with c10's sync-debug mode, in one more round per variant. An epoch is 235
// batches (MNIST's 60,000 samples at batch 256), so the measured steps include an epoch end, as a
// user's do. With --profile, one more run of each Trainer variant prints where its host time went
// (the Profiler's rows: the loop's phases and the slowest subscribers). With --ops, one more run
// of each variant counts the operators LibTorch dispatches per step (each a kernel launch, and
// several microseconds of host time, on a GPU), and prints those a Trainer variant dispatches more
// or less often than the hand loop: a figure that does not depend on the machine's speed.
//
//   torchbus_device_bench [--device cuda:0|cpu] [--steps 300] [--rounds 7] [--optimizers sgd,adam]
//                         [--variants hand,none,typical,defaults] [--profile 1] [--ops 1]
//
// The last lines are name=value: device_<optimizer>_<variant>_us, ..._over_hand, ..._syncs.
// scripts/device-check runs it beside benchmarks/python_device.py (Python and Lightning).

#include <ATen/record_function.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <torchbus/callbacks/callbacks.hpp>
#include <torchbus/torchbus.hpp>

#if __has_include(<cuda_runtime_api.h>) && __has_include(<c10/cuda/CUDAFunctions.h>)
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>
#define TORCHBUS_DEVICE_BENCH_SYNCS 1
#endif

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

struct Options {
  std::string device = "cuda:0";
  int steps = 300;
  int rounds = 7;
  std::vector<std::string> optimizers = {"sgd", "adam"};
  std::vector<std::string> variants = {"hand", "none", "typical", "defaults"};
  bool profile = false;
  bool ops = false;
};

/// Batches in an epoch: MNIST's 60,000 samples at batch 256.
constexpr int kBatchesPerEpoch = 235;

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');) parts.push_back(part);
  return parts;
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--device") {
      options.device = value;
    } else if (flag == "--steps") {
      options.steps = std::stoi(value);
    } else if (flag == "--rounds") {
      options.rounds = std::stoi(value);
    } else if (flag == "--optimizers") {
      options.optimizers = split(value);
    } else if (flag == "--variants") {
      options.variants = split(value);
    } else if (flag == "--profile") {
      options.profile = value == "1";
    } else if (flag == "--ops") {
      options.ops = value == "1";
    } else {
      throw std::invalid_argument("unknown flag " + flag);
    }
  }
  if (options.steps < 1 || options.rounds < 1) {
    throw std::invalid_argument("--steps and --rounds need positive integers");
  }
  return options;
}

torch::nn::Sequential make_mlp() {
  return torch::nn::Sequential(torch::nn::Linear(784, 256), torch::nn::ReLU(),
                               torch::nn::Linear(256, 256), torch::nn::ReLU(),
                               torch::nn::Linear(256, 10));
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& name,
                                                        const torch::nn::Sequential& model) {
  if (name == "sgd") {
    return std::make_unique<torch::optim::SGD>(model->parameters(),
                                               torch::optim::SGDOptions(0.01).momentum(0.9));
  }
  if (name == "adam") {
    return std::make_unique<torch::optim::Adam>(model->parameters(),
                                                torch::optim::AdamOptions(1e-3));
  }
  throw std::invalid_argument("unknown optimizer " + name);
}

at::Tensor loss_of(const at::Tensor& output, const at::Tensor& target) {
  return torch::nn::functional::cross_entropy(output, target);
}

/// Waits until the device has run everything queued (timing only, outside the measured steps).
void wait_for(const c10::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

/// Counts the synchronizing calls c10's sync-debug mode reports (CUDA builds only).
class SyncCounter {
 public:
#ifdef TORCHBUS_DEVICE_BENCH_SYNCS
  class Handler : public c10::WarningHandler {
   public:
    void process(const c10::Warning& warning) override {
      if (warning.msg().find("synchroniz") != std::string::npos) ++count;
    }
    std::atomic<long> count{0};
  };
  void start() {
    handler_.count = 0;
    previous_ = c10::WarningUtils::get_warning_handler();
    c10::WarningUtils::set_warning_handler(&handler_);
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
  }
  long stop() {
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
    c10::WarningUtils::set_warning_handler(previous_);
    return handler_.count;
  }
  static constexpr bool kAvailable = true;

 private:
  Handler handler_;
  c10::WarningHandler* previous_ = nullptr;
#else
  void start() {}
  long stop() {
    return -1;
  }
  static constexpr bool kAvailable = false;
#endif
};

/// Counts the operators LibTorch dispatches on any thread, by name, while it runs
/// (RecordFunction's callbacks).
class OpCounter {
 public:
  void start() {
    const std::lock_guard<std::mutex> lock(mutex());
    counts().clear();
    handle_ = at::addGlobalCallback(
        at::RecordFunctionCallback([](const at::RecordFunction& fn)
                                       -> std::unique_ptr<at::ObserverContext> {
          const std::lock_guard<std::mutex> lock(mutex());
          ++counts()[fn.name()];
          return nullptr;
        }).scopes({at::RecordScope::FUNCTION}));
  }
  std::map<std::string, long> stop() {
    at::removeCallback(handle_);
    const std::lock_guard<std::mutex> lock(mutex());
    return counts();
  }

 private:
  static std::map<std::string, long>& counts() {
    static std::map<std::string, long> by_name;
    return by_name;
  }
  static std::mutex& mutex() {
    static std::mutex guard;
    return guard;
  }
  at::CallbackHandle handle_ = 0;
};

/// One measured run of `steps` steps of `variant`; returns µs per step. With `syncs`, counts the
/// host syncs of the steps instead (the time is then not reported), with `ops` the operators
/// dispatched; with `profiler`, the Trainer variants run with it added.
struct Measure {
  const Options& options;
  const c10::Device device;
  const std::vector<torchbus::Batch>& batches;
  fs::path scratch;

  double run(const std::string& variant, const std::string& optimizer_name,
             SyncCounter* syncs = nullptr,
             const std::shared_ptr<torchbus::Profiler>& profiler = nullptr,
             std::map<std::string, long>* ops = nullptr) const {
    OpCounter op_counter;
    torch::manual_seed(0);
    auto model = make_mlp();
    model->to(device);
    auto optimizer = make_optimizer(optimizer_name, model);
    const auto warmup = std::min(20, options.steps);
    if (variant == "hand") {
      auto parameters = model->parameters();
      auto step = [&](std::size_t i) {
        const auto& batch = batches[i % batches.size()];
        // zero_grad() as LibTorch 2.x does it (set to none), also on 1.13, whose zero_grad()
        // zeroes in place: the Trainer sets gradients to none as well.
        for (auto& parameter : parameters) parameter.mutable_grad().reset();
        loss_of(model->forward(batch.data), batch.target).backward();
        optimizer->step();
      };
      for (int i = 0; i < warmup; ++i) step(static_cast<std::size_t>(i));
      wait_for(device);
      if (syncs != nullptr) syncs->start();
      if (ops != nullptr) op_counter.start();
      const auto started = std::chrono::steady_clock::now();
      for (int i = 0; i < options.steps; ++i) step(static_cast<std::size_t>(i));
      wait_for(device);
      const auto elapsed = std::chrono::steady_clock::now() - started;
      if (ops != nullptr) *ops = op_counter.stop();
      if (syncs != nullptr) return static_cast<double>(syncs->stop());
      return std::chrono::duration<double, std::micro>(elapsed).count() / options.steps;
    }
    torchbus::Trainer trainer(model, *optimizer, loss_of,
                              torchbus::TrainerOptions()
                                  .device(device)
                                  .max_epochs(-1)
                                  .max_steps(warmup + options.steps)
                                  .num_sanity_val_steps(0)
                                  .use_registered_subscriptions(false));
    const auto run_dir = scratch / (variant + "_" + optimizer_name);
    fs::remove_all(run_dir);
    if (variant == "typical") {
      trainer.add(std::make_shared<torchbus::CsvLogger>(
          torchbus::CsvLoggerOptions(run_dir / "metrics.csv").step_freq(50)));
      trainer.add(std::make_shared<torchbus::ModelCheckpoint>(
          torchbus::ModelCheckpointOptions(run_dir / "checkpoints").every_n_steps(100)));
      trainer.add(std::make_shared<torchbus::LearningRateScheduler>(
          torchbus::CosineDecayOptions(warmup + options.steps)));
    } else if (variant == "defaults") {
      torchbus::add_default_callbacks(
          trainer, torchbus::DefaultCallbacksOptions().run_dir(run_dir.string()).log_every(50));
    } else if (variant != "none") {
      throw std::invalid_argument("unknown variant " + variant);
    }
    if (profiler) trainer.add(profiler);
    std::chrono::steady_clock::time_point started;
    trainer.on(torchbus::Event::StepStart, [&](torchbus::State& state) {
      if (state.step != warmup) return;
      wait_for(device);
      if (syncs != nullptr) syncs->start();
      if (ops != nullptr) op_counter.start();
      started = std::chrono::steady_clock::now();
    });
    double result = 0.0;
    trainer.on(torchbus::Event::ActionEnd, [&](torchbus::State&) {
      if (ops != nullptr) *ops = op_counter.stop();
      if (syncs != nullptr) {
        result = static_cast<double>(syncs->stop());
        return;
      }
      wait_for(device);
      result = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - started)
                   .count() /
               options.steps;
    });
    trainer.fit(batches);
    return result;
  }
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const auto n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

std::string device_name(const c10::Device& device) {
#ifdef TORCHBUS_DEVICE_BENCH_SYNCS
  if (device.is_cuda()) return at::cuda::getDeviceProperties(device.index())->name;
#endif
  return device.str();
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse(argc, argv);
  } catch (const std::exception& error) {
    std::cerr << "torchbus_device_bench: " << error.what() << "\n";
    return 2;
  }
  const c10::Device device(options.device);
  if (device.is_cuda() && !torch::cuda::is_available()) {
    std::cout << "torchbus_device_bench: no CUDA device is visible (or this LibTorch has no "
                 "CUDA); nothing measured\n";
    return 0;
  }
  spdlog::set_level(spdlog::level::warn);  // the loggers' lines would be timed too
  torch::manual_seed(1);
  std::vector<torchbus::Batch> batches;
  for (int i = 0; i < 16; ++i) {
    batches.emplace_back(torch::randn({256, 784}).to(device), torch::randint(10, {256}).to(device));
  }
  for (int i = 16; i < kBatchesPerEpoch; ++i) batches.push_back(batches[i % 16]);  // shared tensors
  const auto scratch =
      fs::temp_directory_path() / ("torchbus_device_bench_" + std::to_string(::getpid()));
  Measure measure{options, device, batches, scratch};
  std::cout << "device " << device << " (" << device_name(device) << "), LibTorch " << TORCH_VERSION
            << ", " << options.steps << " steps x " << options.rounds
            << " rounds, MLP 784-256-256-10, batch 256\n";
  std::map<std::string, std::vector<double>> times, ratios;
  for (int round = 0; round < options.rounds; ++round) {
    for (const auto& optimizer : options.optimizers) {
      auto order = options.variants;
      if (round % 2 == 1) std::reverse(order.begin(), order.end());
      std::map<std::string, double> this_round;
      for (const auto& variant : order) this_round[variant] = measure.run(variant, optimizer);
      for (const auto& [variant, us] : this_round) {
        times[optimizer + "_" + variant].push_back(us);
        if (this_round.count("hand") != 0) {
          ratios[optimizer + "_" + variant].push_back(us / this_round.at("hand"));
        }
      }
    }
  }
  std::map<std::string, double> syncs;
  if (device.is_cuda() && SyncCounter::kAvailable) {
    for (const auto& optimizer : options.optimizers) {
      for (const auto& variant : options.variants) {
        SyncCounter counter;
        syncs[optimizer + "_" + variant] =
            measure.run(variant, optimizer, &counter) / options.steps;
      }
    }
  }
  if (options.profile) {
    for (const auto& variant : options.variants) {
      if (variant == "hand") continue;
      auto profiler = std::make_shared<torchbus::Profiler>(
          torchbus::ProfilerOptions().log_table(false).warn_share(0));
      measure.run(variant, options.optimizers.front(), nullptr, profiler);
      std::printf("profile of %s_%s (host seconds per call):\n", options.optimizers.front().c_str(),
                  variant.c_str());
      int subscribers = 0;
      for (const auto& row : profiler->rows()) {
        if (row.kind == "subscriber" && ++subscribers > 8) continue;
        std::printf("  %-10s %-28s %-16s %8lld %12.6f %12.1f us\n", row.kind.c_str(),
                    row.name.c_str(), row.event.c_str(), static_cast<long long>(row.calls),
                    row.total_seconds, row.mean_seconds() * 1e6);
      }
    }
  }
  if (options.ops) {
    const auto& optimizer = options.optimizers.front();
    std::map<std::string, std::map<std::string, long>> ops;
    for (const auto& variant : options.variants) {
      measure.run(variant, optimizer, nullptr, nullptr, &ops[variant]);
    }
    const auto per_step = [&](long count) { return static_cast<double>(count) / options.steps; };
    for (const auto& [variant, counts] : ops) {
      long total = 0;
      for (const auto& [name, count] : counts) total += count;
      std::printf("device_%s_%s_ops_per_step=%.2f\n", optimizer.c_str(), variant.c_str(),
                  per_step(total));
      if (variant == "hand" || ops.count("hand") == 0) continue;
      std::map<std::string, long> difference;  // this variant's count minus the hand loop's
      for (const auto& [name, count] : counts) difference[name] += count;
      for (const auto& [name, count] : ops.at("hand")) difference[name] -= count;
      std::vector<std::pair<std::string, long>> sorted(difference.begin(), difference.end());
      std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
        return std::abs(a.second) > std::abs(b.second);
      });
      for (std::size_t i = 0; i < sorted.size() && i < 12; ++i) {
        if (std::abs(per_step(sorted[i].second)) < 0.05) break;
        std::printf("  %s: %+.2f per step against the hand loop\n", sorted[i].first.c_str(),
                    per_step(sorted[i].second));
      }
    }
  }
  std::printf("%-16s %10s %10s %10s %10s %12s\n", "variant", "median_us", "min_us", "max_us",
              "x_hand", "syncs/step");
  for (const auto& [name, values] : times) {
    const auto [low, high] = std::minmax_element(values.begin(), values.end());
    std::printf("%-16s %10.1f %10.1f %10.1f %10.3f %12s\n", name.c_str(), median(values), *low,
                *high, ratios.count(name) != 0 ? median(ratios.at(name)) : 0.0,
                syncs.count(name) != 0 ? std::to_string(syncs.at(name)).c_str() : "n/a");
  }
  for (const auto& [name, values] : times) {
    std::printf("device_%s_us=%.1f\n", name.c_str(), median(values));
    if (ratios.count(name) != 0 && name.find("_hand") == std::string::npos) {
      std::printf("device_%s_over_hand=%.4f\n", name.c_str(), median(ratios.at(name)));
    }
    if (syncs.count(name) != 0) std::printf("device_%s_syncs=%.3f\n", name.c_str(), syncs.at(name));
  }
  fs::remove_all(scratch);
  return 0;
}
