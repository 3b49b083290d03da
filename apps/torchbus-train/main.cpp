// torchbus-train: trains a classifier on synthetic data, MNIST or a CSV file with torchbus.
// Run `torchbus-train --help` for the flags; docs/getting-started.md walks through a run. This file
// keeps the order of a run; what each step does is in the unit its name says (docs/architecture.md,
// "The main job").

#include "accuracy.hpp"
#include "blas_threads.hpp"
#include "csv_records.hpp"
#include "dataset.hpp"
#include "exit_status.hpp"
#include "flags.hpp"
#include "lr_sweep.hpp"
#include "predict.hpp"
#include "process_allocator.hpp"
#include "rank_agreement.hpp"
#include "run_callbacks.hpp"
#include "run_directory.hpp"
#include "run_identity.hpp"
#include "run_lock.hpp"
#include "run_segments.hpp"
#include "run_setup.hpp"
#include "startup_signals.hpp"
#include "steering.hpp"
#include "stop_signals.hpp"
#include "summary.hpp"
#include "training_device.hpp"
#include "weights_files.hpp"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <CLI/CLI.hpp>
#include <torchbus/callbacks/callbacks.hpp>
#include <torchbus/torchbus.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <optional>

namespace {

namespace fs = std::filesystem;
using train::exit_if_signalled_during_startup;
using train::Flags;

/// Set once training started: from then on every failure is a runtime failure (exit 1).
bool training_started = false;

/// Sends the torchbus log to the console and to `directory`/train.log (continued on --resume).
void log_to(const fs::path& directory, bool append) {
  auto file =
      std::make_shared<spdlog::sinks::basic_file_sink_mt>((directory / "train.log").string(),
                                                          /*truncate=*/!append);
  torchbus::logger()->sinks().push_back(file);
  torchbus::logger()->flush_on(spdlog::level::info);
}

/// What every rank sets up before OUT is touched, the same on each.
struct SetUp {
  train::TrainingDevice device;
  train::Dataset data;
  torch::nn::Sequential model{nullptr};
  std::string identity;
  std::string split_identity;    // as runs before global_batch named it; they still resume
  std::string init_from_sha256;  // of the --init-from file (empty: none)
  std::optional<torchbus::LRFinderResult> lr_found;  // --find-lr
  bool lr_recorded = false;  // --find-lr --resume: lr_found read back from OUT, not swept again
  std::vector<std::shared_ptr<torchbus::Callback>> steering;  // built and checked before OUT
  std::optional<train::HeldOut> test_data;                    // --test
  std::optional<train::HeldOut> predict_data;                 // --predict
};

/// Checks the flags on this machine, loads the data, makes the model (from --init-from's weights),
/// the steering callbacks and the run's identity; --find-lr sets the lr it found into `flags`.
SetUp set_up(Flags& flags, const torchbus::ProcessGroup& group) {
  const int world_size = group.world_size();
  SetUp run;
  run.device = train::resolve_device(flags.device, world_size);
  train::check_flag_combinations(flags, run.device.device);
  if (flags.threads > 0) {
    torch::set_num_threads(flags.threads);
    train::set_blas_threads(flags.threads);
  }
  torchbus::logger()->info("threads: {} intra-op ({}, {}), BLAS: {}", torch::get_num_threads(),
                           AT_PARALLEL_OPENMP ? "OpenMP" : "LibTorch's own pool",
                           flags.threads > 0 ? "--threads" : "the libraries' default",
                           train::describe_blas());
  torch::manual_seed(flags.seed);
  const auto csv_delimiter = *train::parse_csv_delimiter(flags.csv_delimiter);
  run.data = train::load_dataset(flags.data, flags.seed, flags.task == "regression", csv_delimiter);
  train::check_shardable(flags, run.data, world_size);
  const auto planned = train::rank_batches(flags, run.data, group, run.device.device);
  train::check_batch_limits(flags, planned);
  run.steering =
      train::configured_steering(flags, run.device.device, planned.train.batches_per_epoch());
  run.model = train::make_model(flags, run.data);
  if (!flags.init_from.empty()) {
    run.init_from_sha256 = train::initialize_from(flags.init_from, *run.model);
  }
  if (!flags.test.empty()) {
    run.test_data = train::load_held_out_for("--test", flags.test, flags.seed,
                                             /*labels_required=*/true, run.data, csv_delimiter);
    const auto samples = run.test_data->inputs.size(0);
    TORCHBUS_CHECK(samples >= world_size, torchbus::DataError, "--test ", flags.test, " has ",
                   samples, " samples; each of the ", world_size,
                   " ranks tests a share of them: expected at least ", world_size);
  }
  if (!flags.predict.empty()) {
    run.predict_data = train::load_held_out_for("--predict", flags.predict, flags.seed,
                                                /*labels_required=*/false, run.data, csv_delimiter);
  }
  const train::IdentitiesOf identities_of = [&](const Flags& given) {
    const bool cnn = train::uses_cnn(given, run.data);
    return std::array{train::run_identity(given, cnn, world_size, run.init_from_sha256,
                                          train::BatchInIdentity::Global),
                      train::run_identity(given, cnn, world_size, run.init_from_sha256,
                                          train::BatchInIdentity::Split)};
  };
  if (flags.find_lr) {
    run.lr_found = train::recorded_lr_sweep(flags, world_size, identities_of);
    run.lr_recorded = run.lr_found.has_value();
    if (!run.lr_found) {
      run.lr_found = train::find_lr(flags, run.data, run.model, world_size, run.device.device);
    }
    flags.lr = *run.lr_found->suggestion;  // in the identity, the options and the summary
  }
  const auto identities = identities_of(flags);
  run.identity = identities[0];
  run.split_identity = identities[1];
  exit_if_signalled_during_startup();
  return run;
}

/// Logs what the run trains on and with: its data, weights, device, memory and stop signals.
void log_run(const Flags& flags, const SetUp& run, bool resuming, const std::string& allocator) {
  auto log = torchbus::logger();
  log->info("data: {}", run.data.description);
  for (const auto& warning : run.data.warnings) log->warn("data: {}", warning);
  if (!resuming && !run.init_from_sha256.empty()) {
    log->info("weights: from {} (SHA-256 {})", flags.init_from, run.init_from_sha256);
  }
  log->info("device: {} ({})", run.device.device.str(), run.device.how);
  log->info("memory: {}", allocator);
  if (flags.channels_last && !train::uses_cnn(flags, run.data)) {
    // Accepted (it is in the identity of runs that gave it), but said: it changes nothing here.
    log->warn(
        "--channels-last changes nothing for the MLP, which has no image layers; it lays out "
        "the CNN's (--model cnn)");
  }
  if (const auto reclaimed = train::reclaimed_stop_signals(); !reclaimed.empty()) {
    log->info("stop signals: {} taken back from a library loaded with LibTorch", reclaimed);
  }
}

/// Why the run ended, for summary.json.
std::string stop_reason_of(const torchbus::State& state, const Flags& flags) {
  if (state.stop_requested()) return state.stop_reason();
  if (flags.fast_dev_run == 0 && flags.max_steps >= 0 && state.step >= flags.max_steps) {
    return "max_steps reached";
  }
  return "completed";
}

/// What a training run works with, once its trainer has every callback.
struct Training {
  torchbus::Trainer& trainer;
  const Flags& flags;
  const SetUp& run;
  train::RankBatches& batches;
  std::shared_ptr<torchbus::ProcessGroup> group;
  std::shared_ptr<train::RunSegments> segments;
  std::shared_ptr<torchbus::SWA> swa;  // --swa-start: ends the run with its average
  train::JsonObject run_options;
  bool writes_outputs = false;
  std::int64_t samples = 0;  // trained by this rank, counted at BatchEnd
};

/// How a fit ended.
struct FitEnd {
  double seconds = 0;
  std::string stop_reason;
  int exit_code = 0;
  std::optional<train::ValidationResult> average_validation;  // of SWA's average, when validated
};

/// Fits; a stop signal that stopped any rank ends every rank with its code. The validations saw
/// the trained weights; SWA put its average in at the end: validated once more, so that the
/// summary's final_val_* describe model.pt (an interrupted run exits at once and reports its last
/// validation).
FitEnd fit(Training& training, std::chrono::steady_clock::time_point started) {
  const auto& flags = training.flags;
  auto& batches = training.batches;
  FitEnd end;
  training.trainer.fit_sources(batches.train,
                               train::gets_validation_data(flags) ? &batches.validation : nullptr);
  end.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  end.stop_reason = stop_reason_of(training.trainer.state(), flags);
  const int signal = train::received_stop_signal();
  const bool interrupted = signal != 0 && end.stop_reason == train::interrupted_reason(signal);
  // The others stopped because that rank asked (at the same step).
  if (const auto signalled = train::first_nonzero(*training.group, interrupted ? signal : 0)) {
    end.stop_reason = train::interrupted_reason(static_cast<int>(signalled->second));
    end.exit_code = train::kExitSignalBase + static_cast<int>(signalled->second);
  }
  const auto& swa = training.swa;
  if (swa && !swa->average().empty() && end.exit_code == 0 && train::gets_validation_data(flags)) {
    end.average_validation = train::validate_final_weights(
        flags, training.run.model, batches.validation, training.group, training.run.device.device);
    torchbus::logger()->info(
        "SWA: the average of {} epochs (model.pt): val loss {:.4f} accuracy {:.3f}",
        swa->averaged(), end.average_validation->loss, end.average_validation->accuracy);
  }
  return end;
}

/// --test: the trained weights (model.pt's) on the test data, every rank its share.
train::ValidationResult test_trained(Training& training) {
  const auto& data = *training.run.test_data;
  const auto& flags = training.flags;
  train::ShuffledBatches batches(
      data.inputs, data.targets, flags.batch_size, /*shuffle=*/false, flags.seed,
      {training.group->rank(), training.group->world_size(), /*equal_sizes=*/false},
      /*pin_memory=*/training.run.device.device.is_cuda());
  train::ValidationResult result;
  result.loss = training.trainer.test_source(batches);
  result.accuracy = train::latest_or_nan(training.trainer.state().metrics, "test_accuracy");
  const auto& metrics = training.trainer.state().metrics;
  torchbus::logger()->info(
      "test on {}: loss {:.4f} {}", data.description, result.loss,
      flags.task == "regression"
          ? fmt::format("mae {:.4f}", train::latest_or_nan(metrics, "test_mae"))
          : fmt::format("accuracy {:.3f}", result.accuracy));
  return result;
}

/// Trains, then (rank 0) writes model.pt and summary.json; logs how the run ended. Returns the
/// exit code.
int train_and_summarize(Training& training) {
  const fs::path out(training.flags.out);
  auto& trainer = training.trainer;
  const auto& state = trainer.state();
  auto log = torchbus::logger();
  training_started = true;
  const auto started = std::chrono::steady_clock::now();
  // The validation the summary reports: of the weights model.pt holds when it was run.
  const auto final_validation = [&](const std::optional<train::ValidationResult>& average) {
    return average ? *average
                   : train::ValidationResult{train::latest_or_nan(state.metrics, "val_loss"),
                                             train::latest_or_nan(state.metrics, "val_accuracy")};
  };
  std::optional<train::ValidationResult> tested;  // --test's result
  const auto write_summary = [&](const std::string& stop_reason, int exit_code, double seconds,
                                 const std::optional<train::ValidationResult>& average) {
    train::TrainingSummary summary;
    summary.options = training.run_options;
    summary.identity = training.run.identity;
    summary.world_size = training.group->world_size();
    summary.segments = training.segments->to_json();
    summary.device = training.run.device.device.str();
    summary.final_val_loss = final_validation(average).loss;
    summary.final_val_accuracy = final_validation(average).accuracy;
    summary.wall_seconds = seconds;
    summary.samples = training.samples;
    summary.stop_reason = stop_reason;
    summary.exit_code = exit_code;
    if (training.run.lr_found) summary.lr_found = training.flags.lr;
    if (tested) {
      summary.test_loss = tested->loss;
      summary.test_accuracy = tested->accuracy;
    }
    train::write_training_summary(out / "summary.json", summary, trainer, *training.run.model);
  };
  FitEnd end;
  try {
    end = fit(training, started);
  } catch (const torchbus::DistributedError& error) {
    // Another rank failed or died: rank 0 records how far the run got, if it can.
    if (training.writes_outputs && training.group->world_size() > 1) {
      try {
        const auto seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        write_summary(std::string("failed: ") + error.what(), train::kExitFailed, seconds, {});
      } catch (const std::exception& failure) {
        log->error("cannot write the summary of the failed run: {}", failure.what());
      }
    }
    throw;
  }
  if (training.writes_outputs) {
    // The final weights (the EMA or SWA average when on), as summary.json's params_sha256.
    torchbus::save_state_dict(*training.run.model, out / "model.pt");
  }
  // A run that was interrupted is tested when it is resumed and finishes. A test that fails
  // leaves the trained run's summary (without test figures) before its error ends the process.
  if (training.run.test_data && end.exit_code == 0) {
    try {
      tested = test_trained(training);
    } catch (...) {
      if (training.writes_outputs) {
        write_summary(end.stop_reason, end.exit_code, end.seconds, end.average_validation);
      }
      throw;
    }
  }
  if (training.writes_outputs) {
    write_summary(end.stop_reason, end.exit_code, end.seconds, end.average_validation);
  }
  const auto& failures = trainer.bus().subscriber_failures();
  const auto disabled = std::count_if(failures.begin(), failures.end(),
                                      [](const auto& failure) { return failure.disabled; });
  log->info(
      "done in {:.1f} s: {} steps, {}, {}{}{}", end.seconds, state.step,
      training.flags.task == "regression"
          ? fmt::format("val mae {:.4f}", train::latest_or_nan(state.metrics, "val_mae"))
          : fmt::format("val accuracy {:.3f}", final_validation(end.average_validation).accuracy),
      end.stop_reason,
      disabled == 0 ? std::string()
                    : fmt::format("; {} subscriber(s) disabled after they threw (listed "
                                  "above and in summary.json)",
                                  disabled),
      training.writes_outputs ? "; summary in " + (out / "summary.json").string() : std::string());
  return end.exit_code;
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
  SetUp run;
  train::run_agreed(*group, [&] { run = set_up(flags, *group); });

  // --predict trains nothing and writes OUT/predictions.csv alone.
  if (run.predict_data) {
    training_started = true;  // its checks are done: a failure from here on is a runtime one
    return train::predict(flags, run.model, *run.predict_data, group, run.device.device);
  }

  // Rank 0 decides how the run uses OUT; every rank resumes from the checkpoint it chose.
  std::optional<train::RunLock> lock;
  train::RunStart start;
  train::run_agreed(*group, [&] {
    if (writes_outputs) {
      start = train::take_run_directory(flags, run.identity, run.split_identity, world_size, lock);
    }
  });
  const fs::path resume_from = train::broadcast_text(*group, start.resume_from.string());
  // The identity the run goes on under: its checkpoints' (an older run's keeps its form).
  if (const auto kept = train::broadcast_text(*group, start.identity); !kept.empty()) {
    run.identity = kept;
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
  auto optimizer = train::make_optimizer(flags, run.model->parameters());
  torchbus::Trainer trainer(
      run.model, *optimizer, train::loss_of(flags),
      train::trainer_options(flags, run.device.device).run_identity(run.identity));
  trainer.set_process_group(group);  // the log lines of a world of several name their rank
  if (resuming) trainer.resume_from(resume_from);
  log_run(flags, run, resuming, allocator);
  auto batches = train::rank_batches(flags, run.data, *group, run.device.device);
  train::add_task_metrics(trainer, flags);
  trainer.add(std::make_shared<torchbus::ModelSummary>());  // the layers, in the log as it starts
  Training training{trainer, flags, run, batches, group, nullptr, nullptr, {}, writes_outputs};
  training.segments = std::make_shared<train::RunSegments>(
      train::RunSegment{0, world_size, flags.batch_size, flags.accumulate});
  trainer.add(training.segments);
  for (auto& callback : run.steering) {
    if (auto averaging = std::dynamic_pointer_cast<torchbus::SWA>(callback))
      training.swa = averaging;
    trainer.add(std::move(callback));
  }
  training.run_options = train::describe_run(flags, train::uses_cnn(flags, run.data));
  // --validate evaluates as the run's validations do (with the EMA or SWA average when on).
  if (flags.validate) {
    if (resuming) trainer.load_checkpoint(resume_from);
    std::optional<fs::path> summary_file;
    if (writes_outputs) summary_file = out / (resuming ? "validation.json" : "summary.json");
    return train::validate_weights(trainer, *run.model, batches.validation,
                                   resuming ? resume_from.string() : flags.init_from,
                                   training.run_options, run.identity, world_size, summary_file);
  }
  train::add_outputs(trainer, flags, resuming, training.run_options, world_size,
                     {run.lr_found, run.lr_recorded, writes_outputs});
  train::subscribe_run(trainer, training.samples);
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
    if (writes_outputs) train::write_identity(out, run.identity);
  });
  return train_and_summarize(training);
}

}  // namespace

/// The program, loaded and run by the torchbus-train executable (launcher.cpp) once it has
/// installed the stop-signal handlers.
extern "C" int torchbus_train_main(int argc, char** argv) {
  CLI::App app{"torchbus-train"};
  Flags flags;
  train::describe_flags(app, flags);
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
