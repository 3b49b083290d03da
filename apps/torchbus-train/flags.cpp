#include "flags.hpp"

#include "csv_records.hpp"
#include "exit_status.hpp"
#include "training_device.hpp"

#include <CLI/CLI.hpp>
#include <torchbus/precision.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <sstream>
#include <thread>

namespace train {
namespace {

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

/// The flags of the data, the model and the loop: what is trained, how long, at what rate.
void describe_training_flags(CLI::App& app, Flags& flags) {
  app.add_option(
      "--data", flags.data,
      "synthetic (built in, the default) | mnist:DIR (the four IDX files) | "
      "csv:FILE[:LABEL] (header row, numeric cells, class column LABEL, default 'label'; "
      "quoted as RFC 4180 says)");
  app.add_option("--csv-delimiter", flags.csv_delimiter,
                 "the character between the cells of --data's, --test's and --predict's CSV "
                 "files: ',' (the default), ';', '|', 'tab', ...")
      ->check(
          [](const std::string& text) {
            return parse_csv_delimiter(text)
                       ? std::string()
                       : "expected one character other than a quote or a line break, or 'tab', "
                         "got '" +
                             text + "'";
          },
          "CHAR");
  app.add_option("--task", flags.task,
                 "classification (cross entropy, accuracy: labels are class indices) | regression "
                 "(one output, MSE loss, MSE/MAE/R² reported: a CSV label column of any numbers; "
                 "synthetic and MNIST regress the class index)")
      ->check(CLI::IsMember({"classification", "regression"}));
  app.add_option("--test", flags.test,
                 "after training, test on DATA (a --data source: synthetic and mnist:DIR test on "
                 "their held-out samples, csv:FILE[:LABEL] on every row): test_loss and "
                 "test_accuracy in summary.json, a test row in metrics.csv")
      ->check(non_empty("a data source"));
  app.add_option("--predict", flags.predict,
                 "train nothing: predict every sample of DATA (as --test reads it; a CSV file "
                 "needs no label column) with the --init-from/--weights weights and write "
                 "OUT/predictions.csv (index, class, one probability per class, the label when "
                 "the data has one), rows in DATA's order")
      ->check(non_empty("a data source"));
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
      ->check(CLI::Validator(check_device_text, "auto | cpu | cuda | cuda:N"));
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
}

/// The flags of the run directory and what is written there, resuming and starting from weights.
void describe_output_flags(CLI::App& app, Flags& flags) {
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
  app.add_option("--init-from,--weights", flags.init_from,
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
}

/// The flags of the callbacks that steer the run: schedules, early stopping, weight averages,
/// stops; and the progress bar.
void describe_callback_flags(CLI::App& app, Flags& flags) {
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
  app.add_option("--min-epochs", flags.min_epochs,
                 "train at least this many epochs before --early-stopping may end the run (its "
                 "stop waits until then; 0: none)")
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

}  // namespace

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
  describe_training_flags(app, flags);
  describe_output_flags(app, flags);
  describe_callback_flags(app, flags);
}

bool validates(const Flags& flags) {
  return flags.val_every > 0 || flags.val_every_steps > 0;
}

bool gets_validation_data(const Flags& flags) {
  return validates(flags) || flags.fast_dev_run > 0;
}

void check_flag_combinations(const Flags& flags, const c10::Device& device) {
  if (flags.early_stopping > 0 && !validates(flags)) {
    throw UsageError(
        "--early-stopping watches val_loss: it needs --val-every > 0 or --val-every-steps > 0");
  }
  if (flags.min_epochs > 0 && flags.early_stopping == 0) {
    throw UsageError(
        "--min-epochs holds the stop of --early-stopping: it needs --early-stopping N");
  }
  if (flags.min_epochs > flags.epochs) {
    throw UsageError("--min-epochs " + std::to_string(flags.min_epochs) +
                     " is more than --epochs " + std::to_string(flags.epochs) +
                     " (the run ends at --epochs); expected at most that many");
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
  if (!flags.predict.empty()) {
    if (flags.init_from.empty()) {
      throw UsageError(
          "--predict uses given weights: it needs --weights FILE (a run's OUT/model.pt, or "
          "Python's torch.save(model.state_dict(), FILE))");
    }
    for (const auto& [given, name] :
         {std::pair(flags.resume, "--resume"), std::pair(flags.validate, "--validate"),
          std::pair(flags.find_lr, "--find-lr"),
          std::pair(flags.fast_dev_run > 0, "--fast-dev-run"),
          std::pair(!flags.test.empty(), "--test")}) {
      if (given) throw UsageError(std::string("--predict trains nothing: drop ") + name);
    }
  }
  if (!flags.test.empty() && flags.validate) {
    throw UsageError(
        "--test tests the weights a run trained; --validate trains nothing (to score given "
        "weights on other data, give that data to --data with --validate)");
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

}  // namespace train
