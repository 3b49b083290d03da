// torchbus-train: trains a classifier on synthetic data, MNIST or a CSV file with torchbus.
// Run `torchbus-train --help` for the flags; docs/getting-started.md walks through a run.

#include "accuracy.hpp"
#include "dataset.hpp"
#include "model.hpp"
#include "shuffled_batches.hpp"
#include "summary.hpp"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <CLI/CLI.hpp>
#include <torchbus/callbacks/callbacks.hpp>
#include <torchbus/torchbus.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <iostream>

namespace {

namespace fs = std::filesystem;

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitInterrupted = 130;

std::atomic<bool> interrupted{false};
extern "C" void on_sigint(int /*signal*/) {
  interrupted = true;
}

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
  std::string out = "runs/torchbus-train";
  int threads = 0;
  std::int64_t log_every = 50;
  std::int64_t checkpoint_every = 0;
  bool checkpoints = true;
  bool resume = false;
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

/// Accepts integers >= `minimum`, with a message a person can act on.
CLI::Validator at_least(std::int64_t minimum) {
  return CLI::Validator(
      [minimum](std::string& text) -> std::string {
        std::size_t used = 0;
        long long value = 0;
        try {
          value = std::stoll(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != text.size() || text.empty() || value < minimum) {
          return "expected an integer >= " + std::to_string(minimum) + ", got '" + text + "'";
        }
        return {};
      },
      ">=" + std::to_string(minimum));
}

/// Accepts numbers > 0.
const CLI::Validator kPositiveNumber(
    [](std::string& text) -> std::string {
      std::size_t used = 0;
      double value = 0;
      try {
        value = std::stod(text, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      return used == text.size() && value > 0 ? std::string()
                                              : "expected a number > 0, got '" + text + "'";
    },
    ">0");

void describe_flags(CLI::App& app, Flags& flags) {
  app.description(
      "Trains a classifier with torchbus and writes everything under one run directory:\n"
      "train.log (the log) and summary.json (options, final losses and accuracy, wall time,\n"
      "samples/s and a SHA-256 of the final parameters, to compare runs bit for bit).\n"
      "Ctrl-C stops at the next step boundary.");
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
  app.add_option("--lr", flags.lr, "learning rate")->check(kPositiveNumber);
  app.add_option("--optimizer", flags.optimizer, "sgd | adam | adamw")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  app.add_option("--seed", flags.seed, "seed of the data, the weights and the shuffling");
  app.add_option("--val-every", flags.val_every, "validate every N epochs (0: never)")
      ->check(at_least(0));
  app.add_option("--out", flags.out, "run directory (created; its summary.json is replaced)");
  app.add_option("--threads", flags.threads, "intra-op threads (0: LibTorch's default)")
      ->check(at_least(0));
  app.add_option("--log-every", flags.log_every,
                 "SimpleLogger: log loss, learning rate and step time every N steps")
      ->check(at_least(1));
  app.add_option("--checkpoint-every", flags.checkpoint_every,
                 "ModelCheckpoint: also save every N steps (0: at epoch ends only)")
      ->check(at_least(0));
  app.add_flag("--checkpoints,!--no-checkpoints", flags.checkpoints,
               "ModelCheckpoint: save to OUT/checkpoints at epoch ends and on Ctrl-C (on)");
  app.add_flag("--resume", flags.resume,
               "continue from the newest valid checkpoint in OUT/checkpoints");
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
      ->check(CLI::NonNegativeNumber);
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

torch::nn::Sequential make_model(const Flags& flags, const train::Dataset& data) {
  const bool cnn = flags.model == "cnn" || (flags.model == "auto" && data.images);
  if (cnn) {
    TORCHBUS_CHECK(data.images, torchbus::ConfigError,
                   "--model cnn needs image data (--data mnist:DIR)");
    return train::make_cnn(data.train_inputs.size(2), data.train_inputs.size(3), data.classes);
  }
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

/// The callbacks that change what the run does, as the flags ask.
void add_steering_callbacks(torchbus::Trainer& trainer, const Flags& flags,
                            std::int64_t batches_per_epoch) {
  if (flags.time_limit > 0) {
    trainer.add(
        std::make_shared<torchbus::Timer>(torchbus::TimerOptions().time_limit(flags.time_limit)));
  }
  if (flags.early_stopping > 0) {
    TORCHBUS_CHECK(flags.val_every > 0, torchbus::ConfigError,
                   "--early-stopping watches val_loss: it needs --val-every > 0");
    trainer.add(std::make_shared<torchbus::EarlyStopping>(
        torchbus::EarlyStoppingOptions().patience(flags.early_stopping)));
  }
  const auto steps_per_epoch = (batches_per_epoch + flags.accumulate - 1) / flags.accumulate;
  auto total_steps = steps_per_epoch * flags.epochs;
  if (flags.max_steps > 0) total_steps = std::min(total_steps, flags.max_steps);
  TORCHBUS_CHECK(flags.scheduler != "plateau" || flags.val_every > 0, torchbus::ConfigError,
                 "--scheduler plateau watches val_loss: it needs --val-every > 0");
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
      .add("threads", static_cast<std::int64_t>(flags.threads));
  return options;
}

/// Sends the torchbus log to the console and to `directory`/train.log (continued on --resume).
void log_to(const fs::path& directory, bool append) {
  auto file =
      std::make_shared<spdlog::sinks::basic_file_sink_mt>((directory / "train.log").string(),
                                                          /*truncate=*/!append);
  torchbus::logger()->sinks().push_back(file);
  torchbus::logger()->flush_on(spdlog::level::info);
}

int run(const Flags& flags) {
  const fs::path out(flags.out);
  std::error_code error;
  if (flags.resume) {
    TORCHBUS_CHECK(flags.checkpoints, torchbus::ConfigError,
                   "--resume needs checkpoints; drop --no-checkpoints");
    TORCHBUS_CHECK(torchbus::newest_valid_checkpoint(out / "checkpoints").has_value(),
                   torchbus::CheckpointError, "--resume: no valid checkpoint in ",
                   (out / "checkpoints").string());
  }
  fs::create_directories(out, error);
  TORCHBUS_CHECK(!error && fs::is_directory(out), torchbus::Error,
                 "cannot create the run directory '", flags.out,
                 "': ", error ? error.message() : "a file of that name exists");
  fs::remove(out / "summary.json", error);  // a failed run must not look finished
  {
    std::ofstream probe(out / "train.log", std::ios::app);
    TORCHBUS_CHECK(probe.good(), torchbus::Error, "the run directory '", flags.out,
                   "' is not writable");
  }
  log_to(out, flags.resume);
  auto log = torchbus::logger();
  if (flags.threads > 0) torch::set_num_threads(flags.threads);

  torch::manual_seed(flags.seed);
  const auto data = train::load_dataset(flags.data, flags.seed);
  log->info("data: {}", data.description);
  auto model = make_model(flags, data);
  auto optimizer = make_optimizer(flags, model->parameters());
  const auto options = torchbus::TrainerOptions()
                           .max_epochs(flags.epochs)
                           .max_steps(flags.max_steps)
                           .accumulate_grad_batches(flags.accumulate)
                           .val_every_n_epochs(flags.val_every)
                           .seed(flags.seed);
  torchbus::Trainer trainer(
      model, *optimizer,
      [](const at::Tensor& output, const at::Tensor& target) {
        return torch::nn::functional::cross_entropy(output, target);
      },
      options);
  trainer.add(std::make_shared<train::Accuracy>());
  add_steering_callbacks(trainer, flags,
                         (data.train_inputs.size(0) + flags.batch_size - 1) / flags.batch_size);
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
                                                   .append(flags.resume)
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
            .monitor(flags.val_every > 0 ? "val_loss" : "")
            .resume(flags.resume)));
  }

  std::int64_t samples = 0;
  trainer.on(torchbus::Event::BatchEnd, [&](torchbus::State& s) {
    if (!s.cancelled) samples += s.tensors.get("target").size(0);
  });
  trainer.on(torchbus::Event::StepEnd, [](torchbus::State& s) {
    if (interrupted) s.request_stop("interrupted (SIGINT)");
  });
  trainer.on(torchbus::Event::EpochEnd, [&](torchbus::State& s) {
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
  std::signal(SIGINT, on_sigint);
  const auto start = std::chrono::steady_clock::now();
  trainer.fit_sources(train_batches, flags.val_every > 0 ? &validation_batches : nullptr);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const auto& state = trainer.state();
  train::JsonObject summary;
  summary.add("options", run_options)
      .add("steps", state.step)
      .add("epochs", state.epoch)
      .add("final_train_loss", latest_or_nan(state.metrics, "train_loss_epoch"))
      .add("final_train_accuracy", latest_or_nan(state.metrics, "train_accuracy"))
      .add("final_val_loss", latest_or_nan(state.metrics, "val_loss"))
      .add("final_val_accuracy", latest_or_nan(state.metrics, "val_accuracy"))
      .add("wall_seconds", seconds)
      .add("samples_per_second", seconds > 0 ? static_cast<double>(samples) / seconds : 0.0)
      .add("stop_reason", state.stop_reason())
      .add("params_sha256", train::parameters_sha256(*model));
  torchbus::write_file_atomically(out / "summary.json", summary.str() + "\n");
  log->info("done in {:.1f} s: {} steps, val accuracy {:.3f}; summary in {}", seconds, state.step,
            latest_or_nan(state.metrics, "val_accuracy"), (out / "summary.json").string());
  return state.stop_requested() && interrupted ? kExitInterrupted : 0;
}

}  // namespace

int main(int argc, char** argv) {
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
    std::cerr << "torchbus-train: " << error.what() << "\nRun 'torchbus-train --help' for usage.\n";
    return kExitUsage;
  } catch (const std::exception& error) {
    std::cerr << "torchbus-train: run failed: " << error.what() << "\n";
    return kExitFailed;
  }
}
