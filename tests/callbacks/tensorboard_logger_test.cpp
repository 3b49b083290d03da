// TensorBoardLogger and EventFileWriter: the event file parsed back (both CRCs of every record
// checked) equals what was logged; the background writer drops nothing and reports its errors;
// bad input.

#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <support/captured_log.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <support/recorder.hpp>
#include <support/scratch.hpp>
#include <support/tfrecord_reader.hpp>
#include <torchbus/callbacks/event_file_writer.hpp>
#include <torchbus/callbacks/tensorboard_logger.hpp>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <regex>

using namespace torchbus;
using namespace torchbus::testing;
namespace fs = std::filesystem;

namespace {

/// The value of `metric` recorded at `step`.
double at_step(const MetricHistory& history, const std::string& metric, std::int64_t step) {
  for (const auto& point : history.series(metric)) {
    if (point.step == step) return point.value;
  }
  BOOST_FAIL("no point of " << metric << " at step " << step);
  return 0;
}

/// The steps of a series read from the file.
template <typename Value>
std::vector<std::int64_t> steps_of(const std::vector<std::pair<std::int64_t, Value>>& series) {
  std::vector<std::int64_t> steps;
  for (const auto& point : series) steps.push_back(point.first);
  return steps;
}

/// What a test knows about a batch's "output" tensor.
struct OutputStats {
  double numel = 0, sum = 0, min = 0, max = 0;
};

/// The only event file in `directory`, parsed.
std::vector<EventRead> only_file_events(const fs::path& directory) {
  const auto files = event_files(directory);
  BOOST_TEST_REQUIRE(files.size() == 1u);
  return read_events(files[0]);
}

TensorBoardLoggerOptions options_in(const TempDir& dir) {
  return TensorBoardLoggerOptions((dir.path / "run").string());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(tensorboard_logger)

BOOST_AUTO_TEST_CASE(the_file_holds_what_was_logged) {
  TempDir dir("tensorboard");
  Run run(TrainerOptions().max_epochs(2));
  // What the logger should see of "output" (a batch tensor) at each step.
  std::map<std::int64_t, OutputStats> outputs;
  run.trainer.on(
      Event::BatchEnd,
      [&](State& state) {
        const auto output = state.tensors.get("output").detach().to(torch::kDouble);
        outputs[state.step + 1] = {static_cast<double>(output.numel()), output.sum().item<double>(),
                                   output.min().item<double>(), output.max().item<double>()};
      },
      -100);
  auto logger = std::make_shared<TensorBoardLogger>(
      options_in(dir).step_freq(2).histogram_freq(3).tensors_to_log({"loss", "output"}));
  run.trainer.add(logger);
  auto train = make_batches(6, 4);
  auto validation = make_batches(2, 4, 4, 3, 11);
  run.trainer.fit(train, validation);

  // One file, named as TensorBoard names them.
  const auto files = event_files(dir.path / "run");
  BOOST_TEST_REQUIRE(files.size() == 1u);
  BOOST_TEST(files[0].string() == logger->file());
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::string escaped_host = std::regex_replace(host, std::regex(R"(\.)"), R"(\.)");
  const std::regex name(R"(events\.out\.tfevents\.\d{10}\.)" + escaped_host + R"(\.)" +
                        std::to_string(::getpid()) + R"(\.\d+)");
  BOOST_TEST_MESSAGE("event file: " << files[0].filename());
  BOOST_TEST(std::regex_match(files[0].filename().string(), name));

  const auto events = read_events(files[0]);
  BOOST_TEST_REQUIRE(events.size() > 1u);
  BOOST_TEST(events[0].file_version == "brain.Event:2");
  BOOST_TEST(!events[0].has_summary);
  for (std::size_t i = 1; i < events.size(); ++i) {
    BOOST_TEST(events[i].has_summary);
    BOOST_TEST(events[i].wall_time > 1.6e9);  // seconds since 1970
    BOOST_TEST(events[i].wall_time >= events[i - 1].wall_time);
    BOOST_TEST(!events[i].session_status);  // not a resumed run
  }

  const auto& history = run.trainer.state().metrics;
  // Scalars every 2 steps: the step's loss (as a float, like TensorBoard) and the learning rate.
  const auto loss = scalars_of(events, "train/loss");
  BOOST_TEST(steps_of(loss) == (std::vector<std::int64_t>{2, 4, 6, 8, 10, 12}),
             boost::test_tools::per_element());
  for (const auto& [step, value] : loss) {
    BOOST_TEST(value == static_cast<float>(at_step(history, "train_loss", step)));
  }
  const auto lr = scalars_of(events, "train/lr");
  BOOST_TEST(steps_of(lr) == steps_of(loss), boost::test_tools::per_element());
  for (const auto& point : lr) BOOST_TEST(point.second == 0.1f);

  // Histograms every 3 steps, of the output of the step's batch.
  const auto histograms = histograms_of(events, "train/output");
  BOOST_TEST(steps_of(histograms) == (std::vector<std::int64_t>{3, 6, 9, 12}),
             boost::test_tools::per_element());
  for (const auto& [step, histogram] : histograms) {
    const auto& expected = outputs.at(step);
    BOOST_TEST(histogram.num == expected.numel);
    BOOST_TEST(histogram.sum == expected.sum, boost::test_tools::tolerance(1e-9));
    BOOST_TEST(histogram.min == expected.min);
    BOOST_TEST(histogram.max == expected.max);
    BOOST_TEST_REQUIRE(histogram.bucket_limit.size() == 31u);  // 30 + the leading empty one
    BOOST_TEST_REQUIRE(histogram.bucket.size() == 31u);
    BOOST_TEST(histogram.bucket_limit.front() == expected.min);
    BOOST_TEST(histogram.bucket_limit.back() == expected.max);
    BOOST_TEST(histogram.bucket.front() == 0.0);
    double counted = 0;
    for (double count : histogram.bucket) counted += count;
    BOOST_TEST(counted == expected.numel);
    BOOST_TEST(std::is_sorted(histogram.bucket_limit.begin(), histogram.bucket_limit.end()));
  }
  BOOST_TEST(scalars_of(events, "train/output").empty());

  // Epochs: time and count at each EpochEnd.
  const auto completed = scalars_of(events, "epoch/completed");
  BOOST_TEST_REQUIRE(completed.size() == 2u);
  BOOST_TEST(completed[0].first == 6);
  BOOST_TEST(completed[0].second == 1.0f);
  BOOST_TEST(completed[1].first == 12);
  BOOST_TEST(completed[1].second == 2.0f);
  const auto times = scalars_of(events, "epoch/time_s");
  BOOST_TEST_REQUIRE(times.size() == 2u);
  for (const auto& point : times) BOOST_TEST((point.second > 0.0f && point.second < 60.0f));

  // Metrics: each point at its own step; train_loss is per step (train/loss) and not repeated.
  for (const char* metric : {"val_loss", "train_loss_epoch"}) {
    const auto points = scalars_of(events, std::string("metrics/") + metric);
    const auto& series = history.series(metric);
    BOOST_TEST_REQUIRE(points.size() == series.size());
    for (std::size_t i = 0; i < points.size(); ++i) {
      BOOST_TEST(points[i].first == series[i].step);
      BOOST_TEST(points[i].second == static_cast<float>(series[i].value));
    }
  }
  BOOST_TEST(scalars_of(events, "metrics/val_loss").size() == 2u);
  BOOST_TEST(scalars_of(events, "metrics/train_loss").empty());
  BOOST_TEST(tags_of(events).size() == 7u);
}

// Step scalars are handed to the writer in bursts (every 128 values) and before any other event:
// across many bursts every step is written once, in step order, before its epoch's events.
BOOST_AUTO_TEST_CASE(scalars_handed_over_in_bursts_keep_every_step_in_order) {
  TempDir dir("tensorboard");
  Run run(TrainerOptions().max_epochs(3));
  run.trainer.add(std::make_shared<TensorBoardLogger>(options_in(dir).step_freq(1)));
  auto train = make_batches(70, 4);  // 210 steps: 420 step values
  run.trainer.fit(train);

  const auto events = only_file_events(dir.path / "run");
  std::vector<std::int64_t> expected(210);
  for (std::size_t i = 0; i < expected.size(); ++i) expected[i] = static_cast<std::int64_t>(i + 1);
  const auto loss = scalars_of(events, "train/loss");
  BOOST_TEST(steps_of(loss) == expected, boost::test_tools::per_element());
  BOOST_TEST(steps_of(scalars_of(events, "train/lr")) == expected,
             boost::test_tools::per_element());
  const auto& history = run.trainer.state().metrics;
  for (const auto& [step, value] : loss) {
    BOOST_TEST(value == static_cast<float>(at_step(history, "train_loss", step)));
  }
  // In the file, the steps come in order and each epoch's events after its last step.
  std::int64_t last_step = 0;
  for (std::size_t i = 1; i < events.size(); ++i) {
    BOOST_TEST(events[i].step >= last_step);
    BOOST_TEST(events[i].wall_time >= events[i - 1].wall_time);
    last_step = events[i].step;
  }
  BOOST_TEST(
      steps_of(scalars_of(events, "epoch/completed")) == (std::vector<std::int64_t>{70, 140, 210}),
      boost::test_tools::per_element());
}

// A checkpoint hands the recorded steps to the writer and waits until they are in the file, so a
// run killed after it keeps every step the checkpoint covers.
BOOST_AUTO_TEST_CASE(a_checkpoint_writes_every_step_recorded_so_far) {
  TempDir dir("tensorboard");
  Run run;
  auto logger = std::make_shared<TensorBoardLogger>(options_in(dir).step_freq(1));
  run.trainer.add(logger);
  std::vector<std::int64_t> in_file;
  run.trainer.on(
      Event::StepEnd,
      [&](State& state) {
        if (state.step != 5) return;
        run.trainer.checkpoint_bytes();  // after the loggers' StepEnd, as ModelCheckpoint
        in_file = steps_of(scalars_of(read_events(logger->file()), "train/loss"));
      },
      200);
  auto train = make_batches(8, 4);
  run.trainer.fit(train);
  BOOST_TEST(in_file == (std::vector<std::int64_t>{1, 2, 3, 4, 5}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(empty_tensors_to_log_writes_only_the_lr_epochs_and_metrics) {
  TempDir dir("tensorboard");
  Run run(TrainerOptions().max_epochs(2));
  run.trainer.add(
      std::make_shared<TensorBoardLogger>(options_in(dir).step_freq(1).tensors_to_log({})));
  auto train = make_batches(3, 4);
  run.trainer.fit(train);

  const auto events = only_file_events(dir.path / "run");
  BOOST_TEST(
      tags_of(events) == (std::vector<std::string>{"train/lr", "epoch/time_s", "epoch/completed",
                                                   "metrics/train_loss_epoch"}),
      boost::test_tools::per_element());
  BOOST_TEST(scalars_of(events, "train/lr").size() == 6u);
}

BOOST_AUTO_TEST_CASE(metrics_to_log_and_switches_choose_what_is_written) {
  TempDir dir("tensorboard");
  Run run(TrainerOptions().max_epochs(1));
  run.trainer.on(
      Event::EpochEnd, [](State& state) { state.record_metric("accuracy", 0.75); }, -100);
  run.trainer.add(std::make_shared<TensorBoardLogger>(
      options_in(dir).step_freq(1).log_lr(false).log_epoch(false).metrics_to_log({"accuracy"})));
  auto train = make_batches(2, 4);
  run.trainer.fit(train);

  const auto events = only_file_events(dir.path / "run");
  BOOST_TEST(tags_of(events) == (std::vector<std::string>{"train/loss", "metrics/accuracy"}),
             boost::test_tools::per_element());
  const auto accuracy = scalars_of(events, "metrics/accuracy");
  BOOST_TEST_REQUIRE(accuracy.size() == 1u);
  BOOST_TEST(accuracy[0].first == 2);
  BOOST_TEST(accuracy[0].second == 0.75f);
}

BOOST_AUTO_TEST_CASE(a_standalone_evaluation_writes_its_metrics_at_eval_end) {
  TempDir dir("tensorboard");
  Run run;
  auto logger = std::make_shared<TensorBoardLogger>(options_in(dir).step_freq(1));
  run.trainer.add(logger);
  auto train = make_batches(3, 4);
  run.trainer.fit(train);
  const auto first = logger->file();
  auto validation = make_batches(2, 4, 4, 3, 11);
  const double val_loss = run.trainer.evaluate(validation);

  // Each action writes its own file.
  BOOST_TEST(event_files(dir.path / "run").size() == 2u);
  BOOST_TEST(logger->file() != first);
  const auto events = read_events(logger->file());
  BOOST_TEST(scalars_of(events, "train/loss").empty());
  const auto points = scalars_of(events, "metrics/val_loss");
  BOOST_TEST_REQUIRE(points.size() == 1u);
  BOOST_TEST(points[0].first == 3);
  BOOST_TEST(points[0].second == static_cast<float>(val_loss));
  // The earlier metrics were written by the first action's file, not again.
  BOOST_TEST(scalars_of(events, "metrics/train_loss_epoch").empty());
}

BOOST_AUTO_TEST_CASE(a_resumed_run_marks_the_restart_for_tensorboard) {
  TempDir dir("tensorboard");
  Run run(TrainerOptions().max_epochs(2));
  // A resume restores the counters of the checkpoint (here: end of epoch 0, step 4).
  pretend_resumed(run.trainer, /*step=*/4, /*epoch=*/1, /*global_batch=*/4);
  run.trainer.add(std::make_shared<TensorBoardLogger>(options_in(dir).step_freq(1)));
  auto train = make_batches(4, 4);
  run.trainer.fit(train);

  const auto events = only_file_events(dir.path / "run");
  BOOST_TEST_REQUIRE(events.size() > 2u);
  // SessionLog START at the first step the resumed run writes: TensorBoard drops the steps the
  // previous run wrote after its checkpoint.
  BOOST_TEST_REQUIRE(events[1].session_status.has_value());
  BOOST_TEST(*events[1].session_status == 1);  // START
  BOOST_TEST(events[1].step == 5);
  BOOST_TEST(steps_of(scalars_of(events, "train/loss")) == (std::vector<std::int64_t>{5, 6, 7, 8}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(an_exception_flushes_what_was_logged_and_the_file_is_complete) {
  TempDir dir("tensorboard");
  Run run(TrainerOptions().max_epochs(2));
  auto recorder = std::make_shared<RecordingCallback>();
  run.trainer.add(recorder);
  auto logger = std::make_shared<TensorBoardLogger>(options_in(dir).step_freq(1));
  run.trainer.add(logger);
  run.trainer.on(Event::BatchStart, [](State& state) {
    if (state.step == 3) throw std::runtime_error("the data broke");
  });
  auto train = make_batches(4, 4);
  CapturedLog log;
  BOOST_TEST(has(message_of<std::runtime_error>([&] { run.trainer.fit(train); }), "data broke"));
  BOOST_TEST(has(joined(recorder->events), "Exception"));

  const auto events = read_events(logger->file());  // every record complete, CRCs match
  BOOST_TEST(steps_of(scalars_of(events, "train/loss")) == (std::vector<std::int64_t>{1, 2, 3}),
             boost::test_tools::per_element());
  // The unfinished step 4 and epoch are closed by StepEnd and EpochEnd: nothing written for them.
  BOOST_TEST(steps_of(scalars_of(events, "train/lr")) == (std::vector<std::int64_t>{1, 2, 3}),
             boost::test_tools::per_element());
  BOOST_TEST(scalars_of(events, "epoch/completed").empty());
  BOOST_TEST(log.messages("warning").empty());
}

BOOST_AUTO_TEST_CASE(a_missing_tensor_is_warned_about_once) {
  TempDir dir("tensorboard");
  Run run(TrainerOptions().max_epochs(2));
  run.trainer.add(std::make_shared<TensorBoardLogger>(
      options_in(dir).step_freq(1).tensors_to_log({"loss", "accuracy"})));
  auto train = make_batches(3, 4);
  CapturedLog log;
  run.trainer.fit(train);

  const auto warnings = log.messages("warning");
  BOOST_TEST_REQUIRE(warnings.size() == 1u);
  BOOST_TEST(
      has(warnings[0], "TensorBoardLogger 'tensorboard_logger': no tensor named 'accuracy'"));
  BOOST_TEST(has(warnings[0], "present at StepEnd: loss"));
  const auto events = only_file_events(dir.path / "run");
  BOOST_TEST(scalars_of(events, "train/loss").size() == 6u);
}

BOOST_AUTO_TEST_CASE(an_unwritable_log_dir_fails_at_action_start_naming_it) {
  TempDir dir("tensorboard");
  const auto blocker = dir.path / "not_a_directory";
  std::ofstream(blocker) << "a file where a directory is expected\n";

  for (const auto& log_dir : {blocker / "run", blocker}) {
    Run run;
    auto& trainer = run.trainer;
    auto recorder = std::make_shared<RecordingCallback>();
    trainer.add(recorder);
    trainer.add(std::make_shared<TensorBoardLogger>(TensorBoardLoggerOptions(log_dir.string())));
    auto train = make_batches(3, 4);
    const auto message = message_of<ConfigError>([&] { trainer.fit(train); });
    BOOST_TEST(has(message, "TensorBoardLogger 'tensorboard_logger'"));
    BOOST_TEST(has(message, "'" + log_dir.string() + "'"));
    BOOST_TEST(joined(recorder->events) == "ActionStart Exception ActionEnd");
    BOOST_TEST(trainer.state().step == 0);
  }
}

BOOST_AUTO_TEST_CASE(bad_options_are_config_errors) {
  auto message = [](TensorBoardLoggerOptions options) {
    return message_of<ConfigError>([&] { TensorBoardLogger logger(std::move(options)); });
  };
  const TensorBoardLoggerOptions base("runs/x");
  BOOST_TEST(
      has(message(TensorBoardLoggerOptions(base).step_freq(0)), "step_freq must be >= 1, got 0"));
  BOOST_TEST(has(message(TensorBoardLoggerOptions(base).histogram_freq(0)),
                 "histogram_freq must be >= 1, got 0"));
  BOOST_TEST(has(message(TensorBoardLoggerOptions(base).histogram_buckets(0)),
                 "histogram_buckets must be >= 1, got 0"));
  BOOST_TEST(has(message(TensorBoardLoggerOptions(base).queue_capacity(0)),
                 "queue_capacity must be >= 1, got 0"));
  BOOST_TEST(has(message(TensorBoardLoggerOptions("")), "log_dir is empty"));
  BOOST_TEST(has(message(TensorBoardLoggerOptions(base).tensors_to_log({"loss", "loss"})),
                 "names 'loss' twice"));
  BOOST_TEST(has(message(TensorBoardLoggerOptions(base).tensors_to_log({"lr"})), "clashes"));
  BOOST_TEST(has(message(TensorBoardLoggerOptions(base).tensors_to_log({""})), "empty name"));
  BOOST_TEST(has(message(TensorBoardLoggerOptions(base).metrics_to_log({""})), "empty name"));
}

BOOST_AUTO_TEST_CASE(default_priority_rank_and_options) {
  TensorBoardLogger logger(TensorBoardLoggerOptions("runs/x"));
  BOOST_TEST(logger.priority() == 100);
  BOOST_TEST(logger.name() == "tensorboard_logger");
  BOOST_TEST(logger.rank().value_or(-1) == 0);
  BOOST_TEST(logger.options().step_freq() == 50);
  BOOST_TEST(logger.options().histogram_buckets() == 30);
  BOOST_TEST(logger.options().tensors_to_log() == std::vector<std::string>{"loss"},
             boost::test_tools::per_element());
  BOOST_TEST(logger.file().empty());
}

// ---- the writer and the reader ------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(the_reader_checks_both_crcs_of_every_record) {
  // The reader's CRC is the framework's: pin it to the standard CRC-32C check value first.
  BOOST_TEST(crc32c("123456789", 9) == 0xE3069283u);

  TempDir dir("tensorboard");
  const auto path = dir.path / "events.out.tfevents.test";
  {
    EventFileWriter writer(path.string());
    writer.add_summary(7, {SummaryValue::scalar("a", 1.5)});
    writer.close();
  }
  const std::string bytes = file_bytes(path);
  const auto records = read_records(bytes);
  BOOST_TEST_REQUIRE(records.size() == 2u);
  const std::size_t second = 12 + records[0].size() + 4;  // where the second record starts

  std::string corrupt = bytes;
  corrupt[second + 12 + 3] ^= 0x01;  // a byte of the second record's data
  BOOST_TEST(has(message_of<TfRecordError>([&] { read_records(corrupt); }),
                 "record 1: data CRC mismatch"));
  corrupt = bytes;
  corrupt[second + 1] ^= 0x40;  // its length
  BOOST_TEST(has(message_of<TfRecordError>([&] { read_records(corrupt); }),
                 "record 1: length CRC mismatch"));
  corrupt = bytes;
  corrupt[second + 9] ^= 0x01;  // the CRC of its length
  BOOST_TEST(has(message_of<TfRecordError>([&] { read_records(corrupt); }),
                 "record 1: length CRC mismatch"));
  BOOST_TEST(
      has(message_of<TfRecordError>([&] { read_records(bytes.substr(0, bytes.size() - 1)); }),
          "record 1: truncated data"));

  const auto event = decode_event(records[1]);
  BOOST_TEST(event.step == 7);
  BOOST_TEST_REQUIRE(event.values.size() == 1u);
  BOOST_TEST(event.values[0].tag == "a");
  BOOST_TEST(*event.values[0].simple_value == 1.5f);
}

BOOST_AUTO_TEST_CASE(a_full_queue_blocks_the_producer_and_nothing_is_dropped) {
  TempDir dir("tensorboard");
  const auto path = dir.path / "events.out.tfevents.queue";
  constexpr int kEvents = 2000;
  {
    EventFileWriter writer(path.string(), /*queue_capacity=*/1);
    for (int step = 1; step <= kEvents; ++step) {
      writer.add_summary(step,
                         {SummaryValue::scalar("x", step * 0.5),
                          SummaryValue::histogram("h", {0.0, 1.0, static_cast<double>(step)}, 3)});
    }
    writer.close();
  }
  const auto events = read_events(path);
  BOOST_TEST_REQUIRE(events.size() == kEvents + 1u);
  for (int step = 1; step <= kEvents; ++step) {
    const auto& event = events[step];
    BOOST_TEST_REQUIRE(event.values.size() == 2u);
    BOOST_TEST(event.step == step);
    BOOST_TEST(*event.values[0].simple_value == static_cast<float>(step * 0.5));
    BOOST_TEST(event.values[1].histo->sum == 1.0 + step);
  }
}

BOOST_AUTO_TEST_CASE(a_write_error_on_the_writer_thread_is_reported_not_lost) {
  if (!fs::exists("/dev/full")) {
    BOOST_TEST_MESSAGE("no /dev/full here; skipped");
    return;
  }
  EventFileWriter writer("/dev/full", 4);  // every write fails: no space left on device
  // The first record fails on the writer thread: the next add or flush throws it.
  const auto message = message_of<Error>([&] {
    writer.add_summary(1, {SummaryValue::scalar("x", 1.0)});
    writer.flush();
  });
  BOOST_TEST(has(message, "cannot write the event file '/dev/full'"));
  BOOST_TEST(has(message, std::strerror(ENOSPC)));
  writer.flush();  // flush and close throw it once; every later add throws it again
  BOOST_TEST(has(message_of<Error>([&] { writer.add_summary(2, {}); }), "/dev/full"));
  writer.close();
}

BOOST_AUTO_TEST_CASE(a_file_that_cannot_be_created_is_a_config_error) {
  TempDir dir("tensorboard");
  const auto path = dir.path / "missing" / "events.out.tfevents.x";
  const auto message = message_of<ConfigError>([&] { EventFileWriter writer(path.string()); });
  BOOST_TEST(has(message, "cannot create the event file '" + path.string() + "'"));
}

BOOST_AUTO_TEST_CASE(histograms_bucket_the_finite_values) {
  const auto histogram = make_histogram({0.0, 0.5, 1.5, 2.5, 3.0}, 3);
  BOOST_TEST(histogram.min == 0.0);
  BOOST_TEST(histogram.max == 3.0);
  BOOST_TEST(histogram.num == 5.0);
  BOOST_TEST(histogram.sum == 7.5);
  BOOST_TEST(histogram.sum_squares == 0.25 + 2.25 + 6.25 + 9.0);
  BOOST_TEST_REQUIRE(histogram.bucket_limit.size() == 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    BOOST_TEST(histogram.bucket_limit[i] == static_cast<double>(i),
               boost::test_tools::tolerance(1e-12));
  }
  BOOST_TEST(histogram.bucket == (std::vector<double>{0.0, 2.0, 1.0, 2.0}),
             boost::test_tools::per_element());

  const auto constant = make_histogram({2.0, 2.0, 2.0}, 30);
  BOOST_TEST(constant.bucket_limit == (std::vector<double>{1.5, 2.5}),
             boost::test_tools::per_element());
  BOOST_TEST(constant.bucket == (std::vector<double>{0.0, 3.0}), boost::test_tools::per_element());

  const double inf = std::numeric_limits<double>::infinity();
  const auto partly = make_histogram({1.0, std::nan(""), inf, -inf, 3.0}, 2);
  BOOST_TEST(partly.num == 2.0);
  BOOST_TEST(partly.sum == 4.0);
  BOOST_TEST(partly.bucket == (std::vector<double>{0.0, 1.0, 1.0}),
             boost::test_tools::per_element());

  const auto none = make_histogram({}, 30);
  BOOST_TEST(none.num == 0.0);
  BOOST_TEST(none.bucket == std::vector<double>{0.0}, boost::test_tools::per_element());

  const double big = std::numeric_limits<double>::max();
  const auto extreme = make_histogram({-big, 0.0, big}, 2);
  BOOST_TEST(extreme.bucket == (std::vector<double>{0.0, 2.0, 1.0}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
