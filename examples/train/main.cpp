// torchbus-train: trains a classifier on synthetic data, MNIST or a CSV file with torchbus.
// Run `torchbus-train --help` for the flags; docs/getting-started.md walks through a run.

#include "accuracy.hpp"
#include "dataset.hpp"
#include "model.hpp"
#include "run_directory.hpp"
#include "shuffled_batches.hpp"
#include "stop_signals.hpp"
#include "summary.hpp"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <CLI/CLI.hpp>
#include <torchbus/callbacks/callbacks.hpp>
#include <torchbus/torchbus.hpp>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>
#include <thread>

namespace {

namespace fs = std::filesystem;

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitSignalBase = 128;

/// A command-line problem found before training: exit 2 with the --help hint.
class UsageError : public torchbus::ConfigError {
 public:
  using torchbus::ConfigError::ConfigError;
};

struct Flags {
  std::string data = "synthetic";
  std::string model = "auto";
  std::vector<std::int64_t> hidden = {128, 64};
  std::int64_t epochs = 5;
  std::int64_t max_steps = -1;
  std::int64_t batch_size = 64;
  std::int64_t accumulate = 1;
  double lr = 1e-3;
  std::string optimizer = "adam";
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
  bool terminate_on_nan = true;
  double time_limit = 0.0;
};

/// `value` as text with up to six significant digits (3.40282e+38, 0.5).
std::string number_text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

/// Accepts integers in [minimum, maximum], with a message a person can act on.
CLI::Validator integer_in(std::int64_t minimum,
                          std::int64_t maximum = std::numeric_limits<std::int64_t>::max(),
                          const std::string& maximum_meaning = "") {
  const bool bounded = maximum != std::numeric_limits<std::int64_t>::max();
  const std::string range =
      ">= " + std::to_string(minimum) +
      (bounded ? " and <= " + std::to_string(maximum) + maximum_meaning : std::string());
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        std::size_t used = 0;
        long long value = 0;
        try {
          value = std::stoll(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != text.size() || text.empty() || value < minimum || value > maximum) {
          return "expected an integer " + range + ", got '" + text + "'";
        }
        return {};
      },
      range);
}

/// Accepts integers >= `minimum`.
CLI::Validator at_least(std::int64_t minimum) {
  return integer_in(minimum);
}

/// Accepts finite numbers in [minimum, maximum] (`exclusive`: > minimum), named in the message.
CLI::Validator finite_number(double minimum, double maximum, bool exclusive) {
  const std::string range =
      (exclusive ? "> " : ">= ") + number_text(minimum) + " and <= " + number_text(maximum);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        std::size_t used = 0;
        double value = 0;
        try {
          value = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        const bool in_range = std::isfinite(value) &&
                              (exclusive ? value > minimum : value >= minimum) && value <= maximum;
        return used == text.size() && !text.empty() && in_range
                   ? std::string()
                   : "expected a finite number " + range + ", got '" + text + "'";
      },
      range);
}

void describe_flags(CLI::App& app, Flags& flags) {
  app.description(
      "Trains a classifier with torchbus and writes everything under one run directory:\n"
      "train.log (the log) and summary.json (options, final losses and accuracy, wall time,\n"
      "samples/s and a SHA-256 of the final parameters, to compare runs bit for bit).\n"
      "SIGINT (Ctrl-C), SIGTERM, SIGHUP and SIGUSR1 stop at the next step boundary with a\n"
      "checkpoint and a summary; a second signal ends the process at once.\n"
      "Exit codes: 0 done (also after --max-steps, --time-limit, early stopping or a NaN stop),\n"
      "1 runtime failure, 2 command-line usage (found before training), 128+N after signal N\n"
      "(130 SIGINT, 143 SIGTERM, 129 SIGHUP, 138 SIGUSR1).");
  app.add_option(
      "--data", flags.data,
      "synthetic (built in, the default) | mnist:DIR (the four IDX files) | "
      "csv:FILE[:LABEL] (header row, numeric cells, class column LABEL, default 'label')");
  app.add_option("--model", flags.model, "auto (cnn for MNIST, else mlp) | mlp | cnn")
      ->check(CLI::IsMember({"auto", "mlp", "cnn"}));
  app.add_option("--hidden", flags.hidden, "hidden widths of the MLP, e.g. --hidden 128 64")
      ->check(at_least(1));
  app.add_option("--epochs", flags.epochs, "epochs to train")->check(at_least(1));
  app.add_option("--max-steps", flags.max_steps, "stop after this many optimizer steps (-1: none)")
      ->check(at_least(-1));
  app.add_option("--batch-size", flags.batch_size, "samples per batch")->check(at_least(1));
  app.add_option("--accumulate", flags.accumulate, "batches per optimizer step")
      ->check(at_least(1));
  app.add_option("--lr", flags.lr, "learning rate")
      ->check(finite_number(0, std::numeric_limits<float>::max(), /*exclusive=*/true));
  app.add_option("--optimizer", flags.optimizer, "sgd | adam | adamw")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  app.add_option("--seed", flags.seed, "seed of the data, the weights and the shuffling");
  app.add_option("--val-every", flags.val_every, "validate every N epochs (0: never)")
      ->check(at_least(0));
  app.add_option("--val-every-steps", flags.val_every_steps,
                 "also validate every N optimizer steps (0: never)")
      ->check(at_least(0));
  app.add_option("--out", flags.out,
                 "run directory (created); one that already holds a run needs --resume or "
                 "--overwrite");
  const auto hardware_threads = static_cast<std::int64_t>(std::thread::hardware_concurrency());
  app.add_option("--threads", flags.threads,
                 "intra-op threads (0: LibTorch's default; at most the hardware threads, " +
                     std::to_string(hardware_threads) + " here)")
      ->check(integer_in(0, std::max<std::int64_t>(1, hardware_threads),
                         " (the hardware threads of this machine)"));
  app.add_option("--log-every", flags.log_every,
                 "SimpleLogger: log loss, learning rate and step time every N steps")
      ->check(at_least(1));
  app.add_option("--checkpoint-every", flags.checkpoint_every,
                 "ModelCheckpoint: also save every N steps (0: at epoch ends only)")
      ->check(at_least(0));
  app.add_flag(
      "--checkpoints,!--no-checkpoints", flags.checkpoints,
      "ModelCheckpoint: save to OUT/checkpoints at epoch ends and when the run stops (on)");
  auto* resume = app.add_flag(
      "--resume", flags.resume,
      "continue the run in OUT from its newest valid checkpoint of the same identity (the "
      "options that change the result); with no checkpoint yet, start it from scratch");
  app.add_flag("--overwrite", flags.overwrite,
               "replace the run in OUT: remove its outputs (log, checkpoints, metrics, "
               "TensorBoard files, report, summary) first")
      ->excludes(resume);
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
                 "LearningRateScheduler: none | cosine (10% warmup, to 0) | onecycle | step "
                 "(x0.1 every third of the run) | plateau (x0.1 after 2 epochs without a better "
                 "val_loss)")
      ->check(CLI::IsMember({"none", "cosine", "onecycle", "step", "plateau"}));
  app.add_option("--early-stopping", flags.early_stopping,
                 "EarlyStopping: stop after N validations without a better val_loss (0: off)")
      ->check(at_least(0));
  app.add_flag("--terminate-on-nan,!--no-terminate-on-nan", flags.terminate_on_nan,
               "TerminateOnNaN: stop at the first non-finite loss, without its update (on)");
  app.add_option("--time-limit", flags.time_limit,
                 "Timer: stop gracefully after this many seconds of training (0: none)")
      ->check(finite_number(0, 1e9, /*exclusive=*/false));
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
  if (kind == "onecycle") {
    return std::make_shared<LearningRateScheduler>(torchbus::OneCycleOptions(total_steps));
  }
  if (kind == "step") {
    return std::make_shared<LearningRateScheduler>(
        torchbus::StepDecayOptions(std::max<std::int64_t>(1, total_steps / 3)));
  }
  if (kind == "plateau") {
    return std::make_shared<LearningRateScheduler>(torchbus::ReduceOnPlateauOptions().patience(1));
  }
  return nullptr;
}

bool validates(const Flags& flags) {
  return flags.val_every > 0 || flags.val_every_steps > 0;
}

/// Flag combinations that cannot work, found before anything is written.
void check_flag_combinations(const Flags& flags) {
  if (flags.early_stopping > 0 && !validates(flags)) {
    throw UsageError(
        "--early-stopping watches val_loss: it needs --val-every > 0 or --val-every-steps > 0");
  }
  if (flags.scheduler == "plateau" && !validates(flags)) {
    throw UsageError(
        "--scheduler plateau watches val_loss: it needs --val-every > 0 or --val-every-steps > 0");
  }
  if (flags.resume && !flags.checkpoints) {
    throw UsageError("--resume needs checkpoints; drop --no-checkpoints");
  }
}

/// The callbacks that change what the run does, as the flags ask.
void add_steering_callbacks(torchbus::Trainer& trainer, const Flags& flags,
                            std::int64_t batches_per_epoch) {
  if (flags.time_limit > 0) {
    trainer.add(
        std::make_shared<torchbus::Timer>(torchbus::TimerOptions().time_limit(flags.time_limit)));
  }
  if (flags.early_stopping > 0) {
    trainer.add(std::make_shared<torchbus::EarlyStopping>(
        torchbus::EarlyStoppingOptions().patience(flags.early_stopping)));
  }
  const auto steps_per_epoch = (batches_per_epoch + flags.accumulate - 1) / flags.accumulate;
  auto total_steps = steps_per_epoch * flags.epochs;
  if (flags.max_steps > 0) total_steps = std::min(total_steps, flags.max_steps);
  if (auto scheduler = make_scheduler(flags.scheduler, total_steps)) trainer.add(scheduler);
}

/// The run's options, for summary.json and the report.
train::JsonObject describe_run(const Flags& flags) {
  train::JsonObject options;
  options.add("data", flags.data)
      .add("model", flags.model)
      .add("epochs", flags.epochs)
      .add("max_steps", flags.max_steps)
      .add("batch_size", flags.batch_size)
      .add("accumulate", flags.accumulate)
      .add("lr", flags.lr)
      .add("optimizer", flags.optimizer)
      .add("scheduler", flags.scheduler)
      .add("seed", static_cast<std::int64_t>(flags.seed))
      .add("val_every", flags.val_every)
      .add("val_every_steps", flags.val_every_steps)
      .add("threads", static_cast<std::int64_t>(flags.threads));
  return options;
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

/// The run's identity: every option that changes its result ("key=value" lines). Written into
/// identity.txt, every checkpoint and summary.json; --resume continues only a run of the same.
std::string run_identity(const Flags& flags, bool cnn) {
  std::string hidden;
  for (const auto width : flags.hidden)
    hidden += (hidden.empty() ? "" : ",") + std::to_string(width);
  return fmt::format(
      "data={}\nmodel={}\nhidden={}\nbatch_size={}\naccumulate={}\noptimizer={}\nlr={}\n"
      "scheduler={}\nseed={}\nepochs={}\nmax_steps={}\nval_every={}\nval_every_steps={}\n"
      "early_stopping={}\nterminate_on_nan={}\n",
      canonical_data(flags.data), cnn ? "cnn" : "mlp", cnn ? "-" : hidden, flags.batch_size,
      flags.accumulate, flags.optimizer, flags.lr, flags.scheduler, flags.seed, flags.epochs,
      flags.max_steps, flags.val_every, flags.val_every_steps, flags.early_stopping,
      flags.terminate_on_nan ? 1 : 0);
}

/// Sends the torchbus log to the console and to `directory`/train.log (continued on --resume).
void log_to(const fs::path& directory, bool append) {
  auto file =
      std::make_shared<spdlog::sinks::basic_file_sink_mt>((directory / "train.log").string(),
                                                          /*truncate=*/!append);
  torchbus::logger()->sinks().push_back(file);
  torchbus::logger()->flush_on(spdlog::level::info);
}

/// How the run directory is used: a fresh run, or a resume from its checkpoints.
enum class Start { Fresh, Resume };

/// Decides from OUT and the flags whether the run starts fresh or resumes, and clears what a
/// fresh start replaces. Nothing is written before this has accepted the directory.
Start prepare_run_directory(const Flags& flags, const std::string& identity) {
  const fs::path out(flags.out);
  const auto present = train::present_outputs(out);
  auto log = torchbus::logger();
  if (flags.resume || flags.overwrite) {
    torchbus::remove_stale_temporaries(out);  // of a run killed while it replaced a file
  }
  if (!flags.resume) {
    if (!present.empty() && !flags.overwrite) {
      throw UsageError(fmt::format(
          "--out {} already holds a run ({}); pass --resume to continue it or --overwrite to "
          "replace it, or choose another --out",
          flags.out, fmt::join(present, ", ")));
    }
    train::remove_outputs(out, present);
    return Start::Fresh;
  }
  std::string others;
  bool ours = false;
  for (const auto& candidate : torchbus::valid_checkpoints(out / "checkpoints")) {
    if (candidate.header.identity == identity) {
      ours = true;
    } else {
      others +=
          fmt::format("\n  {}: {}", candidate.path.string(),
                      candidate.header.identity.empty()
                          ? std::string("written without a run identity")
                          : torchbus::identity_differences(candidate.header.identity, identity));
    }
  }
  if (ours) {
    if (!others.empty()) log->warn("--resume skips checkpoints of another run:{}", others);
    train::remove_outputs(out, {"summary.json"});  // a resume that fails must not look finished
    return Start::Resume;
  }
  if (!others.empty()) {
    throw torchbus::CheckpointError(fmt::format(
        "cannot resume: every checkpoint in {} belongs to another run (option: checkpoint -> "
        "now):{}\nUse the options of that run, another --out, or --overwrite to replace it.",
        (out / "checkpoints").string(), others));
  }
  const auto recorded = train::read_identity(out);
  if (recorded && *recorded != identity) {
    throw torchbus::Error(fmt::format(
        "cannot resume: {} holds another run, which has no checkpoint ({}); use its options, "
        "another --out, or --overwrite",
        flags.out, torchbus::identity_differences(*recorded, identity)));
  }
  log->warn("--resume: {} holds no checkpoint of this run yet; starting it from scratch",
            (out / "checkpoints").string());
  std::vector<std::string> partial;  // what an attempt killed before its first checkpoint left
  for (const auto& name : present) {
    if (name != "train.log") partial.push_back(name);
  }
  train::remove_outputs(out, partial);
  return Start::Fresh;
}

/// Ends the run during start-up when a stop signal arrived: nothing of a run is written.
void exit_if_signalled_during_startup() {
  if (const int signal = train::received_stop_signal()) {
    torchbus::logger()->warn("{} during start-up: exiting before training, nothing written",
                             train::signal_name(signal));
    std::exit(kExitSignalBase + signal);
  }
}

/// Why the run ended, for summary.json.
std::string stop_reason_of(const torchbus::State& state, const Flags& flags) {
  if (state.stop_requested()) return state.stop_reason();
  if (flags.max_steps >= 0 && state.step >= flags.max_steps) return "max_steps reached";
  return "completed";
}

/// Set once training started: from then on every failure is a runtime failure (exit 1).
bool training_started = false;

int run(const Flags& flags) {
  const fs::path out(flags.out);
  check_flag_combinations(flags);
  if (flags.threads > 0) torch::set_num_threads(flags.threads);

  torch::manual_seed(flags.seed);
  const auto data = train::load_dataset(flags.data, flags.seed);
  auto model = make_model(flags, data);
  const auto identity = run_identity(flags, uses_cnn(flags, data));
  exit_if_signalled_during_startup();

  std::error_code error;
  fs::create_directories(out, error);
  TORCHBUS_CHECK(!error && fs::is_directory(out), torchbus::Error,
                 "cannot create the run directory '", flags.out,
                 "': ", error ? error.message() : "a file of that name exists");
  const auto start = prepare_run_directory(flags, identity);
  {
    std::ofstream probe(out / "train.log", std::ios::app);
    TORCHBUS_CHECK(probe.good(), torchbus::Error, "the run directory '", flags.out,
                   "' is not writable");
  }
  log_to(out, flags.resume);
  auto log = torchbus::logger();
  log->info("data: {}", data.description);
  auto optimizer = make_optimizer(flags, model->parameters());
  const auto options = torchbus::TrainerOptions()
                           .max_epochs(flags.epochs)
                           .max_steps(flags.max_steps)
                           .accumulate_grad_batches(flags.accumulate)
                           .val_every_n_epochs(flags.val_every)
                           .val_every_n_steps(flags.val_every_steps)
                           .seed(flags.seed)
                           .run_identity(identity);
  torchbus::Trainer trainer(
      model, *optimizer,
      [](const at::Tensor& output, const at::Tensor& target) {
        return torch::nn::functional::cross_entropy(output, target);
      },
      options);
  trainer.add(std::make_shared<train::Accuracy>());
  add_steering_callbacks(trainer, flags,
                         (data.train_inputs.size(0) + flags.batch_size - 1) / flags.batch_size);
  const bool resuming = start == Start::Resume;
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
  const auto run_options = describe_run(flags);
  if (outputs.run_report) {
    for (const auto& [key, value] : run_options.text_members()) {
      outputs.run_report->add_option(key, value);
    }
  }
  if (flags.checkpoints) {
    trainer.add(std::make_shared<torchbus::ModelCheckpoint>(
        torchbus::ModelCheckpointOptions(out / "checkpoints")
            .every_n_steps(flags.checkpoint_every)
            .monitor(validates(flags) ? "val_loss" : "")
            .resume(resuming)));
  }

  std::int64_t samples = 0;
  trainer.on(torchbus::Event::BatchEnd, [&](torchbus::State& s) {
    if (!s.cancelled) samples += s.tensors.get("target").size(0);
  });
  trainer.on(torchbus::Event::StepEnd, [](torchbus::State& s) {
    if (const int signal = train::received_stop_signal()) {
      s.request_stop(train::interrupted_reason(signal));
    }
  });
  trainer.on(torchbus::Event::EpochEnd, [&](torchbus::State& s) {
    if (s.error) return;  // the failure is reported instead
    log->info("epoch {} ended: train loss {:.4f} accuracy {:.3f} | val loss {:.4f} accuracy {:.3f}",
              s.epoch + 1, latest_or_nan(s.metrics, "train_loss_epoch"),
              latest_or_nan(s.metrics, "train_accuracy"), latest_or_nan(s.metrics, "val_loss"),
              latest_or_nan(s.metrics, "val_accuracy"));
  });

  train::ShuffledBatches train_batches(data.train_inputs, data.train_targets, flags.batch_size,
                                       /*shuffle=*/true, flags.seed);
  train::ShuffledBatches validation_batches(data.validation_inputs, data.validation_targets,
                                            flags.batch_size, /*shuffle=*/false, flags.seed);
  log->info("training: {} epochs of {} batches of {}, accumulate {}, {} lr {}", flags.epochs,
            train_batches.batches_per_epoch(), flags.batch_size, flags.accumulate, flags.optimizer,
            flags.lr);
  exit_if_signalled_during_startup();
  train::write_identity(out, identity);
  training_started = true;
  const auto started = std::chrono::steady_clock::now();
  trainer.fit_sources(train_batches, validates(flags) ? &validation_batches : nullptr);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  const auto& state = trainer.state();
  const auto stop_reason = stop_reason_of(state, flags);
  const int signal = train::received_stop_signal();
  const bool interrupted = signal != 0 && stop_reason == train::interrupted_reason(signal);
  const int exit_code = interrupted ? kExitSignalBase + signal : 0;
  train::JsonObject summary;
  summary.add("options", run_options)
      .add("identity", identity)
      .add("steps", state.step)
      .add("epochs", state.epoch)
      .add("final_train_loss", latest_or_nan(state.metrics, "train_loss_epoch"))
      .add("final_train_accuracy", latest_or_nan(state.metrics, "train_accuracy"))
      .add("final_val_loss", latest_or_nan(state.metrics, "val_loss"))
      .add("final_val_accuracy", latest_or_nan(state.metrics, "val_accuracy"))
      .add("wall_seconds", seconds)
      .add("samples_per_second", seconds > 0 ? static_cast<double>(samples) / seconds : 0.0)
      .add("stop_reason", stop_reason)
      .add("exit_code", static_cast<std::int64_t>(exit_code))
      .add("params_sha256", train::parameters_sha256(*model));
  torchbus::write_file_atomically(out / "summary.json", summary.str() + "\n");
  log->info("done in {:.1f} s: {} steps, val accuracy {:.3f}, {}; summary in {}", seconds,
            state.step, latest_or_nan(state.metrics, "val_accuracy"), stop_reason,
            (out / "summary.json").string());
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  train::install_stop_signals();
  CLI::App app{"torchbus-train"};
  Flags flags;
  describe_flags(app, flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);
  } catch (const CLI::ParseError& error) {
    std::cerr << "torchbus-train: " << error.what() << "\nRun 'torchbus-train --help' for usage.\n";
    return kExitUsage;
  }
  try {
    return run(flags);
  } catch (const torchbus::ConfigError& error) {
    if (training_started) {
      std::cerr << "torchbus-train: run failed: " << error.what() << "\n";
      return kExitFailed;
    }
    std::cerr << "torchbus-train: " << error.what() << "\nRun 'torchbus-train --help' for usage.\n";
    return kExitUsage;
  } catch (const torchbus::Error& error) {
    std::cerr << "torchbus-train: run failed: " << error.what() << "\n";
    return kExitFailed;
  } catch (const std::exception& error) {  // LibTorch's errors carry a stack trace: one line
    std::cerr << "torchbus-train: run failed: " << torchbus::detail::first_line(error) << "\n";
    return kExitFailed;
  }
}
