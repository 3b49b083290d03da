// torchbus-train: trains a classifier on synthetic data, MNIST or a CSV file with torchbus.
// Run `torchbus-train --help` for the flags; docs/getting-started.md walks through a run.

#include "accuracy.hpp"
#include "blas_threads.hpp"
#include "dataset.hpp"
#include "exit_status.hpp"
#include "model.hpp"
#include "process_allocator.hpp"
#include "rank_agreement.hpp"
#include "run_directory.hpp"
#include "run_lock.hpp"
#include "run_segments.hpp"
#include "run_start.hpp"
#include "sha256.hpp"
#include "shuffled_batches.hpp"
#include "startup_signals.hpp"
#include "stop_signals.hpp"
#include "summary.hpp"
#include "training_device.hpp"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <CLI/CLI.hpp>
#include <torchbus/callbacks/callbacks.hpp>
#include <torchbus/torchbus.hpp>

#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <thread>

namespace {

namespace fs = std::filesystem;
using train::exit_if_signalled_during_startup;
using train::UsageError;

struct Flags {
  std::string data = "synthetic";
  std::string model = "auto";
  std::vector<std::int64_t> hidden = {128, 64};
  bool hidden_given = false;  // --hidden was on the command line
  std::int64_t epochs = 5;
  std::int64_t max_steps = -1;
  std::int64_t batch_size = 64;
  std::int64_t accumulate = 1;
  std::string accumulate_schedule;  // EPOCH:K,... (empty: none)
  std::int64_t fast_dev_run = 0;
  std::string limit_train_batches;  // a count, or a fraction with a decimal point (empty: all)
  std::string limit_val_batches;
  std::int64_t sanity_val_steps = 2;
  double lr = 1e-3;
  std::string optimizer = "adam";
  std::string precision = "32";
  std::string device = "auto";
  bool channels_last = false;
  std::uint64_t seed = 42;
  std::int64_t val_every = 1;
  std::int64_t val_every_steps = 0;
  std::string out = "runs/torchbus-train";
  int threads = 0;
  std::int64_t log_every = 50;
  std::int64_t checkpoint_every = 0;
  bool checkpoints = true;
  bool resume = false;
  bool overwrite = false;
  bool csv = true;
  bool tensorboard = true;
  bool report = true;
  bool profile = false;
  bool progress = true;
  std::string scheduler = "none";
  std::int64_t early_stopping = 0;
  double ema = 0.0;
  double swa_start = 0.0;
  double swa_lr = 0.0;
  bool terminate_on_nan = true;
  double time_limit = 0.0;
  bool find_lr = false;
  std::string init_from;  // a state_dict file (empty: none)
  bool validate = false;
};

/// `value` as text with up to six significant digits (3.40282e+38, 0.5).
std::string number_text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

/// Accepts decimal integers in [minimum, maximum] (no maximum: any 64-bit integer >= minimum),
/// with a message a person can act on, and writes them back in plain decimal: CLI11 reads "010"
/// as octal 8 and "0x10" as 16, so a transform, not a check, must hand it the number read here.
CLI::Validator integer_in(std::int64_t minimum, std::optional<std::int64_t> maximum = std::nullopt,
                          const std::string& maximum_meaning = "") {
  const std::string range =
      ">= " + std::to_string(minimum) +
      (maximum ? " and <= " + std::to_string(*maximum) + maximum_meaning : std::string());
  const auto largest = maximum.value_or(std::numeric_limits<std::int64_t>::max());
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        std::size_t used = 0;
        long long value = 0;
        bool outside_64_bits = false;
        try {
          value = std::stoll(text, &used);
        } catch (const std::out_of_range&) {
          outside_64_bits = true;
        } catch (const std::exception&) {
          used = 0;
        }
        if (outside_64_bits || used != text.size() || text.empty() ||
            std::isspace(static_cast<unsigned char>(text.front())) || value < minimum ||
            value > largest) {
          return "expected an integer " + range + ", got '" + text + "'" +
                 (outside_64_bits && !maximum ? " (outside the 64-bit integers)" : "");
        }
        text = std::to_string(value);
        return {};
      },
      range);
}

/// Accepts integers >= `minimum`.
CLI::Validator at_least(std::int64_t minimum) {
  return integer_in(minimum);
}

/// Which ends of its range a number may equal.
enum class Ends { Both, NotMinimum, NotMaximum };

/// Accepts finite numbers between `minimum` and `maximum` (equal to those `ends` allows), named in
/// the message. Values too small for a normal double (1e-320) are read as what they are, not
/// refused.
CLI::Validator finite_number(double minimum, double maximum, Ends ends) {
  const std::string range = (ends == Ends::NotMinimum ? "> " : ">= ") + number_text(minimum) +
                            (ends == Ends::NotMaximum ? " and < " : " and <= ") +
                            number_text(maximum);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);  // overflow: inf, refused below
        const bool whole = !text.empty() && end == text.c_str() + text.size() &&
                           !std::isspace(static_cast<unsigned char>(text.front()));
        const bool in_range = std::isfinite(value) &&
                              (ends == Ends::NotMinimum ? value > minimum : value >= minimum) &&
                              (ends == Ends::NotMaximum ? value < maximum : value <= maximum);
        return whole && in_range ? std::string()
                                 : "expected a finite number " + range + ", got '" + text + "'";
      },
      range);
}

/// Accepts any text but the empty one, which names no `what`.
CLI::Validator non_empty(const std::string& what) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        return text.empty() ? "expected " + what + ", got ''" : std::string();
      },
      "NON-EMPTY");
}

/// The largest --lr and --swa-lr. LibTorch passes the step's size to its kernels as a float32
/// (at most 3.4e38), and Adam's first step is lr / (1 - beta1) = 10 lr: a larger rate fails at
/// run time ("cannot be converted to type float without overflow").
constexpr double kMaxLearningRate = 1e37;

/// The largest --seed: seeds are signed 64-bit integers in the run's identity and summary.
constexpr std::int64_t kMaxSeed = std::numeric_limits<std::int64_t>::max();

/// A --limit-*-batches value: a count (digits only), or a fraction with a decimal point.
std::optional<torchbus::BatchLimit> parse_batch_limit(const std::string& text) {
  std::size_t used = 0;
  try {
    if (text.find('.') == std::string::npos) {
      const auto count = std::stoll(text, &used);
      if (used == text.size() && count >= 1) return torchbus::BatchLimit::count(count);
    } else {
      const auto fraction = std::stod(text, &used);
      if (used == text.size() && fraction > 0.0 && fraction <= 1.0) {
        return torchbus::BatchLimit::fraction(fraction);
      }
    }
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

CLI::Validator batch_limit() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        return parse_batch_limit(text) ? std::string()
                                       : "expected a count of batches >= 1 (e.g. 10) or a fraction "
                                         "in (0, 1] with a decimal point (e.g. 0.25), got '" +
                                             text + "'";
      },
      "COUNT|FRACTION");
}

/// An --accumulate-schedule value, "EPOCH:K,EPOCH:K,..." (nullopt: malformed).
std::optional<torchbus::AccumulationSchedule> parse_accumulation_schedule(const std::string& text) {
  torchbus::AccumulationSchedule schedule;
  std::istringstream in(text);
  for (std::string entry; std::getline(in, entry, ',');) {
    const auto colon = entry.find(':');
    if (colon == std::string::npos) return std::nullopt;
    try {
      std::size_t epoch_used = 0, k_used = 0;
      const auto epoch = std::stoll(entry.substr(0, colon), &epoch_used);
      const auto k = std::stoll(entry.substr(colon + 1), &k_used);
      if (epoch_used != colon || k_used != entry.size() - colon - 1 || epoch < 0 || k < 1 ||
          !schedule.emplace(epoch, k).second) {
        return std::nullopt;
      }
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  if (schedule.empty() || text.back() == ',') return std::nullopt;
  return schedule;
}

CLI::Validator accumulation_schedule() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        return parse_accumulation_schedule(text)
                   ? std::string()
                   : "expected EPOCH:K,... with epochs >= 0 (counted from 0, each once) and k >= "
                     "1, e.g. 0:1,2:4, got '" +
                         text + "'";
      },
      "EPOCH:K,...");
}

/// The schedule as --accumulate-schedule spells it, in epoch order ("0:1,2:4").
std::string schedule_text(const torchbus::AccumulationSchedule& schedule) {
  std::string text;
  for (const auto& [epoch, k] : schedule) {
    text += (text.empty() ? "" : ",") + std::to_string(epoch) + ":" + std::to_string(k);
  }
  return text;
}

void describe_flags(CLI::App& app, Flags& flags) {
  app.option_defaults()->always_capture_default();  // --help shows each flag's default
  app.description(
      "Trains a classifier with torchbus and writes everything under one run directory:\n"
      "train.log (the log) and summary.json (options, final losses and accuracy, wall time,\n"
      "samples/s and a SHA-256 of the final parameters, to compare runs bit for bit).\n"
      "SIGINT (Ctrl-C), SIGTERM, SIGHUP and SIGUSR1 stop at the next step boundary with a\n"
      "checkpoint and a summary; a second signal ends the process at once.\n"
      "Exit codes: 0 done (also after --max-steps, --time-limit, early stopping or a NaN stop),\n"
      "1 runtime failure, 2 command-line usage (found before training), 128+N after signal N\n"
      "(130 SIGINT, 143 SIGTERM, 129 SIGHUP, 138 SIGUSR1).\n"
      "Under mpirun, torchrun or srun it trains data-parallel: every rank reads its shard of the\n"
      "data, rank 0 writes OUT, and every rank exits with the same code.");
  app.add_option(
      "--data", flags.data,
      "synthetic (built in, the default) | mnist:DIR (the four IDX files) | "
      "csv:FILE[:LABEL] (header row, numeric cells, class column LABEL, default 'label')");
  app.add_option("--model", flags.model, "auto (cnn for MNIST, else mlp) | mlp | cnn")
      ->check(CLI::IsMember({"auto", "mlp", "cnn"}));
  app.add_option("--hidden", flags.hidden, "hidden widths of the MLP, e.g. --hidden 128 64")
      ->transform(at_least(1));
  app.add_option("--epochs", flags.epochs, "epochs to train")->transform(at_least(1));
  app.add_option("--max-steps", flags.max_steps, "stop after this many optimizer steps (-1: none)")
      ->transform(at_least(-1));
  app.add_option("--batch-size", flags.batch_size, "samples per batch (of each rank)")
      ->transform(at_least(1));
  app.add_option("--accumulate", flags.accumulate, "batches per optimizer step")
      ->transform(at_least(1));
  app.add_option("--accumulate-schedule", flags.accumulate_schedule,
                 "change the batches per optimizer step at given epochs (counted from 0), e.g. "
                 "0:1,2:4 (k 4 from the third epoch on; epochs before the first entry use "
                 "--accumulate)")
      ->check(accumulation_schedule());
  app.add_option("--limit-train-batches", flags.limit_train_batches,
                 "train on the first N batches of each epoch, or a fraction of them with a "
                 "decimal point (0.25); the run's identity includes it")
      ->check(batch_limit());
  app.add_option("--limit-val-batches", flags.limit_val_batches,
                 "validate on the first N batches, or a fraction of them (0.25)")
      ->check(batch_limit());
  app.add_option("--fast-dev-run", flags.fast_dev_run,
                 "check the whole loop in seconds: one epoch of N training and N validation "
                 "batches (N: 1 when omitted), nothing written (no OUT, checkpoints, logs, report "
                 "or summary)")
      ->expected(0, 1)
      ->default_str("1")
      ->transform(at_least(1));
  app.add_option("--sanity-val-steps", flags.sanity_val_steps,
                 "validate on N batches before the first training step of a fresh run, so a bug "
                 "in the validation path shows at once; nothing of it is kept (0: off)")
      ->transform(at_least(0));
  auto* lr = app.add_option("--lr", flags.lr,
                            "learning rate (at most " + number_text(kMaxLearningRate) + ")")
                 ->check(finite_number(0, kMaxLearningRate, Ends::NotMinimum));
  app.add_flag("--find-lr", flags.find_lr,
               "LRFinder: before training, sweep the learning rate from 1e-7 to 10 over 100 "
               "steps on the training data (stopped when the loss diverges), write "
               "OUT/lr_finder.csv and train with the suggested lr (steepest descent of the "
               "smoothed loss), which enters the run's identity; one process only")
      ->excludes(lr);
  app.add_option("--optimizer", flags.optimizer, "sgd | adam | adamw")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  app.add_option("--precision", flags.precision,
                 "32 | bf16-mixed (autocast to bfloat16; CPUs with AVX-512, GPUs) | 16-mixed "
                 "(float16 with loss scaling; CUDA only)")
      ->check(CLI::IsMember({"32", "bf16-mixed", "16-mixed"}));
  app.add_option("--device", flags.device,
                 "auto | cpu | cuda | cuda:N: where to train (auto: the first CUDA device when "
                 "this LibTorch has CUDA and a GPU is visible, else the CPU)")
      ->check(CLI::Validator(train::check_device_text, "auto | cpu | cuda | cuda:N"));
  app.add_flag("--channels-last", flags.channels_last,
               "keep the CNN's weights and images in channels_last (NHWC) memory format: faster "
               "with --precision bf16-mixed");
  app.add_option("--seed", flags.seed,
                 "seed of the data, the weights and the shuffling (0 to 2^63-1)")
      ->transform(integer_in(0, kMaxSeed));
  app.add_option("--val-every", flags.val_every, "validate every N epochs (0: never)")
      ->transform(at_least(0));
  app.add_option("--val-every-steps", flags.val_every_steps,
                 "also validate every N optimizer steps (0: never)")
      ->transform(at_least(0));
  app.add_option("--out", flags.out,
                 "run directory (created); one that already holds a run needs --resume or "
                 "--overwrite. The run writes OUT/model.pt, its final weights as a state_dict "
                 "Python's torch.load reads (docs/interop.md)")
      ->check(non_empty("a directory path"));
  const auto hardware_threads = static_cast<std::int64_t>(std::thread::hardware_concurrency());
  app.add_option("--threads", flags.threads,
                 "intra-op threads, OpenBLAS's too (0: the libraries' defaults; at most the "
                 "hardware threads, " +
                     std::to_string(hardware_threads) + " here)")
      ->transform(integer_in(0, std::max<std::int64_t>(1, hardware_threads),
                             " (the hardware threads of this machine)"));
  app.add_option("--log-every", flags.log_every,
                 "SimpleLogger: log loss, learning rate and step time every N steps")
      ->transform(at_least(1));
  app.add_option("--checkpoint-every", flags.checkpoint_every,
                 "ModelCheckpoint: also save every N steps (0: at epoch ends only)")
      ->transform(at_least(0));
  app.add_flag(
      "--checkpoints,!--no-checkpoints", flags.checkpoints,
      "ModelCheckpoint: save to OUT/checkpoints at epoch ends and when the run stops (on)");
  auto* resume = app.add_flag(
      "--resume", flags.resume,
      "continue the run in OUT from its newest valid checkpoint of the same identity (the "
      "options that change the result); with no checkpoint yet, start it from scratch");
  app.add_flag("--overwrite", flags.overwrite,
               "replace the run in OUT: remove its outputs (log, checkpoints, metrics, "
               "TensorBoard files, report, summary, model.pt) first")
      ->excludes(resume);
  app.add_option("--init-from", flags.init_from,
                 "start from the weights of a state_dict FILE: Python's torch.save(model."
                 "state_dict(), FILE) of the same network (docs/interop.md) or a run's "
                 "OUT/model.pt; every name and shape must match; the file's SHA-256 enters the "
                 "run's identity")
      ->check(non_empty("a state_dict file"));
  app.add_flag("--validate", flags.validate,
               "evaluate the --init-from or --resume weights on the validation data and train "
               "nothing: writes OUT/summary.json (with --resume OUT/validation.json, keeping the "
               "run's summary) with the validation loss and accuracy");
  app.add_flag("--csv,!--no-csv", flags.csv, "CsvLogger: write OUT/metrics.csv (on)");
  app.add_flag("--tensorboard,!--no-tensorboard", flags.tensorboard,
               "TensorBoardLogger: write event files to OUT/tensorboard (on); view them with "
               "`tensorboard --logdir OUT/tensorboard`");
  app.add_flag("--report,!--no-report", flags.report,
               "RunReport: write OUT/report.html, charts of every metric and the options (on)");
  app.add_flag("--profile", flags.profile,
               "Profiler: time every callback and the loop's phases; a table in the log and the "
               "report (off)");
  app.add_option("--scheduler", flags.scheduler,
                 "LearningRateScheduler: none | cosine (10% warmup, to 0) | restarts (cosine "
                 "with warm restarts, periods of 1/7, 2/7, 4/7 of the run) | onecycle | linear "
                 "(to 0 by the end) | step (x0.1 every third of the run) | plateau (x0.1 after 2 "
                 "epochs without a better val_loss)")
      ->check(
          CLI::IsMember({"none", "cosine", "restarts", "onecycle", "linear", "step", "plateau"}));
  app.add_option("--early-stopping", flags.early_stopping,
                 "EarlyStopping: stop after N validations without a better val_loss (0: off)")
      ->transform(at_least(0));
  app.add_option("--ema", flags.ema,
                 "EMA: keep an exponential moving average of the weights with this decay (e.g. "
                 "0.999), validate with it and end with it (0: off)")
      ->check(finite_number(0, 1, Ends::NotMaximum));
  app.add_option("--swa-start", flags.swa_start,
                 "SWA: average the weights of every epoch from this fraction of --epochs on (e.g. "
                 "0.75) and end with the average (0: off)")
      ->check(finite_number(0, 1, Ends::Both));
  app.add_option("--swa-lr", flags.swa_lr,
                 "SWA: anneal the learning rate to this value over the averaged epochs (0: keep "
                 "the run's learning rate; at most " +
                     number_text(kMaxLearningRate) + ")")
      ->check(finite_number(0, kMaxLearningRate, Ends::Both));
  app.add_flag("--terminate-on-nan,!--no-terminate-on-nan", flags.terminate_on_nan,
               "TerminateOnNaN: stop at the first non-finite loss, without its update (on)");
  app.add_option("--time-limit", flags.time_limit,
                 "Timer: stop gracefully after this many seconds of training (0: none)")
      ->check(finite_number(0, 1e9, Ends::Both));
  app.add_flag("--progress,!--no-progress", flags.progress,
               "ProgressBar: a live bar on a terminal, periodic lines otherwise (on)");
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const Flags& flags,
                                                        const std::vector<at::Tensor>& parameters) {
  if (flags.optimizer == "sgd") {
    return std::make_unique<torch::optim::SGD>(parameters,
                                               torch::optim::SGDOptions(flags.lr).momentum(0.9));
  }
  if (flags.optimizer == "adamw") {
    return std::make_unique<torch::optim::AdamW>(parameters, torch::optim::AdamWOptions(flags.lr));
  }
  return std::make_unique<torch::optim::Adam>(parameters, torch::optim::AdamOptions(flags.lr));
}

/// Bytes a model of `parameters` needs while training: weights, gradients, optimizer state.
double training_bytes(double parameters, const std::string& optimizer) {
  const double copies = optimizer == "sgd" ? 3 : 4;  // SGD keeps momentum; Adam(W) two moments
  return parameters * copies * sizeof(float);
}

double physical_memory_bytes() {
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

std::string gib(double bytes) {
  return fmt::format("{:.3g} GiB", bytes / (1024.0 * 1024.0 * 1024.0));
}

bool uses_cnn(const Flags& flags, const train::Dataset& data) {
  return flags.model == "cnn" || (flags.model == "auto" && data.images);
}

/// Refuses a model that cannot fit in this machine's memory, naming what makes it that large.
void check_model_fits(const Flags& flags, const train::Dataset& data, bool cnn) {
  const auto inputs =
      data.train_inputs.numel() / std::max<std::int64_t>(1, data.train_inputs.size(0));
  const double parameters =
      cnn ? train::cnn_parameter_count(data.train_inputs.size(2), data.train_inputs.size(3),
                                       data.classes)
          : train::mlp_parameter_count(inputs, flags.hidden, data.classes);
  const double needed = training_bytes(parameters, flags.optimizer);
  const double available = physical_memory_bytes();
  if (needed <= available) return;
  std::string hidden;
  for (const auto width : flags.hidden) hidden += " " + std::to_string(width);
  const auto message = fmt::format(
      "the {} would have {:.3g} parameters, {} with gradients and {} state, more than this "
      "machine's {} of memory: {}{} classes in the data",
      cnn ? "CNN" : "MLP", parameters, gib(needed), flags.optimizer, gib(available),
      cnn ? std::string() : "--hidden" + hidden + ", ", data.classes);
  // The data's classes alone overflowing memory is a data problem, else the flags are.
  const double output_layer =
      cnn ? 0.0 : training_bytes(static_cast<double>(data.classes), flags.optimizer);
  if (output_layer > available) throw torchbus::DataError(message);
  throw UsageError(message);
}

torch::nn::Sequential make_model(const Flags& flags, const train::Dataset& data) {
  const bool cnn = uses_cnn(flags, data);
  if (cnn) {
    if (!data.images) throw UsageError("--model cnn needs image data (--data mnist:DIR)");
    if (flags.hidden_given) {
      throw UsageError(std::string("--hidden sets the MLP's hidden widths; the CNN (") +
                       (flags.model == "cnn" ? "--model cnn" : "--model auto on images") +
                       ") has none: drop --hidden, or train an MLP with --model mlp");
    }
    const auto height = data.train_inputs.size(2), width = data.train_inputs.size(3);
    TORCHBUS_CHECK(height >= train::kCnnMinImageSide && width >= train::kCnnMinImageSide,
                   torchbus::DataError, "MNIST: the images of ", data.images_file, " are ", height,
                   "x", width, " pixels; the CNN needs at least ", train::kCnnMinImageSide, "x",
                   train::kCnnMinImageSide,
                   " (it pools twice by 2); train an MLP on them with --model mlp");
  }
  check_model_fits(flags, data, cnn);
  if (cnn)
    return train::make_cnn(data.train_inputs.size(2), data.train_inputs.size(3), data.classes);
  const auto inputs = data.train_inputs.numel() / data.train_inputs.size(0);
  return train::make_mlp(inputs, flags.hidden, data.classes);
}

double latest_or_nan(const torchbus::MetricHistory& metrics, const std::string& name) {
  return metrics.contains(name) ? metrics.latest(name).value : std::nan("");
}

/// The schedule --scheduler names, over the run's optimizer steps.
std::shared_ptr<torchbus::LearningRateScheduler> make_scheduler(const std::string& kind,
                                                                std::int64_t total_steps) {
  using torchbus::LearningRateScheduler;
  if (kind == "cosine") {
    return std::make_shared<LearningRateScheduler>(
        torchbus::CosineDecayOptions(total_steps).warmup_steps(total_steps / 10));
  }
  // Periods of ceil(steps / 7) and ceil(steps / 3): the run ends inside the last (annealed)
  // period, never in the restart or decay that a rounded-down period puts after it.
  const auto part = [total_steps](std::int64_t parts) {
    return std::max<std::int64_t>(1, (total_steps + parts - 1) / parts);
  };
  if (kind == "restarts") {
    return std::make_shared<LearningRateScheduler>(
        torchbus::CosineRestartsOptions(part(7)).period_mult(2));
  }
  if (kind == "onecycle") {
    return std::make_shared<LearningRateScheduler>(torchbus::OneCycleOptions(total_steps));
  }
  if (kind == "linear") {
    return std::make_shared<LearningRateScheduler>(torchbus::PolynomialDecayOptions(total_steps));
  }
  if (kind == "step") {
    return std::make_shared<LearningRateScheduler>(torchbus::StepDecayOptions(part(3)));
  }
  if (kind == "plateau") {
    return std::make_shared<LearningRateScheduler>(torchbus::ReduceOnPlateauOptions().patience(1));
  }
  return nullptr;
}

bool validates(const Flags& flags) {
  return flags.val_every > 0 || flags.val_every_steps > 0;
}

/// Whether the trainer gets the validation data: when the flags validate, and in a --fast-dev-run
/// (which validates whatever --val-every* say).
bool gets_validation_data(const Flags& flags) {
  return validates(flags) || flags.fast_dev_run > 0;
}

/// Flag combinations that cannot work (on `device`), found before anything is written.
void check_flag_combinations(const Flags& flags, const c10::Device& device) {
  if (flags.early_stopping > 0 && !validates(flags)) {
    throw UsageError(
        "--early-stopping watches val_loss: it needs --val-every > 0 or --val-every-steps > 0");
  }
  if (flags.scheduler == "plateau" && !validates(flags)) {
    throw UsageError(
        "--scheduler plateau watches val_loss: it needs --val-every > 0 or --val-every-steps > 0");
  }
  if (flags.ema > 0 && flags.swa_start > 0) {
    throw UsageError(
        "--ema and --swa-start both end the run with an average of the weights (model.pt would "
        "hold one of them, the validations the other); choose one");
  }
  if (flags.swa_lr > 0 && flags.swa_start <= 0) {
    throw UsageError("--swa-lr sets the learning rate of SWA's epochs: it needs --swa-start");
  }
  if (flags.max_steps == 0) {
    throw UsageError("--max-steps 0 trains nothing; expected -1 (no limit) or a count >= 1");
  }
  if (flags.resume && !flags.checkpoints) {
    throw UsageError("--resume needs checkpoints; drop --no-checkpoints");
  }
  if (flags.fast_dev_run > 0 && (flags.resume || flags.find_lr)) {
    throw UsageError(std::string("--fast-dev-run checks the loop from a fresh start and writes "
                                 "nothing: it cannot be combined with ") +
                     (flags.resume ? "--resume" : "--find-lr"));
  }
  if (flags.validate && flags.init_from.empty() && !flags.resume) {
    throw UsageError("--validate evaluates given weights: it needs --init-from FILE or --resume");
  }
  if (flags.validate && (flags.find_lr || flags.fast_dev_run > 0)) {
    throw UsageError(std::string("--validate trains nothing: it cannot be combined with ") +
                     (flags.find_lr ? "--find-lr" : "--fast-dev-run"));
  }
  try {
    torchbus::check_precision_supported(torchbus::parse_precision(flags.precision), device);
  } catch (const torchbus::ConfigError& error) {
    throw UsageError("--precision " + flags.precision + ": " + error.what());
  }
}

/// a + b for a, b >= 0, or the largest int64 when the sum is larger.
std::int64_t saturating_add(std::int64_t a, std::int64_t b) {
  constexpr auto largest = std::numeric_limits<std::int64_t>::max();
  return a > largest - b ? largest : a + b;
}

/// a * b for a, b >= 0, or the largest int64 when the product is larger.
std::int64_t saturating_multiply(std::int64_t a, std::int64_t b) {
  constexpr auto largest = std::numeric_limits<std::int64_t>::max();
  return b != 0 && a > largest / b ? largest : a * b;
}

/// The optimizer steps the run makes when nothing stops it early (the largest int64 when more):
/// per epoch, its training batches (within --limit-train-batches) in windows of that epoch's k.
/// k changes only at the accumulation schedule's entries, so the epochs between two entries are
/// counted at once, however many --epochs asks for. A --fast-dev-run counts the steps of the run
/// it checks (it makes the first of them), so that it runs that run's schedule.
std::int64_t planned_steps(const Flags& flags, const torchbus::TrainerOptions& options,
                           std::int64_t batches_per_epoch) {
  const auto limit =
      options.limit_train_batches().batches_per_pass(batches_per_epoch, "--limit-train-batches");
  const auto batches = limit < 0 ? batches_per_epoch : std::min(limit, batches_per_epoch);
  std::vector<std::int64_t> k_changes{0};  // the first epoch of each stretch of one k
  for (const auto& entry : options.accumulation_schedule()) {
    if (entry.first > 0 && entry.first < options.max_epochs()) k_changes.push_back(entry.first);
  }
  k_changes.push_back(std::max<std::int64_t>(0, options.max_epochs()));
  std::int64_t steps = 0;
  for (std::size_t i = 0; i + 1 < k_changes.size(); ++i) {
    const auto k = options.accumulate_grad_batches_at(k_changes[i]);
    const auto steps_per_epoch = batches / k + (batches % k != 0 ? 1 : 0);
    steps = saturating_add(steps,
                           saturating_multiply(k_changes[i + 1] - k_changes[i], steps_per_epoch));
  }
  if (flags.max_steps > 0) steps = std::min(steps, flags.max_steps);
  return steps;
}

/// The callbacks that change what the run does, as the flags ask.
std::vector<std::shared_ptr<torchbus::Callback>> steering_callbacks(
    const Flags& flags, const torchbus::TrainerOptions& options, std::int64_t batches_per_epoch) {
  std::vector<std::shared_ptr<torchbus::Callback>> callbacks;
  if (flags.time_limit > 0) {
    callbacks.push_back(
        std::make_shared<torchbus::Timer>(torchbus::TimerOptions().time_limit(flags.time_limit)));
  }
  if (flags.early_stopping > 0) {
    callbacks.push_back(std::make_shared<torchbus::EarlyStopping>(
        torchbus::EarlyStoppingOptions().patience(flags.early_stopping)));
  }
  if (flags.ema > 0) {
    callbacks.push_back(std::make_shared<torchbus::EMA>(torchbus::EMAOptions().decay(flags.ema)));
  }
  if (flags.swa_start > 0) {
    auto options = torchbus::SWAOptions().start_fraction(flags.swa_start);
    if (flags.swa_lr > 0) options.swa_lr(flags.swa_lr).annealing_epochs(1);
    callbacks.push_back(std::make_shared<torchbus::SWA>(options));
  }
  const auto total_steps = planned_steps(flags, options, batches_per_epoch);
  try {
    if (auto scheduler = make_scheduler(flags.scheduler, total_steps)) {
      callbacks.push_back(scheduler);
    }
  } catch (const torchbus::ConfigError& error) {
    throw UsageError("--scheduler " + flags.scheduler + " over the run's " +
                     std::to_string(total_steps) + " optimizer step(s): " + error.what());
  }
  return callbacks;
}

/// The trainer's options as the flags give them (the run's identity is set once OUT is read).
torchbus::TrainerOptions trainer_options(const Flags& flags, const c10::Device& device) {
  return torchbus::TrainerOptions()
      .max_epochs(flags.epochs)
      .max_steps(flags.max_steps)
      .accumulate_grad_batches(flags.accumulate)
      .accumulation_schedule(flags.accumulate_schedule.empty()
                                 ? torchbus::AccumulationSchedule()
                                 : *parse_accumulation_schedule(flags.accumulate_schedule))
      .limit_train_batches(flags.limit_train_batches.empty()
                               ? torchbus::BatchLimit::all()
                               : *parse_batch_limit(flags.limit_train_batches))
      .limit_val_batches(flags.limit_val_batches.empty()
                             ? torchbus::BatchLimit::all()
                             : *parse_batch_limit(flags.limit_val_batches))
      .fast_dev_run(flags.fast_dev_run)
      .num_sanity_val_steps(flags.sanity_val_steps)
      .val_every_n_epochs(flags.val_every)
      .val_every_n_steps(flags.val_every_steps)
      .seed(flags.seed)
      .precision(torchbus::parse_precision(flags.precision))
      .channels_last(flags.channels_last)
      .device(device);
}

/// The steering callbacks, built before OUT is touched with the trainer's options checked: what
/// the library refuses in them is a usage error, and nothing is written.
std::vector<std::shared_ptr<torchbus::Callback>> configured_steering(
    const Flags& flags, const c10::Device& device, std::int64_t batches_per_epoch) {
  try {
    const auto options = trainer_options(flags, device);
    options.validate();
    return steering_callbacks(flags, options, batches_per_epoch);
  } catch (const torchbus::ConfigError& error) {
    throw UsageError(error.what());
  }
}

/// The run's options, for summary.json and the report (`hidden` is null for the CNN).
train::JsonObject describe_run(const Flags& flags, bool cnn) {
  return {{"data", flags.data},
          {"model", flags.model},
          {"hidden", cnn ? train::JsonObject() : train::JsonObject(flags.hidden)},
          {"epochs", flags.epochs},
          {"max_steps", flags.max_steps},
          {"batch_size", flags.batch_size},
          {"accumulate", flags.accumulate},
          {"accumulate_schedule", flags.accumulate_schedule},
          {"limit_train_batches",
           flags.limit_train_batches.empty() ? "all" : flags.limit_train_batches},
          {"limit_val_batches", flags.limit_val_batches.empty() ? "all" : flags.limit_val_batches},
          {"sanity_val_steps", flags.sanity_val_steps},
          {"lr", flags.lr},
          {"optimizer", flags.optimizer},
          {"precision", flags.precision},
          {"device", flags.device},
          {"channels_last", flags.channels_last},
          {"scheduler", flags.scheduler},
          {"ema", flags.ema},
          {"swa_start", flags.swa_start},
          {"swa_lr", flags.swa_lr},
          {"early_stopping", flags.early_stopping},
          {"terminate_on_nan", flags.terminate_on_nan},
          {"time_limit", flags.time_limit},
          {"seed", static_cast<std::int64_t>(flags.seed)},
          {"val_every", flags.val_every},
          {"val_every_steps", flags.val_every_steps},
          {"threads", flags.threads},
          {"init_from", flags.init_from}};
}

/// The data source with file paths made absolute, so that a resume from elsewhere matches.
std::string canonical_data(const std::string& spec) {
  const auto colon = spec.find(':');
  if (colon == std::string::npos) return spec;
  std::error_code error;
  const auto path = fs::absolute(spec.substr(colon + 1), error);
  return spec.substr(0, colon + 1) +
         (error ? spec.substr(colon + 1) : path.lexically_normal().string());
}

/// How the run's identity names its batch: by the global batch (per-rank batch x accumulation x
/// ranks), which a resume on another number of ranks keeps, or by the three numbers, as runs
/// before that did (and as runs with an accumulation schedule still do: their k changes by epoch).
enum class BatchInIdentity { Global, Split };

/// The run's identity: every option that changes its result ("key=value" lines). Written into
/// identity.txt, every checkpoint and summary.json; --resume continues only a run of the same.
/// Options added since a release appear only when set, so that the runs of that release still
/// resume.
std::string run_identity(const Flags& flags, bool cnn, int world_size,
                         const std::string& init_from_sha256, BatchInIdentity batch) {
  std::string hidden;
  for (const auto width : flags.hidden)
    hidden += (hidden.empty() ? "" : ",") + std::to_string(width);
  const auto global = batch == BatchInIdentity::Global && flags.accumulate_schedule.empty();
  auto identity = fmt::format(
      "data={}\nmodel={}\nhidden={}\n{}optimizer={}\nlr={}\n"
      "scheduler={}\nseed={}\nepochs={}\nmax_steps={}\nval_every={}\nval_every_steps={}\n"
      "early_stopping={}\nterminate_on_nan={}\nprecision={}\nchannels_last={}\n{}",
      canonical_data(flags.data), cnn ? "cnn" : "mlp", cnn ? "-" : hidden,
      global ? fmt::format("global_batch={}\n", flags.batch_size * flags.accumulate * world_size)
             : fmt::format("batch_size={}\naccumulate={}\n", flags.batch_size, flags.accumulate),
      flags.optimizer, flags.lr, flags.scheduler, flags.seed, flags.epochs, flags.max_steps,
      flags.val_every, flags.val_every_steps, flags.early_stopping, flags.terminate_on_nan ? 1 : 0,
      flags.precision, flags.channels_last ? 1 : 0,
      global ? std::string() : fmt::format("world_size={}\n", world_size));
  if (flags.ema > 0) identity += fmt::format("ema={}\n", flags.ema);
  if (!flags.accumulate_schedule.empty()) {
    identity += fmt::format("accumulate_schedule={}\n",
                            schedule_text(*parse_accumulation_schedule(flags.accumulate_schedule)));
  }
  if (!flags.limit_train_batches.empty()) {
    identity += fmt::format("limit_train_batches={}\n",
                            parse_batch_limit(flags.limit_train_batches)->to_string());
  }
  if (!flags.limit_val_batches.empty()) {
    identity += fmt::format("limit_val_batches={}\n",
                            parse_batch_limit(flags.limit_val_batches)->to_string());
  }
  if (flags.swa_start > 0) {
    identity += fmt::format("swa_start={}\nswa_lr={}\n", flags.swa_start, flags.swa_lr);
  }
  if (!init_from_sha256.empty()) identity += fmt::format("init_from_sha256={}\n", init_from_sha256);
  return identity;
}

/// Sends the torchbus log to the console and to `directory`/train.log (continued on --resume).
void log_to(const fs::path& directory, bool append) {
  auto file =
      std::make_shared<spdlog::sinks::basic_file_sink_mt>((directory / "train.log").string(),
                                                          /*truncate=*/!append);
  torchbus::logger()->sinks().push_back(file);
  torchbus::logger()->flush_on(spdlog::level::info);
}

/// Refuses data that cannot be shared among `world_size` ranks: each validates its share.
/// This rank's shards of the data, in batches of --batch-size on every rank.
struct RankBatches {
  train::ShuffledBatches train;       ///< shuffled, as many batches on every rank
  train::ShuffledBatches validation;  ///< in order, every sample once
};

RankBatches rank_batches(const Flags& flags, const train::Dataset& data,
                         const torchbus::ProcessGroup& group, const c10::Device& device) {
  const int rank = group.rank();
  const int world_size = group.world_size();
  // Batches for a GPU are gathered into page-locked memory: the trainer's copy to the device then
  // returns at once, and the next batch is gathered while the GPU works.
  const bool pin = device.is_cuda();
  return {train::ShuffledBatches(data.train_inputs, data.train_targets, flags.batch_size,
                                 /*shuffle=*/true, flags.seed,
                                 {rank, world_size, /*equal_sizes=*/true}, pin),
          train::ShuffledBatches(data.validation_inputs, data.validation_targets, flags.batch_size,
                                 /*shuffle=*/false, flags.seed,
                                 {rank, world_size, /*equal_sizes=*/false}, pin)};
}

/// Refuses a --limit-*-batches fraction that keeps no batch of this data: a usage error, found
/// before OUT is touched (a --fast-dev-run ignores both flags).
void check_batch_limits(const Flags& flags, const RankBatches& batches) {
  const auto check = [](const std::string& text, std::int64_t size, const char* flag) {
    if (text.empty()) return;
    try {
      parse_batch_limit(text)->batches_per_pass(size, flag);
    } catch (const torchbus::ConfigError& error) {
      throw UsageError(error.what());
    }
  };
  if (flags.fast_dev_run > 0) return;
  check(flags.limit_train_batches, batches.train.batches_per_epoch(), "--limit-train-batches");
  if (validates(flags)) {
    check(flags.limit_val_batches, batches.validation.batches_per_epoch(), "--limit-val-batches");
  }
}

void check_shardable(const Flags& flags, const train::Dataset& data, int world_size) {
  const auto rows = data.validation_inputs.size(0);
  TORCHBUS_CHECK(!gets_validation_data(flags) || rows >= world_size, torchbus::DataError,
                 "the validation split has ", rows, " sample(s) for ", world_size,
                 " ranks; expected at least one per rank (each rank validates its share)");
}

/// Why the run ended, for summary.json.
std::string stop_reason_of(const torchbus::State& state, const Flags& flags) {
  if (state.stop_requested()) return state.stop_reason();
  if (flags.fast_dev_run == 0 && flags.max_steps >= 0 && state.step >= flags.max_steps) {
    return "max_steps reached";
  }
  return "completed";
}

/// --find-lr: the learning-rate range test on the training data, on a trainer and optimizer of
/// its own without callbacks (nothing is written, no checkpoint of the sweep). The model and the
/// random generator are as before it, so the run trains as one given --lr with the lr found.
torchbus::LRFinderResult find_lr(const Flags& flags, const train::Dataset& data,
                                 const torch::nn::Sequential& model, int world_size,
                                 const c10::Device& device) {
  if (world_size > 1) {
    throw UsageError(
        "--find-lr runs the learning-rate range test in one process; run it without mpirun, "
        "torchrun or srun, then pass the lr it found with --lr");
  }
  const torchbus::LRFinderOptions options;
  auto optimizer = make_optimizer(flags, model->parameters());
  torchbus::Trainer trainer(
      model, *optimizer,
      [](const at::Tensor& output, const at::Tensor& target) {
        return torch::nn::functional::cross_entropy(output, target);
      },
      torchbus::TrainerOptions()
          .max_epochs(-1)
          .max_steps(options.num_steps())
          .accumulate_grad_batches(flags.accumulate)
          .device(device)
          .seed(flags.seed)
          .precision(torchbus::parse_precision(flags.precision))
          .channels_last(flags.channels_last)
          .use_registered_subscriptions(false));
  trainer.on(torchbus::Event::StepEnd, [](torchbus::State& s) {
    if (const int signal = train::received_stop_signal()) {
      s.request_stop(train::interrupted_reason(signal), torchbus::StopKind::Interrupted);
    }
  });
  train::ShuffledBatches batches(data.train_inputs, data.train_targets, flags.batch_size,
                                 /*shuffle=*/true, flags.seed, {}, device.is_cuda());
  auto result = torchbus::find_learning_rate_source(trainer, batches, options);
  exit_if_signalled_during_startup();
  if (!result.suggestion) {
    throw torchbus::Error(fmt::format(
        "--find-lr: the learning-rate range test found no learning rate ({} steps{}); choose one "
        "with --lr instead",
        result.lrs.size(), result.diverged ? ", the loss diverged" : ""));
  }
  return result;
}

/// The run's identity in both forms (BatchInIdentity::Global, then Split) for given flags.
using IdentitiesOf = std::function<std::array<std::string, 2>(const Flags&)>;

/// --find-lr --resume: the range test of the run in OUT, read back from OUT/lr_finder.csv, when
/// OUT/identity.txt is this run's with the lr that test found; none otherwise (the test runs
/// again). So a resume trains with the lr its run trained with, and spends no steps on a sweep.
std::optional<torchbus::LRFinderResult> recorded_lr_sweep(const Flags& flags, int world_size,
                                                          const IdentitiesOf& identities_of) {
  const fs::path out(flags.out);
  if (!flags.resume || world_size > 1 || !fs::exists(out / "lr_finder.csv")) return std::nullopt;
  const auto recorded_identity = train::read_identity(out);
  if (!recorded_identity) return std::nullopt;
  torchbus::LRFinderResult sweep;
  try {
    sweep = torchbus::LRFinderResult::read_csv(out / "lr_finder.csv");
  } catch (const torchbus::Error& error) {
    torchbus::logger()->warn("--find-lr --resume: {}; running the range test again", error.what());
    return std::nullopt;
  }
  if (!sweep.suggestion) return std::nullopt;
  auto with_lr = flags;
  with_lr.lr = *sweep.suggestion;
  for (const auto& identity : identities_of(with_lr)) {
    if (identity == *recorded_identity) return sweep;
  }
  return std::nullopt;
}

/// Writes OUT/lr_finder.csv (unless `recorded`: read back from there), logs the lr found and adds
/// the loss against the lr to the report.
void report_lr_found(const torchbus::LRFinderResult& found, bool recorded, const fs::path& out,
                     torchbus::RunReport* report) {
  const auto stopped = found.diverged ? " (stopped when the loss diverged)" : "";
  if (recorded) {
    torchbus::logger()->info(
        "--find-lr --resume: the lr the run found, {}, read back with its range test ({} "
        "steps{}) from {}; the resume trains with it and does not sweep again",
        *found.suggestion, found.lrs.size(), stopped, (out / "lr_finder.csv").string());
  } else {
    found.write_csv(out / "lr_finder.csv");
    torchbus::logger()->info(
        "--find-lr: the range test ran {} steps{} and found lr {} (steepest descent of the "
        "smoothed loss); this run trains with it; the sweep is in {}",
        found.lrs.size(), stopped, *found.suggestion, (out / "lr_finder.csv").string());
  }
  if (report == nullptr) return;
  torchbus::ReportChart chart;
  chart.title = "Learning-rate range test";
  chart.x_label = "log10(lr)";
  chart.y = found.smoothed_losses;
  chart.highlight = found.suggestion_index;
  chart.caption = fmt::format(
      "--find-lr: the smoothed loss of {} steps{}; ring: the lr found, {:.4g} (steepest descent), "
      "which this run trains with",
      found.lrs.size(), stopped, *found.suggestion);
  for (const double lr : found.lrs) chart.x.push_back(std::log10(lr));
  report->add_chart(std::move(chart));
}

/// Loads the state_dict file `path` into `model` (strict); returns the file's SHA-256. A file that
/// does not fit the model is a usage error naming the file and the keys.
std::string initialize_from(const std::string& path, torch::nn::Module& model) {
  try {
    torchbus::load_state_dict(model, path);
  } catch (const torchbus::CheckpointError& error) {
    throw UsageError(std::string("--init-from: ") + error.what());
  }
  return train::file_sha256(path);
}

/// --validate: evaluates the model's weights (--init-from's, or the --resume checkpoint's) on the
/// validation data and writes what it found to `summary_file` (rank 0); trains nothing.
int validate_weights(torchbus::Trainer& trainer, const torch::nn::Module& model,
                     torchbus::BatchSource& validation, const std::string& weights,
                     const train::JsonObject& run_options, const std::string& identity,
                     int world_size, const std::optional<fs::path>& summary_file) {
  const double loss = trainer.evaluate_source(validation);
  const auto& state = trainer.state();
  const double accuracy = latest_or_nan(state.metrics, "val_accuracy");
  torchbus::logger()->info("validated {}: val loss {:.4f} accuracy {:.3f}", weights, loss,
                           accuracy);
  if (!summary_file) return 0;
  const train::JsonObject summary = {{"options", run_options},
                                     {"identity", identity},
                                     {"world_size", world_size},
                                     {"validated", weights},
                                     {"steps", state.step},
                                     {"final_val_loss", loss},
                                     {"final_val_accuracy", accuracy},
                                     {"stop_reason", "validated"},
                                     {"exit_code", 0},
                                     {"params_sha256", train::parameters_sha256(model)}};
  const auto text = summary.dump(2, ' ', false, train::JsonObject::error_handler_t::replace);
  torchbus::write_file_atomically(*summary_file, text + "\n");
  torchbus::logger()->info("summary in {}", summary_file->string());
  return 0;
}

/// A validation's mean loss and accuracy.
struct ValidationResult {
  double loss = std::nan("");
  double accuracy = std::nan("");
};

/// Validates the weights `model` holds (SWA's average, put in at the end of fit) as the run's
/// validations do, on a trainer of its own: the run's callbacks (its report, its segments, the
/// loggers) stay those of its training.
ValidationResult validate_final_weights(const Flags& flags, const torch::nn::Sequential& model,
                                        torchbus::BatchSource& validation,
                                        const std::shared_ptr<torchbus::ProcessGroup>& group,
                                        const c10::Device& device) {
  auto optimizer = make_optimizer(flags, model->parameters());  // a trainer needs one; unused
  torchbus::Trainer trainer(
      model, *optimizer,
      [](const at::Tensor& output, const at::Tensor& target) {
        return torch::nn::functional::cross_entropy(output, target);
      },
      trainer_options(flags, device).use_registered_subscriptions(false));
  trainer.set_process_group(group);
  trainer.add(std::make_shared<train::Accuracy>());
  ValidationResult result;
  result.loss = trainer.evaluate_source(validation);
  result.accuracy = latest_or_nan(trainer.state().metrics, "val_accuracy");
  return result;
}

/// Set once training started: from then on every failure is a runtime failure (exit 1).
bool training_started = false;

/// Creates and locks OUT (the lock lives in `lock`), then decides how the run uses it. Rank 0's
/// work: the checkpoint to resume from (empty: a fresh start) is shared with the others.
train::RunStart take_run_directory(const Flags& flags, const std::string& identity,
                                   const std::string& split_identity, int world_size,
                                   std::optional<train::RunLock>& lock) {
  const fs::path out(flags.out);
  std::error_code error;
  fs::create_directories(out, error);
  TORCHBUS_CHECK(!error && fs::is_directory(out), torchbus::Error,
                 "cannot create the run directory '", flags.out,
                 "': ", error ? error.message() : "a file of that name exists");
  lock.emplace(out);
  train::RunDirectoryRequest::Split split;
  split.by_global_batch = flags.accumulate_schedule.empty();
  split.world_size = world_size;
  split.accumulate = flags.accumulate;
  split.limit_counts_batches = !flags.limit_train_batches.empty() &&
                               !parse_batch_limit(flags.limit_train_batches)->needs_size();
  auto start =
      train::prepare_run_directory({out, flags.resume, flags.overwrite, identity, split_identity,
                                    split, flags.epochs, flags.max_steps, flags.validate});
  std::ofstream probe(out / "train.log", std::ios::app);
  TORCHBUS_CHECK(probe.good(), torchbus::Error, "the run directory '", flags.out,
                 "' is not writable");
  return start;
}

int run(Flags flags) {
  // Before the first tensor: the CNN's activations then reuse the heap instead of faulting in
  // fresh pages every step (docs/performance.md, "Large tensors and page faults").
  const auto allocator = train::keep_freed_memory();
  const fs::path out(flags.out);
  // A world of one without a launcher; under mpirun, torchrun or srun every rank runs this. A stop
  // signal while joining ends the process with 128+N.
  const auto group = train::join_process_group();
  const int world_size = group->world_size();
  // Rank 0 alone writes the run directory; a --fast-dev-run writes nothing.
  const bool writes_outputs = group->rank() == 0 && flags.fast_dev_run == 0;

  // The same checks, data and model on every rank; a failure on one ends every rank.
  train::Dataset data;
  torch::nn::Sequential model{nullptr};
  std::string identity;
  std::string split_identity;    // as runs before global_batch named it; they still resume
  std::string init_from_sha256;  // of the --init-from file (empty: none)
  std::optional<torchbus::LRFinderResult> lr_found;  // --find-lr
  bool lr_recorded = false;  // --find-lr --resume: lr_found read back from OUT, not swept again
  train::TrainingDevice device;
  std::vector<std::shared_ptr<torchbus::Callback>> steering;  // built and checked before OUT
  train::run_agreed(*group, [&] {
    device = train::resolve_device(flags.device, world_size);
    check_flag_combinations(flags, device.device);
    if (flags.threads > 0) {
      torch::set_num_threads(flags.threads);
      train::set_blas_threads(flags.threads);
    }
    torchbus::logger()->info("threads: {} intra-op ({}, {}), BLAS: {}", torch::get_num_threads(),
                             AT_PARALLEL_OPENMP ? "OpenMP" : "LibTorch's own pool",
                             flags.threads > 0 ? "--threads" : "the libraries' default",
                             train::describe_blas());
    torch::manual_seed(flags.seed);
    data = train::load_dataset(flags.data, flags.seed);
    check_shardable(flags, data, world_size);
    const auto planned = rank_batches(flags, data, *group, device.device);
    check_batch_limits(flags, planned);
    steering = configured_steering(flags, device.device, planned.train.batches_per_epoch());
    model = make_model(flags, data);
    if (!flags.init_from.empty()) init_from_sha256 = initialize_from(flags.init_from, *model);
    const IdentitiesOf identities_of = [&](const Flags& given) {
      const bool cnn = uses_cnn(given, data);
      return std::array{
          run_identity(given, cnn, world_size, init_from_sha256, BatchInIdentity::Global),
          run_identity(given, cnn, world_size, init_from_sha256, BatchInIdentity::Split)};
    };
    if (flags.find_lr) {
      lr_found = recorded_lr_sweep(flags, world_size, identities_of);
      lr_recorded = lr_found.has_value();
      if (!lr_found) lr_found = find_lr(flags, data, model, world_size, device.device);
      flags.lr = *lr_found->suggestion;  // in the identity, the options and the summary
    }
    const auto identities = identities_of(flags);
    identity = identities[0];
    split_identity = identities[1];
    exit_if_signalled_during_startup();
  });

  // Rank 0 decides how the run uses OUT; every rank resumes from the checkpoint it chose.
  std::optional<train::RunLock> lock;
  train::RunStart start;
  train::run_agreed(*group, [&] {
    if (writes_outputs)
      start = take_run_directory(flags, identity, split_identity, world_size, lock);
  });
  const fs::path resume_from = train::broadcast_text(*group, start.resume_from.string());
  // The identity the run goes on under: its checkpoints' (an older run's keeps its form).
  if (const auto kept = train::broadcast_text(*group, start.identity); !kept.empty()) {
    identity = kept;
  }
  const auto finished = train::broadcast_text(*group, start.finished_reason);
  const bool resuming = !resume_from.empty();
  if (writes_outputs) log_to(out, flags.resume);
  auto log = torchbus::logger();
  if (!finished.empty() && !flags.validate) {
    // Its checkpoint holds the decision that ended it: resuming changes nothing.
    log->info("already finished: {}; nothing to train ({}), the run's outputs are kept{}", finished,
              resume_from.empty() ? "its summary; it kept no checkpoints"
                                  : "checkpoint " + resume_from.string(),
              writes_outputs ? "; summary in " + (out / "summary.json").string() : std::string());
    return 0;
  }
  auto optimizer = make_optimizer(flags, model->parameters());
  const auto options = trainer_options(flags, device.device).run_identity(identity);
  torchbus::Trainer trainer(
      model, *optimizer,
      [](const at::Tensor& output, const at::Tensor& target) {
        return torch::nn::functional::cross_entropy(output, target);
      },
      options);
  trainer.set_process_group(group);  // the log lines of a world of several name their rank
  if (resuming) trainer.resume_from(resume_from);
  log->info("data: {}", data.description);
  for (const auto& warning : data.warnings) log->warn("data: {}", warning);
  if (!resuming && !init_from_sha256.empty()) {
    log->info("weights: from {} (SHA-256 {})", flags.init_from, init_from_sha256);
  }
  log->info("device: {} ({})", device.device.str(), device.how);
  log->info("memory: {}", allocator);
  if (flags.channels_last && !uses_cnn(flags, data)) {
    // Accepted (it is in the identity of runs that gave it), but said: it changes nothing here.
    log->warn(
        "--channels-last changes nothing for the MLP, which has no image layers; it lays out "
        "the CNN's (--model cnn)");
  }
  if (const auto reclaimed = train::reclaimed_stop_signals(); !reclaimed.empty()) {
    log->info("stop signals: {} taken back from a library loaded with LibTorch", reclaimed);
  }
  auto batches = rank_batches(flags, data, *group, device.device);
  trainer.add(std::make_shared<train::Accuracy>());
  const auto segments = std::make_shared<train::RunSegments>(
      train::RunSegment{0, world_size, flags.batch_size, flags.accumulate});
  trainer.add(segments);
  std::shared_ptr<torchbus::SWA> swa;  // --swa-start: ends the run with its average
  for (auto& callback : steering) {
    if (auto averaging = std::dynamic_pointer_cast<torchbus::SWA>(callback)) swa = averaging;
    trainer.add(std::move(callback));
  }
  const auto run_options = describe_run(flags, uses_cnn(flags, data));
  // --validate evaluates as the run's validations do (with the EMA or SWA average when on).
  if (flags.validate) {
    if (resuming) trainer.load_checkpoint(resume_from);
    std::optional<fs::path> summary_file;
    if (writes_outputs) summary_file = out / (resuming ? "validation.json" : "summary.json");
    return validate_weights(trainer, *model, batches.validation,
                            resuming ? resume_from.string() : flags.init_from, run_options,
                            identity, world_size, summary_file);
  }
  const auto outputs =
      torchbus::add_default_callbacks(trainer, torchbus::DefaultCallbacksOptions()
                                                   .run_dir(out.string())
                                                   .log_every(flags.log_every)
                                                   .terminate_on_nan(flags.terminate_on_nan)
                                                   .csv(flags.csv)
                                                   .tensorboard(flags.tensorboard)
                                                   .report(flags.report)
                                                   .profiler(flags.profile)
                                                   .progress_bar(flags.progress)
                                                   .append(resuming)
                                                   .metrics_to_show({"val_loss", "val_accuracy"})
                                                   .title("torchbus-train: " + flags.data));
  if (outputs.run_report) {
    for (const auto& [key, value] : train::text_members(run_options)) {
      outputs.run_report->add_option(key, value);
    }
    outputs.run_report->add_option("world_size", std::to_string(world_size));
    outputs.run_report->add_option(
        "model.pt",
        "the final weights, written at the end: a state_dict Python's torch.load "
        "reads; --init-from starts a run from one, --validate evaluates one "
        "(docs/interop.md)");
  }
  if (lr_found && writes_outputs)
    report_lr_found(*lr_found, lr_recorded, out, outputs.run_report.get());
  if (outputs.tensorboard_logger) {  // the run's options in TensorBoard's Text tab
    for (const auto& [key, value] : train::text_members(run_options)) {
      outputs.tensorboard_logger->add_option(key, value);
    }
    outputs.tensorboard_logger->add_option("world_size", std::to_string(world_size));
  }
  if (flags.checkpoints) {
    trainer.add(std::make_shared<torchbus::ModelCheckpoint>(
        torchbus::ModelCheckpointOptions(out / "checkpoints")
            .every_n_steps(flags.checkpoint_every)
            .monitor(validates(flags) ? "val_loss" : "")));
  }

  std::int64_t samples = 0;
  trainer.on(torchbus::Event::BatchEnd, [&](torchbus::State& s) {
    if (!s.cancelled) samples += s.batch_target().size(0);
  });
  trainer.on(torchbus::Event::StepEnd, [](torchbus::State& s) {
    if (const int signal = train::received_stop_signal()) {
      s.request_stop(train::interrupted_reason(signal), torchbus::StopKind::Interrupted);
    }
  });
  trainer.on(torchbus::Event::EpochEnd, [&](torchbus::State& s) {
    if (s.error || s.rank != 0) return;  // the failure is reported instead; rank 0 speaks for all
    log->info("epoch {} ended: train loss {:.4f} accuracy {:.3f} | val loss {:.4f} accuracy {:.3f}",
              s.epoch + 1, latest_or_nan(s.metrics, "train_loss_epoch"),
              latest_or_nan(s.metrics, "train_accuracy"), latest_or_nan(s.metrics, "val_loss"),
              latest_or_nan(s.metrics, "val_accuracy"));
  });

  if (flags.fast_dev_run > 0) {
    log->info(
        "--fast-dev-run: one epoch of {0} training and {0} validation batches, nothing "
        "written",
        flags.fast_dev_run);
  }
  log->info("training: {} epochs of {} batches of {}{}, accumulate {}, {} lr {}, precision {}",
            flags.epochs, batches.train.batches_per_epoch(), flags.batch_size,
            world_size > 1 ? fmt::format(" on each of {} ranks", world_size) : std::string(),
            flags.accumulate, flags.optimizer, flags.lr, flags.precision);
  train::run_agreed(*group, [&] {
    exit_if_signalled_during_startup();
    if (writes_outputs) train::write_identity(out, identity);
  });
  training_started = true;
  const auto started = std::chrono::steady_clock::now();
  const auto& state = trainer.state();
  std::optional<ValidationResult> average_validation;  // of SWA's average, when validated
  // The validation the summary reports: of the weights model.pt holds when it was run.
  const auto final_validation = [&] {
    return average_validation ? *average_validation
                              : ValidationResult{latest_or_nan(state.metrics, "val_loss"),
                                                 latest_or_nan(state.metrics, "val_accuracy")};
  };
  const auto write_summary = [&](const std::string& stop_reason, int exit_code, double seconds) {
    // Every rank reads as many samples per step (Shard::equal_sizes).
    const auto all_samples = static_cast<double>(samples) * world_size;
    train::JsonObject summary = {
        {"options", run_options},
        {"identity", identity},
        {"world_size", world_size},
        {"segments", segments->to_json()},
        {"device", device.device.str()},
        {"steps", state.step},
        {"epochs", state.epoch},
        {"final_train_loss", latest_or_nan(state.metrics, "train_loss_epoch")},
        {"final_train_accuracy", latest_or_nan(state.metrics, "train_accuracy")},
        {"final_val_loss", final_validation().loss},
        {"final_val_accuracy", final_validation().accuracy},
        {"wall_seconds", seconds},
        {"samples_per_second", seconds > 0 ? all_samples / seconds : 0.0},
        {"stop_reason", stop_reason},
        {"exit_code", exit_code},
        {"params_sha256", train::parameters_sha256(*model)}};
    if (lr_found) summary["lr_found"] = flags.lr;
    auto failures = train::JsonObject::array();
    for (const auto& failure : trainer.bus().subscriber_failures()) {
      failures.push_back({{"subscriber", failure.subscriber},
                          {"event", failure.event},
                          {"first_error", failure.first_error},
                          {"failures", failure.failures},
                          {"disabled", failure.disabled}});
    }
    summary["subscriber_failures"] = std::move(failures);
    // Non-finite numbers (a diverged loss, a metric never computed) are written as null, bytes
    // that are not UTF-8 (in a data path) as U+FFFD.
    const auto text = summary.dump(2, ' ', false, train::JsonObject::error_handler_t::replace);
    torchbus::write_file_atomically(out / "summary.json", text + "\n");
  };
  const auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  };

  double seconds = 0;
  std::string stop_reason;
  int exit_code = 0;
  try {
    trainer.fit_sources(batches.train, gets_validation_data(flags) ? &batches.validation : nullptr);
    seconds = elapsed();
    stop_reason = stop_reason_of(state, flags);
    const int signal = train::received_stop_signal();
    const bool interrupted = signal != 0 && stop_reason == train::interrupted_reason(signal);
    // A signal that stopped any rank ends every rank with its code: the others stopped because
    // that rank asked (at the same step).
    if (const auto signalled = train::first_nonzero(*group, interrupted ? signal : 0)) {
      stop_reason = train::interrupted_reason(static_cast<int>(signalled->second));
      exit_code = train::kExitSignalBase + static_cast<int>(signalled->second);
    }
    // The validations saw the trained weights; SWA put its average in at the end: validated
    // once more, so that the summary's final_val_* describe model.pt (an interrupted run exits
    // at once and reports its last validation).
    if (swa && !swa->average().empty() && exit_code == 0 && gets_validation_data(flags)) {
      average_validation =
          validate_final_weights(flags, model, batches.validation, group, device.device);
      log->info("SWA: the average of {} epochs (model.pt): val loss {:.4f} accuracy {:.3f}",
                swa->averaged(), average_validation->loss, average_validation->accuracy);
    }
  } catch (const torchbus::DistributedError& error) {
    // Another rank failed or died: rank 0 records how far the run got, if it can.
    if (writes_outputs && world_size > 1) {
      try {
        write_summary(std::string("failed: ") + error.what(), train::kExitFailed, elapsed());
      } catch (const std::exception& failure) {
        log->error("cannot write the summary of the failed run: {}", failure.what());
      }
    }
    throw;
  }
  if (writes_outputs) {
    // The final weights (the EMA or SWA average when on), as summary.json's params_sha256.
    torchbus::save_state_dict(*model, out / "model.pt");
    write_summary(stop_reason, exit_code, seconds);
  }
  const auto& failures = trainer.bus().subscriber_failures();
  const auto disabled = std::count_if(failures.begin(), failures.end(),
                                      [](const auto& failure) { return failure.disabled; });
  log->info("done in {:.1f} s: {} steps, val accuracy {:.3f}, {}{}{}", seconds, state.step,
            final_validation().accuracy, stop_reason,
            disabled == 0 ? std::string()
                          : fmt::format("; {} subscriber(s) disabled after they threw (listed "
                                        "above and in summary.json)",
                                        disabled),
            writes_outputs ? "; summary in " + (out / "summary.json").string() : std::string());
  return exit_code;
}

}  // namespace

/// The program, loaded and run by the torchbus-train executable (launcher.cpp) once it has
/// installed the stop-signal handlers.
extern "C" int torchbus_train_main(int argc, char** argv) {
  CLI::App app{"torchbus-train"};
  Flags flags;
  describe_flags(app, flags);
  try {
    app.parse(argc, argv);
    flags.hidden_given = app.count("--hidden") > 0;
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);
  } catch (const CLI::ParseError& error) {
    std::cerr << "torchbus-train: " << error.what() << "\nRun 'torchbus-train --help' for usage.\n";
    return train::kExitUsage;
  }
  try {
    return run(flags);
  } catch (...) {
    const auto error = std::current_exception();
    std::cerr << train::failure_text(error, training_started);
    return train::exit_code_of(error, training_started);
  }
}
