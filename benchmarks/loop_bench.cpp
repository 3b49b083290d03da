// End-to-end cost of the Trainer against a hand-written LibTorch loop, side by side in one process.
//
// Variants, each on its own copy of the model (same initial weights) over the same batches:
//   hand     (a) zero_grad, forward, cross_entropy, backward, step — what users write today
//   none     (b) Trainer with no subscribers (it releases gradients after each step instead of
//                zeroing them, TrainerOptions::set_grads_to_none; --zero-grad: zeroes them too)
//   typical  (c) Trainer with the built-in SimpleLogger (every 50 steps) and TerminateOnNaN, a
//                StepEnd lambda, a class callback (on_batch_end + on_step_end), and the metric
//                history the Trainer records itself; no progress bar
//   logging  (e) typical + the built-in CsvLogger and TensorBoardLogger, both every step (scalars
//                loss and lr; no histograms), writing into a temporary directory
//   python   (d) the hand loop in Python PyTorch, run by benchmarks/python_loop.py --serve in a
//                child process that this program drives, so that it is interleaved too
//   structured (f) (b) on batches of three named tensors (`features`, `labels`, `index`) with a
//                forward of the batch and a loss of the output and the batch: the same work as
//                (b), whose Example<> batches it is measured against (structured_over_example)
// Models: mlp32 = 32-64-10 with batch 32, mlp784 = 784-256-10 with batch 64; SGD lr 0.01; 64
// batches per epoch.
//   cnn = the MNIST CNN without dropout: Conv2d(1,32,3) ReLU Conv2d(32,64,3) ReLU MaxPool2d(2)
//   flatten Linear(9216,128) ReLU Linear(128,10), random inputs of MNIST's shape (1x28x28), batch
//   128, Adam lr 1e-3, --steps-cnn batches per round. Its variants come in pairs, float32 and
//   bf16-mixed (autocast to bfloat16 around forward and loss, as torch.autocast("cpu",
//   dtype=torch.bfloat16)): typical and typical_bf16 (the Trainer of (c) with
//   TrainerOptions::precision(Precision::BF16Mixed)), python and python_bf16 (Python's hand loop
//   without and with torch.autocast); with --cnn-variants also hand/hand_bf16 (the hand loop (a)
//   in an autocast scope) and none/none_bf16. On a CPU without AVX-512, where torchbus refuses
//   bf16-mixed (check_precision_supported), only the float32 variants run and the bf16 figures
//   read n/a.
//   resnet = ResNet-18's shape for 32x32 images at a quarter of its width (3x3 stem, four stages of
//   two basic blocks with batch norm at 16, 32, 64, 128 channels, global average pooling, a linear
//   classifier), random 3x32x32 inputs, batch 64, SGD lr 0.05 with momentum 0.9; its variants and
//   options are the CNN's (--cnn-variants, --rounds-cnn, --steps-cnn, --warmup-cnn).
// The `torchbus` spdlog logger (SimpleLogger's lines) writes to a file in the temporary directory.
//
// Each round runs every variant once for the same number of steps (the order rotates between
// rounds); the reported time is the median over rounds of the time per optimizer step, the
// reported ratios the median over rounds of the ratio within the round. With one
// thread the clock is the thread's CPU time (CLOCK_THREAD_CPUTIME_ID; Python: time.thread_time),
// which ignores time the process spends descheduled by other load on the machine (and the CPU time
// of TensorBoardLogger's background writer thread); with more threads, or with --clock wall, it is
// wall-clock time. Both are printed in the table, with the minor page faults per step (the CNN's
// large tensors pay them when glibc's malloc returns their memory to the OS after each step; the
// Python process inherits this process's environment, GLIBC_TUNABLES included, so both run under
// the same allocator settings).
// Output: a table, then name=value lines (see docs/performance.md).

#include <ATen/autocast_mode.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <torchbus-train/blas_threads.hpp>
#include <torchbus/callbacks/csv_logger.hpp>
#include <torchbus/callbacks/simple_logger.hpp>
#include <torchbus/callbacks/tensorboard_logger.hpp>
#include <torchbus/callbacks/terminate_on_nan.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/precision.hpp>
#include <torchbus/torchbus.hpp>

#include "small_resnet.hpp"

#include <dlfcn.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace {

using torchbus::Batch;
using torchbus::Event;
using torchbus::State;

constexpr std::uint64_t kSeed = 1234;
constexpr int kBatchesPerEpoch = 64;
constexpr double kLearningRate = 0.01;
constexpr double kCnnLearningRate = 1e-3;     // Adam
constexpr double kResnetLearningRate = 0.05;  // SGD, momentum 0.9

// ---- options ------------------------------------------------------------------------------------

struct Options {
  int threads = 1;
  int blas_threads = 0;  // 0: same as threads
  // The targets are on mlp32, whose rounds are short: it gets more of them.
  int rounds_mlp32 = 51;
  int rounds_mlp784 = 25;
  // A CNN step takes ~70-300 ms: few rounds of few steps.
  int rounds_cnn = 9;
  int warmup_rounds = 1;
  // The CNN's heap (glibc's main arena) reaches its size only after every variant ran twice
  // (with one warm-up round the first variant of the first measured round took up to 2x longer).
  int warmup_cnn = 2;
  int epochs_mlp32 = 8;   // 512 steps per variant per round
  int epochs_mlp784 = 2;  // 128 steps
  int steps_cnn = 4;      // batches (= steps) per variant per round
  std::string clock;      // "cpu" or "wall"; empty: cpu with 1 thread, else wall
  std::vector<std::string> models = {"mlp32", "mlp784", "cnn"};
  std::vector<std::string> variants = {"hand",    "none",   "typical",
                                       "logging", "python", "structured"};
  // The CNN's variants (each in float32 and bf16-mixed): hand, none, typical, python.
  std::vector<std::string> cnn_variants = {"typical", "python"};
  bool channels_last = false;  // the CNN's parameters and inputs in channels_last memory format
  std::string python_script;   // empty: no python variant
  bool zero_grad = false;      // Trainer variants zero gradients as the hand loop does
  std::string python_exe = "/usr/bin/python3";
  std::string log_dir;  // empty: a new directory in the temp directory, removed at the end
};

[[noreturn]] void usage(const char* program, int status) {
  (status == 0 ? std::cout : std::cerr)
      << "usage: " << program << " [options]\n"
      << "  --threads N        torch::set_num_threads and OpenBLAS threads (default 1)\n"
      << "  --blas-threads N   OpenBLAS threads when they should differ from --threads\n"
      << "  --rounds N         measured rounds of every model\n"
      << "  --rounds-mlp32 N   (default 51)\n"
      << "  --rounds-mlp784 N  (default 25)\n"
      << "  --rounds-cnn N     (default 9)\n"
      << "  --warmup N         warm-up rounds of every model, not measured (default 1, CNN 2)\n"
      << "  --warmup-cnn N     warm-up rounds of the CNN (default 2)\n"
      << "  --epochs-mlp32 N   epochs of 64 batches per variant per round (default 8)\n"
      << "  --epochs-mlp784 N  (default 2)\n"
      << "  --steps-cnn N      CNN batches (steps) per variant per round (default 4)\n"
      << "  --quick            --rounds-mlp32 21 --rounds-mlp784 11 --rounds-cnn 5\n"
      << "                     --epochs-mlp32 4 --epochs-mlp784 1 --steps-cnn 3\n"
      << "  --clock cpu|wall   what is timed (default: cpu with 1 thread, wall otherwise)\n"
      << "  --models LIST      comma-separated subset of mlp32,mlp784,cnn,resnet (default:\n"
      << "                     mlp32,mlp784,cnn)\n"
      << "  --no-cnn           leave the CNN out (same as --models mlp32,mlp784)\n"
      << "  --variants LIST    MLP variants: subset of "
         "hand,none,typical,logging,python,structured\n"
      << "                     (e.g. for\n"
      << "                     callgrind)\n"
      << "  --cnn-variants LIST  CNN variants, each in float32 and bf16-mixed: subset of\n"
      << "                     hand,none,typical,python (default typical,python)\n"
      << "  --channels-last    the CNN's 4-d parameters and inputs in channels_last memory format\n"
      << "                     (C++ and Python; a measurement, not part of benchmarks/run)\n"
      << "  --python SCRIPT    also run the Python variants ((d), and the CNN's python and\n"
      << "                     python_bf16): SCRIPT is benchmarks/python_loop.py\n"
      << "  --python-exe EXE   interpreter with torch (default /usr/bin/python3)\n"
      << "  --zero-grad        the Trainer zeroes gradients as the hand loop does\n"
      << "                     (set_grads_to_none(false)) instead of releasing them\n"
      << "  --log-dir DIR      where the loggers write (CSV, event files, torchbus.log; default:\n"
      << "                     a new directory in the temp directory, removed at the end)\n";
  std::exit(status);
}

int to_int(const char* text, const std::string& flag) {
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < 0 || value > 1000000) {
    std::cerr << "loop_bench: " << flag << " needs a non-negative integer, got '" << text << "'\n";
    std::exit(2);
  }
  return static_cast<int>(value);
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> items;
  std::istringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::cerr << "loop_bench: " << arg << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--threads") {
      options.threads = std::max(1, to_int(value(), arg));
    } else if (arg == "--blas-threads") {
      options.blas_threads = std::max(1, to_int(value(), arg));
    } else if (arg == "--rounds") {
      options.rounds_mlp32 = options.rounds_mlp784 = options.rounds_cnn =
          std::max(1, to_int(value(), arg));
    } else if (arg == "--rounds-mlp32") {
      options.rounds_mlp32 = std::max(1, to_int(value(), arg));
    } else if (arg == "--rounds-mlp784") {
      options.rounds_mlp784 = std::max(1, to_int(value(), arg));
    } else if (arg == "--rounds-cnn") {
      options.rounds_cnn = std::max(1, to_int(value(), arg));
    } else if (arg == "--steps-cnn") {
      options.steps_cnn = std::max(1, to_int(value(), arg));
    } else if (arg == "--warmup") {
      options.warmup_rounds = options.warmup_cnn = to_int(value(), arg);
    } else if (arg == "--warmup-cnn") {
      options.warmup_cnn = to_int(value(), arg);
    } else if (arg == "--epochs-mlp32") {
      options.epochs_mlp32 = std::max(1, to_int(value(), arg));
    } else if (arg == "--epochs-mlp784") {
      options.epochs_mlp784 = std::max(1, to_int(value(), arg));
    } else if (arg == "--quick") {
      options.rounds_mlp32 = 21;
      options.rounds_mlp784 = 11;
      options.rounds_cnn = 5;
      options.epochs_mlp32 = 4;
      options.epochs_mlp784 = 1;
      options.steps_cnn = 3;
    } else if (arg == "--clock") {
      options.clock = value();
      if (options.clock != "cpu" && options.clock != "wall") {
        std::cerr << "loop_bench: --clock needs cpu or wall, got '" << options.clock << "'\n";
        std::exit(2);
      }
    } else if (arg == "--models") {
      options.models = split(value());
      for (const auto& model : options.models) {
        if (model != "mlp32" && model != "mlp784" && model != "cnn" && model != "resnet") {
          std::cerr << "loop_bench: unknown model '" << model
                    << "'; expected mlp32, mlp784, cnn or resnet\n";
          std::exit(2);
        }
      }
    } else if (arg == "--no-cnn") {
      options.models.erase(std::remove(options.models.begin(), options.models.end(), "cnn"),
                           options.models.end());
    } else if (arg == "--cnn-variants") {
      options.cnn_variants = split(value());
      for (const auto& variant : options.cnn_variants) {
        if (variant != "hand" && variant != "none" && variant != "typical" && variant != "python") {
          std::cerr << "loop_bench: unknown CNN variant '" << variant
                    << "'; expected hand, none, typical or python\n";
          std::exit(2);
        }
      }
    } else if (arg == "--channels-last") {
      options.channels_last = true;
    } else if (arg == "--variants") {
      options.variants = split(value());
      for (const auto& variant : options.variants) {
        if (variant != "hand" && variant != "none" && variant != "typical" &&
            variant != "logging" && variant != "python" && variant != "structured") {
          std::cerr << "loop_bench: unknown variant '" << variant << "'\n";
          std::exit(2);
        }
      }
    } else if (arg == "--python") {
      options.python_script = value();
    } else if (arg == "--python-exe") {
      options.python_exe = value();
    } else if (arg == "--log-dir") {
      options.log_dir = value();
    } else if (arg == "--zero-grad") {
      options.zero_grad = true;
    } else if (arg == "--help" || arg == "-h") {
      usage(argv[0], 0);
    } else {
      std::cerr << "loop_bench: unknown option '" << arg << "'\n";
      usage(argv[0], 2);
    }
  }
  if (options.blas_threads == 0) options.blas_threads = options.threads;
  if (options.clock.empty()) {
    options.clock = options.threads == 1 && options.blas_threads == 1 ? "cpu" : "wall";
  }
  return options;
}

/// CPU time of the calling thread, in seconds.
double thread_cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

/// Minor page faults of the calling thread so far.
std::int64_t thread_minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return static_cast<std::int64_t>(usage.ru_minflt);
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// Time of one run of a variant.
struct Timing {
  double wall = 0.0;  ///< seconds
  double cpu = 0.0;   ///< seconds of the running thread's CPU time
  std::int64_t steps = 0;
  std::int64_t faults = 0;  ///< minor page faults of the running thread
};

// ---- BLAS ---------------------------------------------------------------------------------------

/// Sizes OpenBLAS's pool as torchbus-train --threads does; reports which BLAS it is.
std::string configure_blas(int threads) {
  const auto openblas = train::set_blas_threads(threads);
  return openblas.empty() ? "REFERENCE BLAS (not OpenBLAS: install libopenblas0-pthread, see "
                            "docs/performance.md)"
                          : openblas;
}

// ---- workloads ----------------------------------------------------------------------------------

struct ModelSpec {
  std::string name;
  std::int64_t inputs, hidden, classes, batch;  // an image model's inputs: image_shape
  int epochs;                                   // per variant per round
  int rounds;                                   // measured
  int batches = kBatchesPerEpoch;               // per epoch
  bool image = false;  // the CNN or the ResNet: float32 and bf16-mixed variants, --cnn-variants
  std::vector<std::int64_t> image_shape = {};  // channels, height, width of an image model's inputs
  bool channels_last = false;                  // image models only: parameters and inputs
};

/// The model, written as the LibTorch tutorials write a module and as python_loop.py's `Mlp`: two
/// linear layers with a ReLU between them. (A torch::nn::Sequential of the same layers adds ~3 % to
/// the 32-64-10 step in C++: it boxes every layer's input and output in a heap-allocated AnyValue.)
struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(const ModelSpec& spec)
      : fc1(register_module("fc1", torch::nn::Linear(spec.inputs, spec.hidden))),
        fc2(register_module("fc2", torch::nn::Linear(spec.hidden, spec.classes))) {}
  at::Tensor forward(const at::Tensor& input) {
    return fc2->forward(torch::relu(fc1->forward(input)));
  }
  torch::nn::Linear fc1;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Mlp);

/// The MNIST CNN (PyTorch's MNIST example without dropout), written as python_loop.py's `Cnn`.
struct CnnImpl : torch::nn::Module {
  explicit CnnImpl(const ModelSpec& spec)
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3)))),
        fc1(register_module("fc1", torch::nn::Linear(9216, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, spec.classes))) {}
  at::Tensor forward(const at::Tensor& input) {
    auto x = torch::relu(conv1->forward(input));
    x = torch::relu(conv2->forward(x));
    x = torch::flatten(torch::max_pool2d(x, 2), 1);
    return fc2->forward(torch::relu(fc1->forward(x)));
  }
  torch::nn::Conv2d conv1;
  torch::nn::Conv2d conv2;
  torch::nn::Linear fc1;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Cnn);

/// The distributed example's SmallResnet (examples/small_resnet.hpp), built from a ModelSpec as
/// the other models are.
struct Resnet : SmallResnet {
  explicit Resnet(const ModelSpec& spec) : SmallResnet(spec.classes) {}
};

/// What a model trains with: the MLPs with SGD, the CNN with Adam, the ResNet with SGD and
/// momentum.
struct MlpSetup {
  using Net = Mlp;
  using Optimizer = torch::optim::SGD;
  static torch::optim::SGDOptions options() { return torch::optim::SGDOptions(kLearningRate); }
};
struct CnnSetup {
  using Net = Cnn;
  using Optimizer = torch::optim::Adam;
  static torch::optim::AdamOptions options() { return torch::optim::AdamOptions(kCnnLearningRate); }
};
struct ResnetSetup {
  using Net = Resnet;
  using Optimizer = torch::optim::SGD;
  static torch::optim::SGDOptions options() {
    return torch::optim::SGDOptions(kResnetLearningRate).momentum(0.9);
  }
};

template <typename Net>
Net make_model(const ModelSpec& spec) {
  torch::manual_seed(kSeed);  // every variant starts from the same weights
  Net net(spec);
  if (spec.channels_last) {
    // LibTorch 1.13's Module::to has no memory-format overload: convert each 4-d parameter as
    // Python's `Module.to(memory_format=torch.channels_last)` does, with Tensor::to, which copies
    // into channels_last strides unless the tensor already suggests that format. (`contiguous`
    // would not do: conv1's weight, 32x1x3x3, counts as channels_last-contiguous already, keeps
    // its strides, and conv1 then runs in the contiguous format: ~35 % slower in bf16.)
    for (auto& parameter : net->parameters()) {
      if (parameter.dim() == 4) {
        parameter.set_data(parameter.to(parameter.options(), /*non_blocking=*/false,
                                        /*copy=*/false, at::MemoryFormat::ChannelsLast));
      }
    }
  }
  return net;
}

std::vector<Batch> make_batches(const ModelSpec& spec) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(kSeed);
  std::vector<Batch> batches;
  batches.reserve(static_cast<std::size_t>(spec.batches));
  for (int i = 0; i < spec.batches; ++i) {
    std::vector<std::int64_t> shape{spec.batch};
    if (spec.image) {
      shape.insert(shape.end(), spec.image_shape.begin(), spec.image_shape.end());
    } else {
      shape.push_back(spec.inputs);
    }
    auto data = at::randn(shape, generator);
    if (spec.channels_last) data = data.contiguous(at::MemoryFormat::ChannelsLast);
    auto target = at::randint(0, spec.classes, {spec.batch}, generator, at::kLong);
    batches.emplace_back(std::move(data), std::move(target));
  }
  return batches;
}

/// CPU autocast to bfloat16 for the scope, as `with torch.autocast("cpu", dtype=torch.bfloat16)`
/// (what a hand-written LibTorch loop does; the Trainer has its own).
class CpuAutocastBF16 {
 public:
  CpuAutocastBF16()
      : was_enabled_(at::autocast::is_cpu_enabled()),
        previous_dtype_(at::autocast::get_autocast_cpu_dtype()) {
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    at::autocast::increment_nesting();
  }
  ~CpuAutocastBF16() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_cpu_enabled(was_enabled_);
    at::autocast::set_autocast_cpu_dtype(previous_dtype_);
  }
  CpuAutocastBF16(const CpuAutocastBF16&) = delete;
  CpuAutocastBF16& operator=(const CpuAutocastBF16&) = delete;

 private:
  bool was_enabled_;
  at::ScalarType previous_dtype_;
};

at::Tensor cross_entropy(const at::Tensor& output, const at::Tensor& target) {
  return torch::nn::functional::cross_entropy(output, target);
}

/// One variant: runs its model's epoch count once and returns the optimizer steps taken.
class Variant {
 public:
  virtual ~Variant() = default;
  /// Untimed set-up before each run (e.g. removing the previous run's CSV file).
  virtual void prepare() {}
  virtual std::int64_t run() = 0;
  /// The weights, to check that the C++ variants do the same arithmetic (empty when not known).
  virtual std::vector<at::Tensor> parameters() { return {}; }
  /// Whether the variant's subscribers ran as expected (checked after the last round); empty when
  /// they did, else what is wrong.
  virtual std::string subscribers_problem() const { return {}; }
};

/// (a) The hand-written loop; with bf16, forward and loss in a CPU autocast scope.
template <typename Setup>
class HandLoop final : public Variant {
 public:
  HandLoop(const ModelSpec& spec, std::vector<Batch>& batches, bool bf16 = false)
      : model_(make_model<typename Setup::Net>(spec)),
        optimizer_(model_->parameters(), Setup::options()),
        batches_(batches),
        epochs_(spec.epochs),
        bf16_(bf16) {}

  std::int64_t run() override {
    model_->train();
    std::int64_t steps = 0;
    for (int epoch = 0; epoch < epochs_; ++epoch) {
      for (auto& batch : batches_) {
        optimizer_.zero_grad();
        at::Tensor loss;
        if (bf16_) {
          const CpuAutocastBF16 autocast;
          loss = cross_entropy(model_->forward(batch.data), batch.target);
        } else {
          auto output = model_->forward(batch.data);
          loss = cross_entropy(output, batch.target);
        }
        loss.backward();
        optimizer_.step();
        ++steps;
      }
    }
    return steps;
  }
  std::vector<at::Tensor> parameters() override { return model_->parameters(); }

 private:
  typename Setup::Net model_;
  typename Setup::Optimizer optimizer_;
  std::vector<Batch>& batches_;
  int epochs_;
  bool bf16_;
};

/// The class callback of the typical set: trivial work on two hooks.
class CountingCallback final : public torchbus::Callback {
 public:
  CountingCallback() : Callback("counting") {}
  void on_batch_end(State& state) override {
    if (state.tensors.contains("output")) ++batches_with_output_;
  }
  void on_step_end(State& state) override { last_step_ = state.step; }
  std::int64_t batches_with_output() const { return batches_with_output_; }

 private:
  std::int64_t batches_with_output_ = 0;
  std::int64_t last_step_ = 0;
};

enum class Subscribers { None, Typical, Logging };

namespace fs = std::filesystem;

/// Lines of a text file (0 when it cannot be read).
std::int64_t count_lines(const fs::path& path) {
  std::ifstream in(path);
  std::int64_t lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  return lines;
}

/// (b), (c), (e): the Trainer with a given set of subscribers. One Trainer per variant, reused
/// by every round (fit resets the counters and the metric history).
template <typename Setup>
class TrainerLoop final : public Variant {
 public:
  /// The logging variant writes into `log_dir`/<model>-logging.csv and `log_dir`/tb-<model>/.
  TrainerLoop(const ModelSpec& spec, std::vector<Batch>& batches, Subscribers subscribers,
              const fs::path& log_dir, bool zero_grad,
              torchbus::Precision precision = torchbus::Precision::Float32)
      : model_(make_model<typename Setup::Net>(spec)),
        optimizer_(model_->parameters(), Setup::options()),
        batches_(batches),
        trainer_(model_, optimizer_, cross_entropy,
                 torchbus::TrainerOptions()
                     .max_epochs(spec.epochs)
                     .set_grads_to_none(!zero_grad)
                     .precision(precision)
                     .use_registered_subscriptions(false)),
        epochs_(spec.epochs),
        batches_per_epoch_(spec.batches) {
    if (subscribers == Subscribers::None) return;
    // A lambda on StepEnd.
    trainer_.on(Event::StepEnd, [this](State& state) { step_sum_ += state.step; });
    // A class callback overriding two hooks.
    callback_ = std::make_shared<CountingCallback>();
    trainer_.add(callback_);
    // The built-ins of a typical run: a log line every 50 steps (loss, lr, step time) and the
    // check of every batch's loss for NaN or infinity.
    trainer_.add(
        std::make_shared<torchbus::SimpleLogger>(torchbus::SimpleLoggerOptions().step_freq(50)));
    terminate_on_nan_ = std::make_shared<torchbus::TerminateOnNaN>();
    trainer_.add(terminate_on_nan_);
    if (subscribers == Subscribers::Typical) return;
    // Logging every step: a CSV row (flushed) and a TensorBoard event (loss and lr scalars,
    // written by the logger's background thread). "loss" is a scalar, so no histograms.
    csv_path_ = log_dir / (spec.name + "-logging.csv");
    trainer_.add(
        std::make_shared<torchbus::CsvLogger>(torchbus::CsvLoggerOptions(csv_path_).step_freq(1)));
    tensorboard_ = std::make_shared<torchbus::TensorBoardLogger>(
        torchbus::TensorBoardLoggerOptions((log_dir / ("tb-" + spec.name)).string()).step_freq(1));
    trainer_.add(tensorboard_);
  }

  void prepare() override {
    // Each round writes a new CSV file, as a new run would: after its first action a CsvLogger
    // continues its file, and would re-read the rows of every earlier round in each fit. The
    // previous round's event file goes too: each action creates one, and creating a file costs
    // more the more files its directory holds (~40 us in an empty one, ~270 us among 450).
    std::error_code ignored;
    if (!csv_path_.empty()) fs::remove(csv_path_, ignored);
    if (tensorboard_ && !tensorboard_->file().empty()) fs::remove(tensorboard_->file(), ignored);
  }
  std::int64_t run() override {
    trainer_.fit(batches_);
    return trainer_.state().step;
  }
  std::vector<at::Tensor> parameters() override { return model_->parameters(); }
  std::string subscribers_problem() const override {
    if (!callback_) return {};
    if (step_sum_ <= 0) return "the StepEnd lambda did not run";
    if (callback_->batches_with_output() <= 0) return "the class callback saw no \"output\"";
    if (terminate_on_nan_->triggered()) return terminate_on_nan_->reason();
    if (!csv_path_.empty()) {
      // Header, one row per step, one per epoch.
      const std::int64_t expected = 1 + epochs_ * (batches_per_epoch_ + 1);
      const std::int64_t lines = count_lines(csv_path_);
      if (lines != expected) {
        return "CsvLogger wrote " + std::to_string(lines) + " lines to " + csv_path_.string() +
               ", expected " + std::to_string(expected);
      }
      std::error_code error;
      const auto size = fs::file_size(tensorboard_->file(), error);
      // Every step's event (two scalars) takes ~66 bytes.
      const auto minimum = static_cast<std::uintmax_t>(60 * epochs_ * batches_per_epoch_);
      if (error || size < minimum) {
        return "TensorBoardLogger's event file " + tensorboard_->file() + " has " +
               (error ? error.message() : std::to_string(size) + " bytes");
      }
    }
    return {};
  }

 private:
  typename Setup::Net model_;
  typename Setup::Optimizer optimizer_;
  std::vector<Batch>& batches_;
  torchbus::Trainer trainer_;
  int epochs_;
  int batches_per_epoch_;
  std::shared_ptr<CountingCallback> callback_;
  std::shared_ptr<torchbus::TerminateOnNaN> terminate_on_nan_;
  std::shared_ptr<torchbus::TensorBoardLogger> tensorboard_;
  fs::path csv_path_;  // empty: no CsvLogger
  std::int64_t step_sum_ = 0;
};

/// (f): the Trainer with no subscribers on the same samples as named fields, with a forward of the
/// batch and a loss of the output and the batch.
template <typename Setup>
class StructuredTrainerLoop final : public Variant {
 public:
  StructuredTrainerLoop(const ModelSpec& spec, const std::vector<Batch>& batches, bool zero_grad)
      : model_(make_model<typename Setup::Net>(spec)),
        optimizer_(model_->parameters(), Setup::options()),
        trainer_(
            model_.ptr(), torchbus::Trainer::BatchForward([this](const Batch& batch) {
              return torchbus::Output(model_->forward(batch.get("features")));
            }),
            optimizer_,
            [](const torchbus::Output& output, const Batch& batch) {
              return cross_entropy(output.main(), batch.get("labels"));
            },
            torchbus::TrainerOptions()
                .max_epochs(spec.epochs)
                .set_grads_to_none(!zero_grad)
                .use_registered_subscriptions(false)) {
    std::int64_t first = 0;
    for (const auto& batch : batches) {
      Batch named;
      named.set("features", batch.data)
          .set("labels", batch.target)
          .set("index", torch::arange(first, first + batch.data.size(0), torch::kLong));
      first += batch.data.size(0);
      batches_.push_back(std::move(named));
    }
  }
  std::int64_t run() override {
    trainer_.fit(batches_);
    return trainer_.state().step;
  }
  std::vector<at::Tensor> parameters() override { return model_->parameters(); }

 private:
  typename Setup::Net model_;
  typename Setup::Optimizer optimizer_;
  std::vector<Batch> batches_;
  torchbus::Trainer trainer_;
};

// ---- the Python variant
// ---------------------------------------------------------------------------

/// benchmarks/python_loop.py --serve in a child process, driven over two pipes.
class PythonServer {
 public:
  /// `cnn_batches`: the CNN's batches per epoch; `channels_last`: the CNN in channels_last.
  PythonServer(const std::string& exe, const std::string& script, int threads, int blas_threads,
               int cnn_batches, bool channels_last) {
    // The child's command line, built before fork so that the child only execs.
    const std::string threads_arg = std::to_string(threads);
    const std::string blas_threads_arg = std::to_string(blas_threads);
    const std::string cnn_batches_arg = std::to_string(cnn_batches);
    std::vector<const char*> args = {exe.c_str(), script.c_str(), "--serve"};
    for (const auto* arg : {"--threads", threads_arg.c_str(), "--blas-threads",
                            blas_threads_arg.c_str(), "--steps-cnn", cnn_batches_arg.c_str()}) {
      args.push_back(arg);
    }
    if (channels_last) args.push_back("--channels-last");
    args.push_back(nullptr);
    int to_child[2];
    int from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) throw std::runtime_error("pipe failed");
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      dup2(to_child[0], STDIN_FILENO);
      dup2(from_child[1], STDOUT_FILENO);
      close(to_child[0]);
      close(to_child[1]);
      close(from_child[0]);
      close(from_child[1]);
      // execv passes this process's environment (GLIBC_TUNABLES, OPENBLAS_CORETYPE, ...) on.
      execv(exe.c_str(), const_cast<char* const*>(args.data()));
      std::perror(("loop_bench: cannot run " + exe).c_str());
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    in_ = fdopen(to_child[1], "w");
    out_ = fdopen(from_child[0], "r");
    // "ready GLIBC_TUNABLES=<value or ->": the allocator settings the Python process runs under.
    std::istringstream ready(read_line());
    std::string word;
    if (!(ready >> word) || word != "ready") {
      throw std::runtime_error("python_loop.py did not start");
    }
    ready >> malloc_settings_;
  }
  ~PythonServer() {
    if (in_ != nullptr) {
      std::fputs("quit\n", in_);
      std::fclose(in_);
    }
    if (out_ != nullptr) std::fclose(out_);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }
  PythonServer(const PythonServer&) = delete;
  PythonServer& operator=(const PythonServer&) = delete;

  /// Runs `epochs` epochs of `model` (mlp32, mlp784, cnn, cnn_bf16) in Python, timed by Python.
  Timing run(const std::string& model, int epochs) {
    std::fprintf(in_, "run %s %d\n", model.c_str(), epochs);
    std::fflush(in_);
    std::istringstream reply(read_line());
    Timing timing;
    if (!(reply >> timing.wall >> timing.cpu >> timing.steps >> timing.faults) ||
        timing.steps <= 0) {
      throw std::runtime_error("bad reply from python_loop.py: '" + reply.str() + "'");
    }
    return timing;
  }
  /// "GLIBC_TUNABLES=<value>" as the Python process saw it ("-" when unset).
  const std::string& malloc_settings() const noexcept { return malloc_settings_; }

 private:
  std::string read_line() {
    std::string line;
    for (int c = std::fgetc(out_); c != EOF && c != '\n'; c = std::fgetc(out_)) {
      line.push_back(static_cast<char>(c));
    }
    return line;
  }

  pid_t pid_ = -1;
  FILE* in_ = nullptr;
  FILE* out_ = nullptr;
  std::string malloc_settings_;
};

// ---- statistics and report
// ------------------------------------------------------------------------

double median(std::vector<double> values) {
  if (values.empty()) return std::nan("");
  std::sort(values.begin(), values.end());
  const auto n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

const std::vector<std::string> kVariants = {"hand",    "none",   "typical",
                                            "logging", "python", "structured"};
// The CNN's, in table order; each float32 variant has a bf16-mixed twin.
const std::vector<std::string> kCnnVariants = {"hand",    "hand_bf16",    "none",   "none_bf16",
                                               "typical", "typical_bf16", "python", "python_bf16"};
const std::string kBF16Suffix = "_bf16";

bool is_bf16(const std::string& variant) {
  return variant.size() > kBF16Suffix.size() &&
         variant.compare(variant.size() - kBF16Suffix.size(), kBF16Suffix.size(), kBF16Suffix) == 0;
}

std::string describe(const std::string& variant) {
  const std::string base =
      is_bf16(variant) ? variant.substr(0, variant.size() - kBF16Suffix.size()) : variant;
  const std::string suffix = is_bf16(variant) ? ", bf16" : "";
  if (base == "hand") return "(a) hand-written LibTorch loop" + suffix;
  if (base == "none") return "(b) Trainer, no subscribers" + suffix;
  if (base == "typical") return "(c) Trainer + typical built-ins" + suffix;
  if (base == "logging") return "(e) (c) + CSV + TensorBoard every step";
  if (base == "structured") return "(f) (b) on 3 named tensors, batch forward";
  return "(d) Python PyTorch hand loop" + suffix;
}

bool same_weights(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size() || a.empty()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i])) return false;
  }
  return true;
}

std::string fixed(double value, int digits) {
  if (std::isnan(value)) return "nan";
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(digits);
  out << value;
  return out.str();
}

}  // namespace

/// The directory the loggers write into, and the `torchbus` logger sent to a file in it (so that
/// SimpleLogger's lines do not go to the terminal). A directory it created is removed at the end.
class LogDirectory {
 public:
  explicit LogDirectory(const std::string& requested) {
    if (requested.empty()) {
      path_ = fs::temp_directory_path() / ("torchbus_loop_bench_" + std::to_string(getpid()));
      owned_ = true;
    } else {
      path_ = requested;
    }
    fs::create_directories(path_);
    auto sink =
        std::make_shared<spdlog::sinks::basic_file_sink_mt>((path_ / "torchbus.log").string(),
                                                            /*truncate=*/true);
    auto& sinks = torchbus::logger()->sinks();
    sinks.clear();
    sinks.push_back(std::move(sink));
  }
  ~LogDirectory() {
    torchbus::logger()->flush();
    torchbus::logger()->sinks().clear();
    if (!owned_) return;
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  LogDirectory(const LogDirectory&) = delete;
  LogDirectory& operator=(const LogDirectory&) = delete;

  const fs::path& path() const noexcept { return path_; }
  /// Lines the `torchbus` logger wrote so far.
  std::int64_t log_lines() const {
    torchbus::logger()->flush();
    return count_lines(path_ / "torchbus.log");
  }

 private:
  fs::path path_;
  bool owned_ = false;
};

/// The CNN's or the ResNet's C++ variants (--cnn-variants), each in float32 and, where this CPU
/// runs it, bf16-mixed.
template <typename Setup>
void add_image_variants(const ModelSpec& spec, std::vector<Batch>& batches,
                        std::map<std::string, std::unique_ptr<Variant>>& variants,
                        const fs::path& log_dir, const Options& options, bool bf16_runs) {
  const auto wanted = [&](const char* variant) {
    return std::find(options.cnn_variants.begin(), options.cnn_variants.end(), variant) !=
           options.cnn_variants.end();
  };
  if (wanted("hand")) {
    variants["hand"] = std::make_unique<HandLoop<Setup>>(spec, batches);
    if (bf16_runs) variants["hand_bf16"] = std::make_unique<HandLoop<Setup>>(spec, batches, true);
  }
  for (const auto& [name, subscribers] :
       {std::pair("none", Subscribers::None), std::pair("typical", Subscribers::Typical)}) {
    if (!wanted(name)) continue;
    variants[name] = std::make_unique<TrainerLoop<Setup>>(spec, batches, subscribers, log_dir,
                                                          options.zero_grad);
    if (bf16_runs) {
      variants[std::string(name) + kBF16Suffix] = std::make_unique<TrainerLoop<Setup>>(
          spec, batches, subscribers, log_dir, options.zero_grad, torchbus::Precision::BF16Mixed);
    }
  }
}

int run(const Options& options) {
  torch::set_num_threads(options.threads);
  const std::string blas = configure_blas(options.blas_threads);
  const bool cpu_clock = options.clock == "cpu";

  std::vector<ModelSpec> specs;
  for (const auto& model : options.models) {
    if (model == "mlp32")
      specs.push_back({"mlp32", 32, 64, 10, 32, options.epochs_mlp32, options.rounds_mlp32});
    if (model == "mlp784")
      specs.push_back({"mlp784", 784, 256, 10, 64, options.epochs_mlp784, options.rounds_mlp784});
    if (model == "cnn" || model == "resnet") {
      // The CNN: batch 128 of 1x28x28; the ResNet: batch 64 of 3x32x32.
      ModelSpec image{model, 0, 0, 10, model == "cnn" ? 128 : 64, 1, options.rounds_cnn};
      image.batches = options.steps_cnn;
      image.image = true;
      image.image_shape = model == "cnn" ? std::vector<std::int64_t>{1, 28, 28}
                                         : std::vector<std::int64_t>{3, 32, 32};
      image.channels_last = options.channels_last;
      specs.push_back(image);
    }
  }
  const LogDirectory log_dir(options.log_dir);

  const auto listed = [](const std::vector<std::string>& list, const std::string& item) {
    return std::find(list.begin(), list.end(), item) != list.end();
  };
  const auto wanted = [&](const std::string& variant) { return listed(options.variants, variant); };
  const auto cnn_wanted = [&](const std::string& variant) {
    return listed(options.cnn_variants, variant);
  };
  const bool has_image = listed(options.models, "cnn") || listed(options.models, "resnet");
  // bf16-mixed where torchbus runs it on this CPU (AVX-512); elsewhere its variants stay out.
  std::string bf16_refusal;
  try {
    torchbus::check_precision_supported(torchbus::Precision::BF16Mixed, torch::kCPU);
  } catch (const torchbus::ConfigError& error) {
    bf16_refusal = error.what();
  }
  const bool bf16_runs = bf16_refusal.empty();
  const bool has_mlp = listed(options.models, "mlp32") || listed(options.models, "mlp784");
  std::unique_ptr<PythonServer> python;
  if (!options.python_script.empty() &&
      ((has_mlp && wanted("python")) || (has_image && cnn_wanted("python")))) {
    try {
      python = std::make_unique<PythonServer>(options.python_exe, options.python_script,
                                              options.threads, options.blas_threads,
                                              options.steps_cnn, options.channels_last);
    } catch (const std::exception& error) {
      std::cerr << "loop_bench: python variant skipped: " << error.what() << '\n';
    }
  }

  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  const std::string malloc_settings =
      std::string("GLIBC_TUNABLES=") + (tunables != nullptr ? tunables : "-");
  std::cout << "torchbus loop benchmark: " << options.warmup_rounds
            << " warm-up round(s) per model (CNN: " << options.warmup_cnn << "), intra-op threads "
            << at::get_num_threads() << ", OpenBLAS threads " << options.blas_threads << ", clock "
            << (cpu_clock ? "thread CPU time" : "wall") << ", load average " << fixed(load[0], 2)
            << "\nBLAS: " << blas << "\nmalloc: "
            << (tunables != nullptr ? malloc_settings : "glibc's defaults (GLIBC_TUNABLES unset)");
  if (python) {
    std::cout << (python->malloc_settings() == malloc_settings
                      ? ", the same in the Python process"
                      : ", Python process: " + python->malloc_settings() + " (DIFFERENT)");
  }
  std::cout << '\n';
  if (has_image && !bf16_runs) {
    std::cout << "bf16-mixed: not measured (its figures read n/a): " << bf16_refusal << '\n';
  }

  // times[model][variant] = per-step times (us) of the measured rounds, by the chosen clock;
  // other_times: by the other clock (shown in the table only); faults: minor page faults per step.
  std::map<std::string, std::map<std::string, std::vector<double>>> times;
  std::map<std::string, std::map<std::string, std::vector<double>>> other_times;
  std::map<std::string, std::map<std::string, std::vector<double>>> faults;
  std::optional<bool> weights_match;  // checked when two C++ variants of a precision run
  for (const auto& spec : specs) {
    auto batches = make_batches(spec);
    std::map<std::string, std::unique_ptr<Variant>> variants;
    std::vector<std::string> order;
    // Variants that must end the warm-up with the same weights (same arithmetic).
    std::vector<std::vector<std::string>> same_arithmetic;
    if (!spec.image) {
      variants["hand"] = std::make_unique<HandLoop<MlpSetup>>(spec, batches);
      variants["none"] = std::make_unique<TrainerLoop<MlpSetup>>(spec, batches, Subscribers::None,
                                                                 log_dir.path(), options.zero_grad);
      variants["typical"] = std::make_unique<TrainerLoop<MlpSetup>>(
          spec, batches, Subscribers::Typical, log_dir.path(), options.zero_grad);
      variants["logging"] = std::make_unique<TrainerLoop<MlpSetup>>(
          spec, batches, Subscribers::Logging, log_dir.path(), options.zero_grad);
      variants["structured"] =
          std::make_unique<StructuredTrainerLoop<MlpSetup>>(spec, batches, options.zero_grad);
      for (const auto* name : {"hand", "none", "typical", "logging", "structured"}) {
        if (wanted(name)) order.emplace_back(name);
      }
      same_arithmetic.push_back(order);
      if (python && wanted("python")) order.emplace_back("python");
    } else {
      if (spec.name == "cnn") {
        add_image_variants<CnnSetup>(spec, batches, variants, log_dir.path(), options, bf16_runs);
      } else {
        add_image_variants<ResnetSetup>(spec, batches, variants, log_dir.path(), options,
                                        bf16_runs);
      }
      std::vector<std::string> float32_group;
      std::vector<std::string> bf16_group;
      for (const auto* name : {"hand", "none", "typical"}) {
        if (!cnn_wanted(name)) continue;
        order.emplace_back(name);
        float32_group.emplace_back(name);
        if (!bf16_runs) continue;
        order.emplace_back(std::string(name) + kBF16Suffix);
        bf16_group.emplace_back(std::string(name) + kBF16Suffix);
      }
      same_arithmetic = {float32_group, bf16_group};
      if (python && cnn_wanted("python")) {
        order.emplace_back("python");
        if (bf16_runs) order.emplace_back("python_bf16");
      }
    }
    if (order.empty()) {
      std::cerr << "loop_bench: no variant to run for " << spec.name
                << " (--variants python needs --python)\n";
      return 2;
    }

    if (spec.image) {
      std::cout << (spec.name == "cnn"
                        ? "cnn: conv 32, conv 64, max-pool, 9216-128-10, batch 128, Adam"
                        : "resnet: ResNet-18 shape at widths 16-32-64-128, 3x32x32, batch 64, "
                          "SGD with momentum")
                << (spec.channels_last ? ", channels_last" : "") << ", "
                << spec.epochs * spec.batches << " steps per variant per round, " << spec.rounds
                << " rounds" << std::endl;
    } else {
      std::cout << spec.name << ": " << spec.inputs << '-' << spec.hidden << '-' << spec.classes
                << ", batch " << spec.batch << ", " << spec.epochs * spec.batches
                << " steps per variant per round, " << spec.rounds << " rounds" << std::endl;
    }
    const int warmup = spec.image ? options.warmup_cnn : options.warmup_rounds;
    for (int round = -warmup; round < spec.rounds; ++round) {
      // Rotate the order so that no variant always runs first (or right after Python).
      const auto shift = static_cast<std::ptrdiff_t>(std::max(round, 0)) %
                         static_cast<std::ptrdiff_t>(order.size());
      std::vector<std::string> this_round(order.begin() + shift, order.end());
      this_round.insert(this_round.end(), order.begin(), order.begin() + shift);
      for (const auto& name : this_round) {
        Timing timing;
        if (name == "python" || name == "python_bf16") {
          timing = python->run(name == "python" ? spec.name : spec.name + kBF16Suffix, spec.epochs);
        } else {
          variants[name]->prepare();
          const std::int64_t faults_before = thread_minor_faults();
          const double wall = wall_seconds();
          const double cpu = thread_cpu_seconds();
          timing.steps = variants[name]->run();
          timing.cpu = thread_cpu_seconds() - cpu;
          timing.wall = wall_seconds() - wall;
          timing.faults = thread_minor_faults() - faults_before;
        }
        if (round < 0) continue;
        const auto steps = static_cast<double>(timing.steps);
        times[spec.name][name].push_back((cpu_clock ? timing.cpu : timing.wall) / steps * 1e6);
        other_times[spec.name][name].push_back((cpu_clock ? timing.wall : timing.cpu) / steps *
                                               1e6);
        faults[spec.name][name].push_back(static_cast<double>(timing.faults) / steps);
      }
      if (round + 1 == spec.rounds) {
        for (const auto& name : order) {
          if (variants.count(name) == 0) continue;  // Python
          if (const auto problem = variants[name]->subscribers_problem(); !problem.empty()) {
            std::cerr << "loop_bench: the subscribers of variant '" << name << "' of " << spec.name
                      << " did not run as expected: " << problem << '\n';
            return 1;
          }
        }
        // SimpleLogger logs every 50 steps: the CNN's short rounds do not reach a log line.
        if (!spec.image && (listed(order, "typical") || listed(order, "logging")) &&
            log_dir.log_lines() == 0) {
          std::cerr << "loop_bench: SimpleLogger wrote nothing to "
                    << (log_dir.path() / "torchbus.log").string() << '\n';
          return 1;
        }
      }
      if (round == -warmup) {
        // After the first round the C++ variants of a precision have taken the same steps from
        // the same weights.
        for (const auto& group : same_arithmetic) {
          if (group.size() < 2) continue;
          const auto reference = variants[group.front()]->parameters();
          bool match = weights_match.value_or(true);
          for (std::size_t i = 1; i < group.size(); ++i) {
            const bool same = same_weights(reference, variants[group[i]]->parameters());
            if (!same) {
              std::cerr << "loop_bench: " << spec.name << ": variant '" << group[i]
                        << "' ends the warm-up with other weights than '" << group.front() << "'\n";
            }
            match = match && same;
          }
          weights_match = match;
        }
      }
    }
  }
  auto us = [&](const std::string& model, const std::string& variant) {
    const auto found = times[model].find(variant);
    return found == times[model].end() ? std::nan("") : median(found->second);
  };

  // Median over rounds of the ratio to the base variant in the same round: the headline ratios.
  // Variants of one round run back to back, so a slow phase of the machine (another process or
  // guest taking the core for seconds) slows both sides of a ratio; the ratio of the medians over
  // all rounds can compare a fast phase with a slow one (both agree when the machine is quiet).
  auto paired = [&](const std::string& model, const std::string& variant,
                    const std::string& base = "hand") {
    const auto& runs = times[model][variant];
    const auto& bases = times[model][base];
    std::vector<double> ratios;
    for (std::size_t i = 0; i < runs.size() && i < bases.size(); ++i) {
      ratios.push_back(runs[i] / bases[i]);
    }
    return median(ratios);
  };

  // Table. The base of a CNN variant is the hand loop of the same precision (run with
  // --cnn-variants hand,...).
  std::printf("\n%-7s %-40s %10s %9s %9s %8s %8s %10s %9s\n", "model", "variant",
              cpu_clock ? "cpu us/st" : "wall us/st", "min", "max", "vs hand", "paired",
              cpu_clock ? "wall us/st" : "cpu us/st", "faults/st");
  for (const auto& spec : specs) {
    for (const auto& variant : spec.image ? kCnnVariants : kVariants) {
      const auto& runs = times[spec.name][variant];
      if (runs.empty()) continue;
      const std::string base = spec.image && is_bf16(variant) ? "hand" + kBF16Suffix : "hand";
      // "-" where the base did not run.
      const auto cell = [](double value) { return std::isnan(value) ? "-" : fixed(value, 3); };
      std::printf("%-7s %-40s %10.2f %9.2f %9.2f %8s %8s %10.2f %9.1f\n", spec.name.c_str(),
                  describe(variant).c_str(), us(spec.name, variant),
                  *std::min_element(runs.begin(), runs.end()),
                  *std::max_element(runs.begin(), runs.end()),
                  cell(us(spec.name, variant) / us(spec.name, base)).c_str(),
                  cell(paired(spec.name, variant, base)).c_str(),
                  median(other_times[spec.name][variant]), median(faults[spec.name][variant]));
    }
  }
  std::cout << "(us/st: median per-step time over the rounds; min/max over the rounds; vs hand: "
               "ratio of medians;\n paired: median of the per-round ratios to the hand loop (the "
               "name=value ratios are paired;\n a bf16 CNN variant's base is the bf16 hand loop); "
               "wall/cpu us/st: the other clock; faults/st: minor page faults per step)\n"
            << "check: C++ variants end the warm-up with identical weights: "
            << (!weights_match   ? "not checked"
                : *weights_match ? "yes"
                                 : "NO")
            << "\n";
  // A bf16 figure, or "n/a" where this CPU does not run bf16-mixed.
  const auto bf16_figure = [&](double value, int digits) {
    return bf16_runs ? fixed(value, digits) : std::string("n/a");
  };
  for (const auto& spec : specs) {
    if (!spec.image) continue;
    const auto& name = spec.name;
    std::cout << name << " (paired): bf16 speed-up torchbus "
              << bf16_figure(paired(name, "typical", "typical_bf16"), 3) << ", Python "
              << bf16_figure(paired(name, "python", "python_bf16"), 3)
              << "; Python / torchbus: float32 " << fixed(paired(name, "python", "typical"), 3)
              << ", bf16 " << bf16_figure(paired(name, "python_bf16", "typical_bf16"), 3) << '\n';
  }
  std::cout << '\n';

  // Machine-readable lines.
  for (const auto& variant : kVariants) {
    for (const auto& spec : specs) {
      if (spec.image) continue;
      std::cout << "us_per_step_" << variant << '_' << spec.name << '='
                << fixed(us(spec.name, variant), 3) << '\n';
    }
  }
  const double hand = us("mlp32", "hand");
  const double typical = us("mlp32", "typical");
  std::cout << "loop_overhead_ratio_none=" << fixed(paired("mlp32", "none"), 4) << '\n'
            << "loop_overhead_ratio_typical=" << fixed(paired("mlp32", "typical"), 4) << '\n'
            << "logging_overhead_ratio=" << fixed(paired("mlp32", "logging", "typical"), 4) << '\n'
            << "structured_over_example=" << fixed(paired("mlp32", "structured", "none"), 4) << '\n'
            << "python_over_torchbus=" << fixed(paired("mlp32", "python", "typical"), 4) << '\n'
            << "python_over_hand=" << fixed(paired("mlp32", "python"), 4) << '\n'
            << "loop_overhead_ratio_typical_mlp784=" << fixed(paired("mlp784", "typical"), 4)
            << '\n'
            << "python_over_torchbus_mlp784=" << fixed(paired("mlp784", "python", "typical"), 4)
            << '\n'
            << "loop_overhead_ratio_none_of_medians=" << fixed(us("mlp32", "none") / hand, 4)
            << '\n'
            << "loop_overhead_ratio_typical_of_medians=" << fixed(typical / hand, 4) << '\n'
            << "logging_overhead_ratio_of_medians=" << fixed(us("mlp32", "logging") / typical, 4)
            << '\n'
            << "python_over_torchbus_of_medians=" << fixed(us("mlp32", "python") / typical, 4)
            << '\n'
            << "overhead_us_per_step_none_mlp32=" << fixed(us("mlp32", "none") - hand, 3) << '\n'
            << "overhead_us_per_step_typical_mlp32=" << fixed(typical - hand, 3) << '\n';
  for (const auto& spec : specs) {
    if (!spec.image) continue;
    const auto& name = spec.name;
    // The four variants always (nan when not run), the others when they ran.
    for (const auto& variant : kCnnVariants) {
      const bool headline = variant.rfind("typical", 0) == 0 || variant.rfind("python", 0) == 0;
      if (!headline && times[name][variant].empty()) continue;
      std::cout << "us_per_step_" << variant << '_' << name << '='
                << (is_bf16(variant) ? bf16_figure(us(name, variant), 3)
                                     : fixed(us(name, variant), 3))
                << '\n';
    }
    std::cout << "bf16_speedup_" << name << '='
              << bf16_figure(paired(name, "typical", "typical_bf16"), 4) << '\n'
              << "python_bf16_speedup_" << name << '='
              << bf16_figure(paired(name, "python", "python_bf16"), 4) << '\n'
              << "python_over_torchbus_" << name << '='
              << fixed(paired(name, "python", "typical"), 4) << '\n'
              << "python_over_torchbus_" << name
              << "_bf16=" << bf16_figure(paired(name, "python_bf16", "typical_bf16"), 4) << '\n';
  }
  std::cout << "loop_clock=" << options.clock << '\n'
            << "same_weights="
            << (!weights_match   ? "nan"
                : *weights_match ? "1"
                                 : "0")
            << std::endl;
  return weights_match.value_or(true) ? 0 : 1;
}

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  try {
    return run(options);
  } catch (const std::exception& error) {
    std::cerr << "loop_bench: " << error.what() << '\n';
    return 1;
  }
}
