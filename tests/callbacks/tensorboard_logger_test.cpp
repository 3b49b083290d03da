// TensorBoardLogger and EventFileWriter: the event files parsed back with the generated protobuf
// classes (both CRCs of every record checked) hold what was logged: scalars, histograms of tensors
// and parameters, the run's options as text, train and validation curves in sub-runs; a file of
// the hand-encoding writer before it still reads; the background writer drops nothing and reports
// its errors; bad input.

#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <support/captured_log.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <support/recorder.hpp>
#include <support/scratch.hpp>
#include <support/tfrecord_reader.hpp>
#include <torchbus/callbacks/model_checkpoint.hpp>
#include <torchbus/callbacks/tensorboard_logger.hpp>

#include "loggers/event_file_writer.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <thread>

using namespace torchbus;
using namespace torchbus::testing;
namespace fs = std::filesystem;

namespace {

/// The steps of a series read from the file.
template <typename Value>
std::vector<std::int64_t> steps_of(const std::vector<std::pair<std::int64_t, Value>>& series) {
  std::vector<std::int64_t> steps;
  for (const auto& point : series) steps.push_back(point.first);
  return steps;
}

/// The values of a series read from the file.
template <typename Value>
std::vector<Value> values_in(const std::vector<std::pair<std::int64_t, Value>>& series) {
  std::vector<Value> values;
  for (const auto& point : series) values.push_back(point.second);
  return values;
}

/// The only event file in `directory`, parsed.
std::vector<tensorboard::Event> only_file_events(const fs::path& directory) {
  const auto files = event_files(directory);
  BOOST_TEST_REQUIRE(files.size() == 1u);
  return read_events(files[0]);
}

TensorBoardLoggerOptions options_in(const TempDir& dir) {
  return TensorBoardLoggerOptions((dir.path / "run").string());
}

/// The elements of a repeated double field.
std::vector<double> doubles(const google::protobuf::RepeatedField<double>& field) {
  return std::vector<double>(field.begin(), field.end());
}

/// What a test knows about a tensor a histogram summarises.
struct TensorStats {
  double numel = 0, sum = 0, min = 0, max = 0;
};

TensorStats stats_of(const at::Tensor& tensor) {
  const auto values = tensor.detach().to(torch::kDouble);
  return {static_cast<double>(values.numel()), values.sum().item<double>(),
          values.min().item<double>(), values.max().item<double>()};
}

/// Checks `histogram` against the statistics of the tensor it summarises in `buckets` buckets.
void check_histogram(const tensorboard::HistogramProto& histogram, const TensorStats& expected,
                     int buckets) {
  BOOST_TEST(histogram.num() == expected.numel);
  BOOST_TEST(histogram.sum() == expected.sum, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(histogram.min() == expected.min);
  BOOST_TEST(histogram.max() == expected.max);
  BOOST_TEST_REQUIRE(histogram.bucket_limit_size() == buckets + 1);  // + the leading empty one
  BOOST_TEST_REQUIRE(histogram.bucket_size() == buckets + 1);
  BOOST_TEST(histogram.bucket_limit(0) == expected.min);
  BOOST_TEST(histogram.bucket_limit(buckets) == expected.max);
  BOOST_TEST(histogram.bucket(0) == 0.0);
  double counted = 0;
  for (double count : histogram.bucket()) counted += count;
  BOOST_TEST(counted == expected.numel);
  BOOST_TEST(std::is_sorted(histogram.bucket_limit().begin(), histogram.bucket_limit().end()));
}

/// The ids of this process's threads (Linux: the entries of /proc/self/task).
std::set<std::string> thread_ids() {
  std::set<std::string> ids;
  for (const auto& entry : fs::directory_iterator("/proc/self/task")) {
    ids.insert(entry.path().filename().string());
  }
  return ids;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(tensorboard_logger)

BOOST_AUTO_TEST_CASE(the_file_holds_what_was_logged) {
  TempDir dir("tensorboard");
  Run run(TrainerOptions().max_epochs(2));
  // What the logger should see of "output" (a batch tensor) at each step.
  std::map<std::int64_t, TensorStats> outputs;
  run.trainer.on(
      Event::BatchEnd,
      [&](State& state) { outputs[state.step + 1] = stats_of(state.tensors.get("output")); }, -100);
  auto logger = std::make_shared<TensorBoardLogger>(
      options_in(dir).step_freq(2).histogram_freq(3).tensors_to_log({"step_loss", "output"}));
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
  BOOST_TEST(events[0].file_version() == "brain.Event:2");
  BOOST_TEST(!events[0].has_summary());
  for (std::size_t i = 1; i < events.size(); ++i) {
    BOOST_TEST(events[i].has_summary());
    BOOST_TEST(events[i].wall_time() > 1.6e9);  // seconds since 1970
    BOOST_TEST(events[i].wall_time() >= events[i - 1].wall_time());
    BOOST_TEST(!events[i].has_session_log());  // not a resumed run
  }

  const auto& history = run.trainer.state().metrics;
  // Scalars every 2 steps: the step's loss (as a float, like TensorBoard) and the learning rate.
  const auto loss = scalars_of(events, "train/step_loss");
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
  for (const auto& [step, histogram] : histograms) check_histogram(histogram, outputs.at(step), 30);
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
  const auto loss = scalars_of(events, "train/step_loss");
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
    BOOST_TEST(events[i].step() >= last_step);
    BOOST_TEST(events[i].wall_time() >= events[i - 1].wall_time());
    last_step = events[i].step();
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
        in_file = steps_of(scalars_of(read_events(logger->file()), "train/step_loss"));
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
  BOOST_TEST(tags_of(events) == (std::vector<std::string>{"train/step_loss", "metrics/accuracy"}),
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
  BOOST_TEST(scalars_of(events, "train/step_loss").empty());
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
  auto train = make_batches(4, 4);
  // A resume from a checkpoint at the end of epoch 0, step 4.
  resume_after_a_run(run.trainer, TrainerOptions().max_epochs(1), train,
                     dir.path / "epoch-0.tbckpt");
  run.trainer.add(
      std::make_shared<TensorBoardLogger>(options_in(dir).step_freq(1).group_train_val(true)));
  run.trainer.fit(train);

  const auto events = only_file_events(dir.path / "run");
  BOOST_TEST_REQUIRE(events.size() > 2u);
  // SessionLog START at the first step the resumed run writes: TensorBoard drops the steps the
  // previous run wrote after its checkpoint.
  BOOST_TEST_REQUIRE(events[1].has_session_log());
  BOOST_TEST(events[1].session_log().status() == tensorboard::SessionLog::START);
  BOOST_TEST(events[1].step() == 5);
  BOOST_TEST(
      steps_of(scalars_of(events, "train/step_loss")) == (std::vector<std::int64_t>{5, 6, 7, 8}),
      boost::test_tools::per_element());
  // The train sub-run, created at the first step written, marks the restart too.
  const auto sub_run = only_file_events(dir.path / "run" / "train");
  BOOST_TEST_REQUIRE(sub_run.size() > 2u);
  BOOST_TEST(sub_run[1].session_log().status() == tensorboard::SessionLog::START);
  BOOST_TEST(sub_run[1].step() == 5);
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
  BOOST_TEST(
      steps_of(scalars_of(events, "train/step_loss")) == (std::vector<std::int64_t>{1, 2, 3}),
      boost::test_tools::per_element());
  // The unfinished step 4 and epoch are closed by StepEnd and EpochEnd: nothing written for them.
  BOOST_TEST(steps_of(scalars_of(events, "train/lr")) == (std::vector<std::int64_t>{1, 2, 3}),
             boost::test_tools::per_element());
  BOOST_TEST(scalars_of(events, "epoch/completed").empty());
  BOOST_TEST(log.messages("warning").empty());
}

BOOST_AUTO_TEST_CASE(the_run_options_are_written_once_as_a_text_summary) {
  TempDir dir("tensorboard");
  Run run(TrainerOptions().max_epochs(2));
  auto logger = std::make_shared<TensorBoardLogger>(
      options_in(dir).step_freq(1).run_options({{"data", "mnist"}, {"lr", "0.1"}}));
  logger->add_option("lr", "0.01").add_option("note", "a|b\nc");
  run.trainer.add(logger);
  auto train = make_batches(3, 4);
  run.trainer.fit(train);

  const auto events = only_file_events(dir.path / "run");
  const auto texts = values_of(events, "run_options");
  BOOST_TEST_REQUIRE(texts.size() == 1u);
  // The first summary of the file, at the step the action starts from; as TensorBoard's text
  // plugin reads it: the plugin's name in the metadata, a string tensor of shape [1].
  BOOST_TEST(events[1].summary().value(0).tag() == "run_options");
  const auto& [step, value] = texts[0];
  BOOST_TEST(step == 0);
  BOOST_TEST(value.metadata().plugin_data().plugin_name() == "text");
  BOOST_TEST(value.tensor().dtype() == tensorboard::DT_STRING);
  BOOST_TEST_REQUIRE(value.tensor().tensor_shape().dim_size() == 1);
  BOOST_TEST(value.tensor().tensor_shape().dim(0).size() == 1);
  BOOST_TEST_REQUIRE(value.tensor().string_val_size() == 1);
  // A Markdown table: add_option replaced lr; a pipe is escaped, a line break is a space.
  BOOST_TEST(
      value.tensor().string_val(0) ==
      "| option | value |\n|---|---|\n| data | mnist |\n| lr | 0.01 |\n| note | a\\|b c |\n");
  BOOST_TEST(has(message_of<ConfigError>([&] { logger->add_option("", "x"); }), "option name"));
}

BOOST_AUTO_TEST_CASE(parameter_and_gradient_histograms_every_n_steps) {
  TempDir dir("tensorboard");
  Run run(TrainerOptions().max_epochs(1));
  // Off by default: nothing subscribed to AfterOptimizerStep.
  run.trainer.add(std::make_shared<TensorBoardLogger>(options_in(dir).name("off")));
  BOOST_TEST(run.trainer.bus().subscriber_count(Event::AfterOptimizerStep) == 0u);
  run.trainer.add(std::make_shared<TensorBoardLogger>(
      TensorBoardLoggerOptions((dir.path / "histograms").string())
          .step_freq(100)
          .parameter_histogram_freq(2)
          .histogram_buckets(5)));
  BOOST_TEST(run.trainer.bus().subscriber_count(Event::AfterOptimizerStep) == 1u);
  // What the histograms summarise: each parameter after the optimizer step, and the gradient
  // it applied.
  std::map<std::int64_t, std::map<std::string, TensorStats>> expected;
  run.trainer.on(
      Event::AfterOptimizerStep,
      [&](State& state) {
        for (const auto& parameter : state.model->named_parameters()) {
          expected[state.step + 1]["parameters/" + parameter.key()] = stats_of(parameter.value());
          expected[state.step + 1]["gradients/" + parameter.key()] =
              stats_of(parameter.value().grad());
        }
      },
      200);
  auto train = make_batches(5, 4);
  run.trainer.fit(train);

  const auto events = only_file_events(dir.path / "histograms");
  std::size_t tags = 0;
  for (const auto& parameter : run.model->named_parameters()) {
    for (const std::string prefix : {"parameters/", "gradients/"}) {
      const auto histograms = histograms_of(events, prefix + parameter.key());
      BOOST_TEST(steps_of(histograms) == (std::vector<std::int64_t>{2, 4}),
                 boost::test_tools::per_element());
      for (const auto& [step, histogram] : histograms) {
        check_histogram(histogram, expected.at(step).at(prefix + parameter.key()), 5);
      }
      ++tags;
    }
  }
  BOOST_TEST(tags == 8u);  // two linear layers: weight and bias each
  // + epoch/time_s, epoch/completed, metrics/train_loss_epoch
  BOOST_TEST(tags_of(events).size() == tags + 3);
  // The parameters changed between the steps written: the histograms are not one snapshot.
  BOOST_TEST(histograms_of(events, "parameters/0.weight")[0].second.sum() !=
             histograms_of(events, "parameters/0.weight")[1].second.sum());
}

// As PyTorch's SummaryWriter.add_scalars: the sub-runs train and val hold the training and
// validation values of a quantity under one tag, so TensorBoard draws them on one chart.
BOOST_AUTO_TEST_CASE(train_and_validation_curves_share_a_tag_in_sub_runs) {
  TempDir dir("tensorboard");
  Run run(TrainerOptions().max_epochs(2));
  run.trainer.on(
      Event::EpochEnd,
      [](State& state) {
        state.record_metric("train_accuracy", 0.5 + 0.25 * static_cast<double>(state.epoch));
      },
      -100);
  run.trainer.add(
      std::make_shared<TensorBoardLogger>(options_in(dir).step_freq(2).group_train_val(true)));
  auto train = make_batches(4, 4);
  auto validation = make_batches(2, 4, 4, 3, 11);
  run.trainer.fit(train, validation);

  const auto main = only_file_events(dir.path / "run");
  const auto train_run = only_file_events(dir.path / "run" / "train");
  const auto val_run = only_file_events(dir.path / "run" / "val");
  BOOST_TEST(train_run[0].file_version() == "brain.Event:2");
  BOOST_TEST(val_run[0].file_version() == "brain.Event:2");
  // loss: the step scalars of train/step_loss in train, the val_loss metric in val.
  const auto train_loss = scalars_of(main, "train/step_loss");
  BOOST_TEST(steps_of(scalars_of(train_run, "loss")) == steps_of(train_loss),
             boost::test_tools::per_element());
  BOOST_TEST(values_in(scalars_of(train_run, "loss")) == values_in(train_loss),
             boost::test_tools::per_element());
  const auto val_loss = scalars_of(main, "metrics/val_loss");
  BOOST_TEST_REQUIRE(val_loss.size() == 2u);
  BOOST_TEST(steps_of(scalars_of(val_run, "loss")) == steps_of(val_loss),
             boost::test_tools::per_element());
  BOOST_TEST(values_in(scalars_of(val_run, "loss")) == values_in(val_loss),
             boost::test_tools::per_element());
  // train_<x> metrics as <x> in train (train_loss_epoch as loss_epoch); nothing else there.
  BOOST_TEST(values_in(scalars_of(train_run, "accuracy")) == (std::vector<float>{0.5f, 0.75f}),
             boost::test_tools::per_element());
  auto train_tags = tags_of(train_run);
  std::sort(train_tags.begin(), train_tags.end());
  BOOST_TEST(train_tags == (std::vector<std::string>{"accuracy", "loss", "loss_epoch"}),
             boost::test_tools::per_element());
  BOOST_TEST(tags_of(val_run) == std::vector<std::string>{"loss"},
             boost::test_tools::per_element());
  BOOST_TEST(scalars_of(main, "metrics/train_accuracy").size() == 2u);  // still in the main run

  // Off (the default): no sub-run.
  TempDir other("tensorboard");
  Run again(TrainerOptions().max_epochs(1));
  again.trainer.add(std::make_shared<TensorBoardLogger>(options_in(other).step_freq(2)));
  again.trainer.fit(train, validation);
  BOOST_TEST(!fs::exists(other.path / "run" / "train"));
  BOOST_TEST(!fs::exists(other.path / "run" / "val"));
  BOOST_TEST(scalars_of(only_file_events(other.path / "run"), "metrics/val_loss").size() == 1u);
}

// The writer threads start once per logger: every later action writes its new files with the
// threads of the first (a thread start is a clone, a stack and every library's thread-local
// storage), and each file holds its own action's events.
BOOST_AUTO_TEST_CASE(every_action_writes_new_files_with_the_writer_threads_of_the_first) {
  TempDir dir("tensorboard");
  Run run(TrainerOptions().max_epochs(1));
  auto train = make_batches(4, 4);
  auto validation = make_batches(2, 4, 4, 3, 11);
  run.trainer.fit(train, validation);  // LibTorch's own threads, if any, are started by now
  const auto before = thread_ids();
  auto logger =
      std::make_shared<TensorBoardLogger>(options_in(dir).step_freq(1).group_train_val(true));
  run.trainer.add(logger);

  run.trainer.fit(train, validation);
  const auto first_file = logger->file();
  const auto kept = thread_ids();
  // The main run's, the train sub-run's and the val sub-run's, kept between actions.
  BOOST_TEST(kept.size() == before.size() + 3u);
  std::vector<std::set<std::string>> during;
  auto sample = run.trainer.on(Event::StepEnd, [&](State&) { during.push_back(thread_ids()); });
  run.trainer.fit(train, validation);
  const auto second_file = logger->file();
  run.trainer.evaluate(validation);
  BOOST_TEST_REQUIRE(during.size() == 4u);
  for (const auto& threads : during) BOOST_TEST((threads == kept));
  BOOST_TEST((thread_ids() == kept));

  // Three actions, three main files; the val sub-run was written by all three, the train sub-run
  // by the two fits. Each file starts with its version record and holds its own steps.
  BOOST_TEST(event_files(dir.path / "run").size() == 3u);
  BOOST_TEST(event_files(dir.path / "run" / "train").size() == 2u);
  BOOST_TEST(event_files(dir.path / "run" / "val").size() == 3u);
  for (const auto* sub_run : {"", "train", "val"}) {
    for (const auto& file : event_files(dir.path / "run" / sub_run)) {
      BOOST_TEST(read_events(file).at(0).file_version() == "brain.Event:2");
    }
  }
  for (const auto& file : {first_file, second_file}) {
    BOOST_TEST(steps_of(scalars_of(read_events(file), "train/step_loss")) ==
                   (std::vector<std::int64_t>{1, 2, 3, 4}),
               boost::test_tools::per_element());
  }
  const auto evaluation = read_events(logger->file());
  BOOST_TEST(scalars_of(evaluation, "train/step_loss").empty());
  BOOST_TEST(scalars_of(evaluation, "metrics/val_loss").size() == 1u);
}

// An event file written before the records were encoded with protobuf's generated classes (by the
// hand-written encoder; tests/data/old-format-run, `torchbus-train --max-steps 6
// --val-every-steps 3`): both CRCs of every record match and every record parses, with the values
// of that run's summary.json.
BOOST_AUTO_TEST_CASE(an_event_file_of_the_earlier_writer_reads_back) {
  const auto files = event_files(fs::path(TORCHBUS_TEST_DATA) / "old-format-run" / "tensorboard");
  BOOST_TEST_REQUIRE(files.size() == 1u);
  const auto events = read_events(files[0]);
  BOOST_TEST_REQUIRE(events.size() == 6u);
  BOOST_TEST(events[0].file_version() == "brain.Event:2");
  for (const auto& event : events) {
    // Written within a second of the time in the file's name.
    BOOST_TEST((event.wall_time() >= 1795493817.0 && event.wall_time() < 1795493819.0));
  }
  BOOST_TEST(
      tags_of(events) == (std::vector<std::string>{"metrics/val_loss", "metrics/val_accuracy",
                                                   "metrics/train_loss_epoch", "epoch/time_s",
                                                   "epoch/completed", "metrics/train_accuracy"}),
      boost::test_tools::per_element());
  // Validations at steps 3 and 6 (val_every_steps), and at the end of the epoch (step 6).
  const auto val_loss = scalars_of(events, "metrics/val_loss");
  BOOST_TEST(steps_of(val_loss) == (std::vector<std::int64_t>{3, 6, 6}),
             boost::test_tools::per_element());
  for (const auto& point : val_loss) BOOST_TEST((point.second > 2.0f && point.second < 2.6f));
  BOOST_TEST(val_loss.back().second == static_cast<float>(2.3434765338897705));  // summary.json
  const auto val_accuracy = scalars_of(events, "metrics/val_accuracy");
  BOOST_TEST(steps_of(val_accuracy) == steps_of(val_loss), boost::test_tools::per_element());
  for (const auto& point : val_accuracy) BOOST_TEST((point.second >= 0.0f && point.second <= 1.0f));
  BOOST_TEST(val_accuracy.back().second == 0.0849609375f);
  const auto train_loss = scalars_of(events, "metrics/train_loss_epoch");
  BOOST_TEST_REQUIRE(train_loss.size() == 1u);
  BOOST_TEST(train_loss[0].first == 6);
  BOOST_TEST(train_loss[0].second == static_cast<float>(2.3482671976089478));
  const auto train_accuracy = scalars_of(events, "metrics/train_accuracy");
  BOOST_TEST_REQUIRE(train_accuracy.size() == 1u);
  BOOST_TEST(train_accuracy[0].second == static_cast<float>(0.098958333333333329));
  const auto completed = scalars_of(events, "epoch/completed");
  BOOST_TEST_REQUIRE(completed.size() == 1u);
  BOOST_TEST(completed[0].first == 6);
  BOOST_TEST(completed[0].second == 1.0f);
  const auto time = scalars_of(events, "epoch/time_s");
  BOOST_TEST_REQUIRE(time.size() == 1u);
  BOOST_TEST((time[0].second > 0.0f && time[0].second < 10.0f));
}

BOOST_AUTO_TEST_CASE(a_missing_tensor_is_warned_about_once) {
  TempDir dir("tensorboard");
  Run run(TrainerOptions().max_epochs(2));
  run.trainer.add(std::make_shared<TensorBoardLogger>(
      options_in(dir).step_freq(1).tensors_to_log({"step_loss", "accuracy"})));
  auto train = make_batches(3, 4);
  CapturedLog log;
  run.trainer.fit(train);

  const auto warnings = log.messages("warning");
  BOOST_TEST_REQUIRE(warnings.size() == 1u);
  BOOST_TEST(
      has(warnings[0], "TensorBoardLogger 'tensorboard_logger': no tensor named 'accuracy'"));
  BOOST_TEST(has(warnings[0], "(present: step_loss)"));
  const auto events = only_file_events(dir.path / "run");
  BOOST_TEST(scalars_of(events, "train/step_loss").size() == 6u);
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

// A logger's error policy (Role::Logger: disable): a log directory that stops being writable during
// the run disables the logger, and the run completes with its checkpoints.
BOOST_AUTO_TEST_CASE(a_log_dir_unwritable_mid_run_disables_the_logger_and_the_run_completes) {
  TempDir dir("tensorboard");
  Run run(TrainerOptions().max_epochs(2));
  run.trainer.add(
      std::make_shared<TensorBoardLogger>(options_in(dir).step_freq(1).group_train_val(true)));
  run.trainer.add(std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions(dir.path / "checkpoints").save_last(false)));
  // After the first step the val sub-run's directory becomes a file: the first validation cannot
  // create its event file there.
  const auto val_run = dir.path / "run" / "val";
  run.trainer.on(Event::StepEnd, once(1), [&](State&) {
    fs::remove_all(val_run);
    std::ofstream(val_run) << "a file where the val sub-run's directory was\n";
  });
  auto train = make_batches(4, 4);
  auto validation = make_batches(2, 4, 4, 3, 11);
  CapturedLog log;
  BOOST_CHECK_NO_THROW(run.trainer.fit(train, validation));
  BOOST_TEST(run.trainer.state().step == 8);
  const auto& failures = run.trainer.bus().subscriber_failures();
  BOOST_TEST_REQUIRE(failures.size() == 1u);
  BOOST_TEST(failures[0].subscriber == "tensorboard_logger");
  BOOST_TEST(failures[0].disabled);
  BOOST_TEST(has(failures[0].first_error, val_run.string()));
  // The logger is named once, not once by the writer's opening and again by its caller.
  const std::string who = "TensorBoardLogger 'tensorboard_logger'";
  const auto& first_error = failures[0].first_error;
  BOOST_TEST(first_error.find(who) != std::string::npos);
  BOOST_TEST(first_error.find(who, first_error.find(who) + 1) == std::string::npos);
  BOOST_TEST(log.messages("error", "tensorboard_logger threw during").size() == 1u);
  std::vector<std::string> checkpoints;
  for (const auto& entry : fs::directory_iterator(dir.path / "checkpoints")) {
    checkpoints.push_back(entry.path().filename().string());
  }
  std::sort(checkpoints.begin(), checkpoints.end());
  const std::vector<std::string> expected{"epoch-000-step-000004.tbckpt",
                                          "epoch-001-step-000008.tbckpt"};
  BOOST_TEST(checkpoints == expected, boost::test_tools::per_element());
  // What the logger wrote before it failed is in its file, complete.
  BOOST_TEST(!scalars_of(only_file_events(dir.path / "run"), "train/step_loss").empty());
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
  BOOST_TEST(has(message(TensorBoardLoggerOptions(base).parameter_histogram_freq(-1)),
                 "parameter_histogram_freq must be >= 0 (0: never), got -1"));
  BOOST_TEST(
      has(message(TensorBoardLoggerOptions(base).run_options({{"", "x"}})), "empty option name"));
  BOOST_TEST(has(message(TensorBoardLoggerOptions(base).queue_capacity(0)),
                 "queue_capacity must be >= 1, got 0"));
  BOOST_TEST(has(message(TensorBoardLoggerOptions("")), "log_dir is empty"));
  BOOST_TEST(has(message(TensorBoardLoggerOptions(base).tensors_to_log({"loss", "loss"})),
                 "names 'loss' twice"));
  BOOST_TEST(has(message(TensorBoardLoggerOptions(base).tensors_to_log({"lr"})), "clashes"));
  BOOST_TEST(has(message(TensorBoardLoggerOptions(base).tensors_to_log({""})), "empty name"));
  BOOST_TEST(has(message(TensorBoardLoggerOptions(base).metrics_to_log({""})), "empty name"));
}

BOOST_AUTO_TEST_CASE(default_role_rank_and_options) {
  TensorBoardLogger logger(TensorBoardLoggerOptions("runs/x"));
  BOOST_TEST((logger.role() == Role::Logger));
  BOOST_TEST(logger.name() == "tensorboard_logger");
  BOOST_TEST(logger.rank().value_or(-1) == 0);
  BOOST_TEST(logger.options().step_freq() == 50);
  BOOST_TEST(logger.options().histogram_buckets() == 30);
  BOOST_TEST(logger.options().parameter_histogram_freq() == 0);
  BOOST_TEST(!logger.options().group_train_val());
  BOOST_TEST(logger.options().run_options().empty());
  BOOST_TEST(logger.options().tensors_to_log() == std::vector<std::string>{"step_loss"},
             boost::test_tools::per_element());
  BOOST_TEST(logger.file().empty());
}

// Batch values (the output, the batch's loss) are kept at BatchEnd for StepEnd; the step's loss is
// still there at StepEnd: with only it, the logger has no BatchEnd hook.
BOOST_AUTO_TEST_CASE(hooks_batch_end_only_when_a_batch_value_is_logged) {
  for (const auto& [names, hooked] :
       {std::pair(std::vector<std::string>{"step_loss"}, 0u),
        std::pair(std::vector<std::string>{}, 0u),
        std::pair(std::vector<std::string>{"step_loss", "output"}, 1u),
        std::pair(std::vector<std::string>{"confidence"}, 1u)}) {
    Run run;
    run.trainer.add(std::make_shared<TensorBoardLogger>(
        TensorBoardLoggerOptions("runs/x").tensors_to_log(names)));
    BOOST_TEST(run.trainer.bus().subscriber_count(Event::BatchEnd) == hooked);
    BOOST_TEST(run.trainer.bus().subscriber_count(Event::StepEnd) == 1u);
  }
}

// ---- the writer and the reader ------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(the_reader_checks_both_crcs_of_every_record) {
  // The reader's CRC (Boost.CRC): pin it to the standard CRC-32C check value first.
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

  const auto event = parse_event(records[1]);
  BOOST_TEST(event.step() == 7);
  BOOST_TEST_REQUIRE(event.summary().value_size() == 1);
  BOOST_TEST(event.summary().value(0).tag() == "a");
  BOOST_TEST(event.summary().value(0).simple_value() == 1.5f);
  BOOST_TEST(has(message_of<TfRecordError>([&] {
                   parse_event(
                       std::string("\x0a\x05"
                                   "ab"));
                 }),
                 "not a tensorboard.Event"));  // field 1 as 5 bytes of 2
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
    const auto& values = events[step].summary().value();
    BOOST_TEST_REQUIRE(values.size() == 2);
    BOOST_TEST(events[step].step() == step);
    BOOST_TEST(values[0].simple_value() == static_cast<float>(step * 0.5));
    BOOST_TEST(values[1].histo().sum() == 1.0 + step);
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

BOOST_AUTO_TEST_CASE(a_closed_writer_writes_the_next_file_with_the_same_thread) {
  TempDir dir("tensorboard");
  const auto first = dir.path / "events.out.tfevents.first";
  const auto second = dir.path / "events.out.tfevents.second";
  const auto before = thread_ids();
  EventFileWriter writer(first.string(), 4, {"x"});
  BOOST_TEST(writer.is_open());
  writer.add_scalars({{1, 10.0, 0, 0.5}});
  writer.close();
  writer.close();  // a second close does nothing
  BOOST_TEST(!writer.is_open());
  const auto with_writer = thread_ids();
  BOOST_TEST(with_writer.size() == before.size() + 1u);  // its thread waits for the next file
  BOOST_TEST(has(message_of<Error>([&] { writer.add_summary(2, {}); }), "is closed"));

  // A file that cannot be created: a ConfigError naming it, and the writer stays closed.
  const auto missing = dir.path / "missing" / "events.out.tfevents.x";
  BOOST_TEST(has(message_of<ConfigError>([&] { writer.open(missing.string()); }),
                 "cannot create the event file '" + missing.string() + "'"));
  BOOST_TEST(!writer.is_open());

  writer.open(second.string());
  BOOST_TEST(writer.is_open());
  BOOST_TEST(writer.path() == second.string());
  BOOST_TEST(has(message_of<Error>([&] { writer.open(first.string()); }),
                 "'" + second.string() + "' is still open"));
  writer.add_scalars({{2, 11.0, 0, 1.5}});
  writer.add_summary(3, {SummaryValue::scalar("y", 2.5)});
  writer.close();
  BOOST_TEST((thread_ids() == with_writer));  // no thread started for the second file

  const auto first_events = read_events(first);
  const auto second_events = read_events(second);
  BOOST_TEST(first_events.at(0).file_version() == "brain.Event:2");
  BOOST_TEST(second_events.at(0).file_version() == "brain.Event:2");
  BOOST_TEST(
      scalars_of(first_events, "x") == (std::vector<std::pair<std::int64_t, float>>{{1, 0.5f}}),
      boost::test_tools::per_element());
  BOOST_TEST(second_events.size() == 3u);
  BOOST_TEST(
      scalars_of(second_events, "x") == (std::vector<std::pair<std::int64_t, float>>{{2, 1.5f}}),
      boost::test_tools::per_element());
  BOOST_TEST(
      scalars_of(second_events, "y") == (std::vector<std::pair<std::int64_t, float>>{{3, 2.5f}}),
      boost::test_tools::per_element());
}

// The logger calls its writer from one thread; the writer still holds when another thread's add_*
// waits on a full queue while the file is closed and another opened: it is refused or goes into
// the next file, after its version record, never into a closed one.
BOOST_AUTO_TEST_CASE(an_add_waiting_on_a_full_queue_while_another_thread_closes_is_refused) {
  TempDir dir("tensorboard");
  const auto file = [&](int index) {
    return (dir.path / ("events.out.tfevents." + std::to_string(index))).string();
  };
  EventFileWriter writer(file(0), /*queue_capacity=*/1);
  std::atomic<bool> done{false};
  std::atomic<int> added{0}, refused{0};
  std::thread producer([&] {
    while (!done) {
      try {
        writer.add_summary(1, {SummaryValue::scalar("x", 1.0)});
        ++added;
      } catch (const Error& error) {
        if (has(error.what(), "closed; cannot add an event")) ++refused;
      }
    }
  });
  for (int round = 1; round <= 500; ++round) {
    writer.close();
    writer.open(file(round % 4));
  }
  done = true;
  producer.join();
  writer.close();
  BOOST_TEST(added.load() > 0);
  BOOST_TEST(refused.load() > 0);
  for (int index = 0; index < 4; ++index) {
    const auto events = read_events(file(index));  // every record complete, CRCs match
    BOOST_TEST_REQUIRE(!events.empty());
    BOOST_TEST(events[0].file_version() == "brain.Event:2");
    for (std::size_t i = 1; i < events.size(); ++i) BOOST_TEST(events[i].has_summary());
  }
}

BOOST_AUTO_TEST_CASE(a_write_error_stays_with_its_file) {
  if (!fs::exists("/dev/full")) {
    BOOST_TEST_MESSAGE("no /dev/full here; skipped");
    return;
  }
  TempDir dir("tensorboard");
  const auto next = dir.path / "events.out.tfevents.next";
  EventFileWriter writer("/dev/full", 4);
  // The thread may fail to write the file's version record before add_summary queues its event
  // (add_summary then throws the error) or after (close throws it): either way once, naming it.
  BOOST_TEST(has(message_of<Error>([&] {
                   writer.add_summary(1, {SummaryValue::scalar("x", 1.0)});
                   writer.close();
                 }),
                 "'/dev/full'"));
  BOOST_CHECK_NO_THROW(writer.close());
  writer.open(next.string());
  writer.add_summary(2, {SummaryValue::scalar("x", 2.0)});
  BOOST_CHECK_NO_THROW(writer.close());
  BOOST_TEST(scalars_of(read_events(next), "x") ==
                 (std::vector<std::pair<std::int64_t, float>>{{2, 2.0f}}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_file_that_cannot_be_created_is_a_config_error) {
  TempDir dir("tensorboard");
  const auto path = dir.path / "missing" / "events.out.tfevents.x";
  const auto message = message_of<ConfigError>([&] { EventFileWriter writer(path.string()); });
  BOOST_TEST(has(message, "cannot create the event file '" + path.string() + "'"));
}

BOOST_AUTO_TEST_CASE(histograms_bucket_the_finite_values) {
  const auto histogram_of = [](const std::vector<double>& values, int buckets) {
    tensorboard::HistogramProto histogram;
    fill_histogram(values, buckets, histogram);
    return histogram;
  };
  const auto histogram = histogram_of({0.0, 0.5, 1.5, 2.5, 3.0}, 3);
  BOOST_TEST(histogram.min() == 0.0);
  BOOST_TEST(histogram.max() == 3.0);
  BOOST_TEST(histogram.num() == 5.0);
  BOOST_TEST(histogram.sum() == 7.5);
  BOOST_TEST(histogram.sum_squares() == 0.25 + 2.25 + 6.25 + 9.0);
  BOOST_TEST_REQUIRE(histogram.bucket_limit_size() == 4);
  for (int i = 0; i < 4; ++i) {
    BOOST_TEST(histogram.bucket_limit(i) == static_cast<double>(i),
               boost::test_tools::tolerance(1e-12));
  }
  BOOST_TEST(doubles(histogram.bucket()) == (std::vector<double>{0.0, 2.0, 1.0, 2.0}),
             boost::test_tools::per_element());

  const auto constant = histogram_of({2.0, 2.0, 2.0}, 30);
  BOOST_TEST(doubles(constant.bucket_limit()) == (std::vector<double>{1.5, 2.5}),
             boost::test_tools::per_element());
  BOOST_TEST(doubles(constant.bucket()) == (std::vector<double>{0.0, 3.0}),
             boost::test_tools::per_element());

  const double inf = std::numeric_limits<double>::infinity();
  const auto partly = histogram_of({1.0, std::nan(""), inf, -inf, 3.0}, 2);
  BOOST_TEST(partly.num() == 2.0);
  BOOST_TEST(partly.sum() == 4.0);
  BOOST_TEST(doubles(partly.bucket()) == (std::vector<double>{0.0, 1.0, 1.0}),
             boost::test_tools::per_element());

  const auto none = histogram_of({}, 30);
  BOOST_TEST(none.num() == 0.0);
  BOOST_TEST(doubles(none.bucket()) == std::vector<double>{0.0}, boost::test_tools::per_element());

  const double big = std::numeric_limits<double>::max();
  const auto extreme = histogram_of({-big, 0.0, big}, 2);
  BOOST_TEST(doubles(extreme.bucket()) == (std::vector<double>{0.0, 2.0, 1.0}),
             boost::test_tools::per_element());

  // A histogram proto reused for another tensor holds only the new one's buckets.
  tensorboard::HistogramProto reused = histogram;
  fill_histogram({2.0, 2.0}, 3, reused);
  BOOST_TEST(doubles(reused.bucket()) == (std::vector<double>{0.0, 2.0}),
             boost::test_tools::per_element());
  BOOST_TEST(reused.min() == 2.0);
}

BOOST_AUTO_TEST_SUITE_END()
