// CsvLogger: the file parsed back equals the metric history; appending and resuming; bad input.

#include <boost/test/unit_test.hpp>
#include <support/captured_log.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <support/recorder.hpp>
#include <support/scratch.hpp>
#include <torchbus/callbacks/csv_logger.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <type_traits>

using namespace torchbus;
using namespace torchbus::testing;
namespace fs = std::filesystem;

namespace {

/// A parsed CSV file: header and rows as maps column -> cell.
struct Csv {
  std::vector<std::string> header;
  std::vector<std::map<std::string, std::string>> rows;
  std::vector<std::size_t> widths;  // fields per row
  std::string text;

  std::vector<std::map<std::string, std::string>> of_kind(const std::string& kind) const {
    std::vector<std::map<std::string, std::string>> out;
    for (const auto& row : rows) {
      if (row.at("kind") == kind) out.push_back(row);
    }
    return out;
  }
};

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> fields(1);
  for (char c : line) {
    if (c == ',') {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  return fields;
}

Csv read_csv(const fs::path& path) {
  Csv csv;
  std::ifstream in(path);
  std::ostringstream all;
  all << in.rdbuf();
  csv.text = all.str();
  std::istringstream lines(csv.text);
  std::string line;
  std::getline(lines, line);
  csv.header = split(line);
  while (std::getline(lines, line)) {
    const auto fields = split(line);
    csv.widths.push_back(fields.size());
    std::map<std::string, std::string> row;
    for (std::size_t i = 0; i < fields.size() && i < csv.header.size(); ++i) {
      row[csv.header[i]] = fields[i];
    }
    csv.rows.push_back(row);
  }
  return csv;
}

/// Calls `count` until it returns at least `expected` or 30 s pass, and returns its last result:
/// rows handed over in the background reach the file a little after the hook that handed them over.
template <typename Count>
std::size_t count_within_30s(const Count& count, std::size_t expected) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::size_t counted = count();
  while (counted < expected && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    counted = count();
  }
  return counted;
}

/// The latest value of `metric` recorded in `epoch`.
double in_epoch(const MetricHistory& history, const std::string& metric, std::int64_t epoch) {
  const MetricPoint* found = nullptr;
  for (const auto& point : history.series(metric)) {
    if (point.epoch == epoch) found = &point;
  }
  BOOST_TEST_REQUIRE(found != nullptr);
  return found->value;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(csv_logger)

BOOST_AUTO_TEST_CASE(rows_equal_the_metric_history) {
  TempDir dir("csv");
  const auto path = dir.path / "logs" / "metrics.csv";  // the directory is created
  Run run(TrainerOptions().max_epochs(2));
  run.trainer.add(std::make_shared<CsvLogger>(CsvLoggerOptions(path.string()).step_freq(2)));
  auto train = make_batches(6, 4);
  auto validation = make_batches(2, 4, 4, 3, 11);
  run.trainer.fit(train, validation);

  const Csv csv = read_csv(path);
  const auto& history = run.trainer.state().metrics;
  BOOST_TEST(
      csv.header == (std::vector<std::string>{"kind", "step", "epoch", "wall_time", "step_loss",
                                              "lr", "train_loss_epoch", "val_loss"}),
      boost::test_tools::per_element());
  // 12 steps / step_freq 2 + 2 epochs.
  BOOST_TEST_REQUIRE(csv.rows.size() == 12u / 2 + 2);
  for (auto width : csv.widths) BOOST_TEST(width == csv.header.size());
  BOOST_TEST(csv.text.back() == '\n');

  const auto steps = csv.of_kind("step");
  BOOST_TEST_REQUIRE(steps.size() == 6u);
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const auto& row = steps[i];
    const std::int64_t step = std::stoll(row.at("step"));
    BOOST_TEST(step == static_cast<std::int64_t>(2 * (i + 1)));
    BOOST_TEST(std::stoll(row.at("epoch")) == (step <= 6 ? 0 : 1));
    BOOST_TEST(std::stod(row.at("step_loss")) == at_step(history, "train_loss", step));
    BOOST_TEST(std::stod(row.at("lr")) == 0.1);
    BOOST_TEST(std::stod(row.at("wall_time")) > 1.6e9);  // seconds since 1970
    BOOST_TEST(row.at("train_loss_epoch").empty());
    BOOST_TEST(row.at("val_loss").empty());
  }
  const auto epochs = csv.of_kind("epoch");
  BOOST_TEST_REQUIRE(epochs.size() == 2u);
  for (std::int64_t epoch = 0; epoch < 2; ++epoch) {
    const auto& row = epochs[epoch];
    BOOST_TEST(std::stoll(row.at("epoch")) == epoch);
    BOOST_TEST(std::stoll(row.at("step")) == 6 * (epoch + 1));
    BOOST_TEST(std::stod(row.at("train_loss_epoch")) ==
               in_epoch(history, "train_loss_epoch", epoch));
    BOOST_TEST(std::stod(row.at("val_loss")) == in_epoch(history, "val_loss", epoch));
    BOOST_TEST(std::stod(row.at("lr")) == 0.1);
    BOOST_TEST(row.at("step_loss").empty());
  }
  // Epoch rows come after the epoch's step rows.
  BOOST_TEST(csv.rows[3].at("kind") == "epoch");
  BOOST_TEST(csv.rows[7].at("kind") == "epoch");
}

// What is in the file while the run goes on: buffered rows reach it at a checkpoint (which is
// serialized after the loggers' StepEnd, as ModelCheckpoint's after(Role::Logger) does), not at an
// EpochEnd before flush_secs passed, and all of them at the end; with flush_secs(0) every row is
// there as soon as it is written.
BOOST_AUTO_TEST_CASE(rows_reach_the_file_at_checkpoints_at_the_end_or_at_once) {
  TempDir dir("csv");
  const auto count_rows = [](const fs::path& path, const std::string& kind) {
    const auto rows = read_csv(path).rows;
    return static_cast<std::int64_t>(std::count_if(
        rows.begin(), rows.end(), [&](const auto& row) { return row.at("kind") == kind; }));
  };
  auto train = make_batches(3, 4);
  {
    const auto path = dir.path / "buffered.csv";
    Run run(TrainerOptions().max_epochs(2));
    run.trainer.add(
        std::make_shared<CsvLogger>(CsvLoggerOptions(path.string()).step_freq(1).flush_secs(3600)));
    std::vector<std::int64_t> at_step_end, after_checkpoint, at_epoch_end;
    run.trainer.on(
        Event::StepEnd,
        [&](State& state) {
          at_step_end.push_back(count_rows(path, "step"));
          if (state.step == 2) {
            run.trainer.checkpoint_bytes();
            after_checkpoint.push_back(count_rows(path, "step"));
          }
        },
        200);
    run.trainer.on(
        Event::EpochEnd, [&](State&) { at_epoch_end.push_back(count_rows(path, "step")); }, 200);
    run.trainer.fit(train);
    // The first EpochEnd adds the train_loss_epoch column to a header the checkpoint wrote: the
    // file is rewritten with every row recorded so far. The second EpochEnd writes nothing.
    BOOST_TEST(at_step_end == (std::vector<std::int64_t>{0, 0, 2, 3, 3, 3}),
               boost::test_tools::per_element());
    BOOST_TEST(after_checkpoint == std::vector<std::int64_t>{2}, boost::test_tools::per_element());
    BOOST_TEST(at_epoch_end == (std::vector<std::int64_t>{3, 3}), boost::test_tools::per_element());
    BOOST_TEST(count_rows(path, "step") == 6);
    BOOST_TEST(count_rows(path, "epoch") == 2);
  }
  {
    const auto path = dir.path / "unbuffered.csv";
    Run run(TrainerOptions().max_epochs(2));
    run.trainer.add(
        std::make_shared<CsvLogger>(CsvLoggerOptions(path.string()).step_freq(1).flush_secs(0)));
    std::vector<std::int64_t> at_step_end;
    run.trainer.on(
        Event::StepEnd, [&](State&) { at_step_end.push_back(count_rows(path, "step")); }, 200);
    run.trainer.fit(train);
    BOOST_TEST(at_step_end == (std::vector<std::int64_t>{1, 2, 3, 4, 5, 6}),
               boost::test_tools::per_element());
  }
}

// save_state writes only state (a CsvLogger has none): rows reach the file through
// on_save_checkpoint, which the trainer calls for every checkpoint it takes.
BOOST_AUTO_TEST_CASE(rows_are_flushed_by_the_checkpoint_hook_not_by_save_state) {
  TempDir dir("csv");
  const auto path = dir.path / "rows.csv";
  const auto step_rows = [&] {
    const auto rows = read_csv(path).rows;
    return std::count_if(rows.begin(), rows.end(),
                         [](const auto& row) { return row.at("kind") == "step"; });
  };
  Run run(TrainerOptions().max_epochs(1));
  auto logger =
      std::make_shared<CsvLogger>(CsvLoggerOptions(path.string()).step_freq(1).flush_secs(3600));
  run.trainer.add(logger);
  std::vector<std::int64_t> after_save_state, after_checkpoint;
  run.trainer.on(
      Event::StepEnd,
      [&](State& state) {
        if (state.step != 2) return;
        torch::serialize::OutputArchive archive;
        logger->save_state(archive);
        after_save_state.push_back(step_rows());
        run.trainer.save_checkpoint(dir.path / "c.tbckpt");
        after_checkpoint.push_back(step_rows());
      },
      200);
  auto train = make_batches(3, 4);
  run.trainer.fit(train);
  BOOST_TEST(after_save_state == std::vector<std::int64_t>{0}, boost::test_tools::per_element());
  BOOST_TEST(after_checkpoint == std::vector<std::int64_t>{2}, boost::test_tools::per_element());
}

// flush_secs is checked at every StepEnd, not only when a row is written: a row is not kept
// in memory for the many steps until the next logged one. The rows handed over go to the file in
// the background, so the file is read until they arrive (or 30 s pass).
BOOST_AUTO_TEST_CASE(rows_are_flushed_once_flush_secs_passed_even_at_steps_without_a_row) {
  TempDir dir("csv");
  const auto path = dir.path / "metrics.csv";
  Run run;
  run.trainer.add(
      std::make_shared<CsvLogger>(CsvLoggerOptions(path.string()).step_freq(2).flush_secs(2.0)));
  run.trainer.on(Event::BatchStart, [](State& state) {
    if (state.step == 2) std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  });
  const auto rows = [&] { return read_csv(path).rows.size(); };
  std::vector<std::size_t> rows_at_step_end;
  run.trainer.on(
      Event::StepEnd,
      [&](State& state) {
        rows_at_step_end.push_back(count_within_30s(rows, state.step == 3 ? 1 : 0));
      },
      200);
  auto train = make_batches(4, 4);
  run.trainer.fit(train);
  // Step 2's row waits (less than 2 s since the file was opened), step 3 has no row but comes
  // more than 2 s later and hands it over.
  BOOST_TEST(rows_at_step_end == (std::vector<std::size_t>{0, 0, 1, 1}),
             boost::test_tools::per_element());
}

// A run shorter than flush_secs hands its rows over in batches of 128 while it runs, instead of
// leaving them all for ActionEnd: with flush_secs an hour the file holds nothing at step 127, the
// first 128 rows after step 128 (written in the background: read until they arrive), still only
// those at step 255, and every row at the end.
BOOST_AUTO_TEST_CASE(rows_are_handed_over_every_128_before_flush_secs_passed) {
  TempDir dir("csv");
  const auto path = dir.path / "metrics.csv";
  Run run;
  run.trainer.add(
      std::make_shared<CsvLogger>(CsvLoggerOptions(path.string()).step_freq(1).flush_secs(3600)));
  const auto step_rows = [&] { return read_csv(path).of_kind("step").size(); };
  std::map<std::int64_t, std::size_t> rows_at;
  run.trainer.on(
      Event::StepEnd,
      [&](State& state) {
        if (state.step == 127 || state.step == 255) rows_at[state.step] = step_rows();
        if (state.step == 200) rows_at[state.step] = count_within_30s(step_rows, 128);
      },
      200);
  auto train = make_batches(300, 2);
  run.trainer.fit(train);
  BOOST_TEST(rows_at[127] == 0u);
  BOOST_TEST(rows_at[200] == 128u);
  BOOST_TEST(rows_at[255] == 128u);
  const Csv csv = read_csv(path);
  BOOST_TEST(csv.of_kind("step").size() == 300u);
  BOOST_TEST(csv.of_kind("epoch").size() == 1u);
}

// Handed over at every StepEnd (flush_secs a nanosecond), batches of rows are formatted and written
// by background tasks one after another: the file holds every row once, in step order, each line
// complete; the file read during the run only grows, by whole rows.
BOOST_AUTO_TEST_CASE(rows_written_in_the_background_arrive_whole_once_and_in_order) {
  TempDir dir("csv");
  const auto path = dir.path / "metrics.csv";
  Run run(TrainerOptions().max_epochs(3));
  run.trainer.add(
      std::make_shared<CsvLogger>(CsvLoggerOptions(path.string()).step_freq(1).flush_secs(1e-9)));
  std::vector<std::size_t> sizes;
  run.trainer.on(
      Event::StepEnd, [&](State&) { sizes.push_back(read_csv(path).text.size()); }, 200);
  auto train = make_batches(40, 2);
  run.trainer.fit(train);

  BOOST_TEST(std::is_sorted(sizes.begin(), sizes.end()));
  const Csv csv = read_csv(path);
  BOOST_TEST(!csv.text.empty());
  BOOST_TEST(csv.text.back() == '\n');
  const auto steps = csv.of_kind("step");
  BOOST_TEST_REQUIRE(steps.size() == 120u);
  for (std::size_t i = 0; i < steps.size(); ++i) {
    BOOST_TEST(steps[i].at("step") == std::to_string(i + 1));
    BOOST_TEST(!steps[i].at("step_loss").empty());
  }
  BOOST_TEST(csv.of_kind("epoch").size() == 3u);
  for (const auto width : csv.widths) BOOST_TEST(width == csv.header.size());
}

// A write that fails (no space left on /dev/full), in the background or not, is thrown on the
// training thread, naming the file and the system's reason, by the next hand-over or at ActionEnd:
// the logger's error policy (Role::Logger: disable) disconnects it and the run completes. Rows
// recorded after the failure are reported lost when the logger is destroyed, without a reason
// from a stale errno.
BOOST_AUTO_TEST_CASE(a_write_that_fails_in_the_background_is_thrown_naming_the_file) {
  if (!fs::exists("/dev/full")) {
    BOOST_TEST_MESSAGE("no /dev/full here; skipped");
    return;
  }
  const std::string failed = "CsvLogger 'csv_logger': writing rows to '/dev/full' failed: ";
  for (const double flush_secs : {1e-9, 3600.0, 0.0}) {
    BOOST_TEST_CONTEXT("flush_secs " << flush_secs) {
      CapturedLog log;  // outlives the logger, whose destructor may log
      {
        Run run;
        run.trainer.add(std::make_shared<CsvLogger>(
            CsvLoggerOptions("/dev/full").step_freq(1).flush_secs(flush_secs)));
        auto train = make_batches(3, 4);
        BOOST_CHECK_NO_THROW(run.trainer.fit(train));
        BOOST_TEST(run.trainer.state().step == 3);
        const auto& failures = run.trainer.bus().subscriber_failures();
        BOOST_TEST_REQUIRE(failures.size() == 1u);
        BOOST_TEST(failures[0].subscriber == "csv_logger");
        BOOST_TEST(failures[0].disabled);
        BOOST_TEST(has(failures[0].first_error, failed + "No space left on device"));
      }
      // With a hand-over at every step the failure is thrown at step 2's, whose row then stays
      // recorded: the destructor reports it.
      const auto errors = log.messages("error", failed);
      if (flush_secs == 1e-9) {
        BOOST_TEST(std::count(errors.begin(), errors.end(),
                              failed + "an earlier write to it failed") == 1);
      }
      for (const auto& message : errors) {
        BOOST_TEST((contains(message, failed + "No space left on device") ||
                    contains(message, failed + "an earlier write to it failed")),
                   message);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_metric_that_appears_later_widens_the_header_once) {
  TempDir dir("csv");
  const auto path = dir.path / "metrics.csv";
  Run run(TrainerOptions().max_epochs(3));
  // A metric producer that only starts recording in the second epoch.
  run.trainer.on(
      Event::EpochEnd,
      [](State& state) {
        if (state.epoch >= 1)
          state.record_metric("accuracy", 0.25 * static_cast<double>(state.epoch));
      },
      -100);
  run.trainer.add(std::make_shared<CsvLogger>(CsvLoggerOptions(path.string()).step_freq(1)));
  auto train = make_batches(2, 4);
  run.trainer.fit(train);

  const Csv csv = read_csv(path);
  BOOST_TEST(
      csv.header == (std::vector<std::string>{"kind", "step", "epoch", "wall_time", "step_loss",
                                              "lr", "train_loss_epoch", "accuracy"}),
      boost::test_tools::per_element());
  BOOST_TEST(csv.text.find("kind,", 1) == std::string::npos);  // one header
  BOOST_TEST_REQUIRE(csv.rows.size() == 6u + 3);
  for (auto width : csv.widths) BOOST_TEST(width == csv.header.size());
  const auto epochs = csv.of_kind("epoch");
  BOOST_TEST(epochs[0].at("accuracy").empty());
  BOOST_TEST(std::stod(epochs[1].at("accuracy")) == 0.25);
  BOOST_TEST(std::stod(epochs[2].at("accuracy")) == 0.5);
}

BOOST_AUTO_TEST_CASE(append_mode_continues_the_file_on_a_second_run) {
  TempDir dir("csv");
  const auto path = dir.path / "metrics.csv";
  auto train = make_batches(3, 4);
  std::vector<double> losses;
  for (int run_index = 0; run_index < 2; ++run_index) {
    Run run;
    run.trainer.add(
        std::make_shared<CsvLogger>(CsvLoggerOptions(path.string()).step_freq(1).append(true)));
    run.trainer.fit(train);
    for (const auto& point : run.trainer.state().metrics.series("train_loss")) {
      losses.push_back(point.value);
    }
  }
  const Csv csv = read_csv(path);
  BOOST_TEST(csv.header.size() == 7u);
  const auto steps = csv.of_kind("step");
  BOOST_TEST_REQUIRE(steps.size() == 6u);
  BOOST_TEST(csv.of_kind("epoch").size() == 2u);
  for (std::size_t i = 0; i < steps.size(); ++i) {
    BOOST_TEST(std::stoll(steps[i].at("step")) == static_cast<std::int64_t>(i % 3 + 1));
    BOOST_TEST(std::stod(steps[i].at("step_loss")) == losses[i]);
  }
}

BOOST_AUTO_TEST_CASE(without_append_a_new_logger_replaces_the_file) {
  TempDir dir("csv");
  const auto path = dir.path / "metrics.csv";
  auto train = make_batches(3, 4);
  for (int run_index = 0; run_index < 2; ++run_index) {
    Run run;
    run.trainer.add(std::make_shared<CsvLogger>(CsvLoggerOptions(path.string()).step_freq(1)));
    run.trainer.fit(train);
  }
  BOOST_TEST(read_csv(path).rows.size() == 3u + 1);
}

BOOST_AUTO_TEST_CASE(a_resumed_run_drops_the_rows_written_after_its_checkpoint) {
  TempDir dir("csv");
  const auto path = dir.path / "metrics.csv";
  auto train = make_batches(4, 4);
  {
    // The first run: 2 epochs of 4 steps; it "checkpointed" at the end of epoch 0 (step 4).
    Run run(TrainerOptions().max_epochs(2));
    run.trainer.add(std::make_shared<CsvLogger>(CsvLoggerOptions(path.string()).step_freq(1)));
    run.trainer.fit(train);
  }
  {
    // ... and was killed while writing a row.
    std::ofstream partial(path, std::ios::app);
    partial << "step,9,2,17";
  }
  BOOST_TEST(read_csv(path).rows.size() == 8u + 2 + 1);

  // The resumed run restores the counters of the checkpoint (the end of epoch 0, step 4) before
  // the loggers' ActionStart.
  Run run(TrainerOptions().max_epochs(2));
  resume_after_a_run(run.trainer, TrainerOptions().max_epochs(1), train,
                     path.parent_path() / "epoch-0.tbckpt");
  run.trainer.add(
      std::make_shared<CsvLogger>(CsvLoggerOptions(path.string()).step_freq(1).append(true)));
  CapturedLog log;
  run.trainer.fit(train);

  const Csv csv = read_csv(path);
  const auto steps = csv.of_kind("step");
  BOOST_TEST_REQUIRE(steps.size() == 8u);  // each step once
  for (std::size_t i = 0; i < steps.size(); ++i) {
    BOOST_TEST(std::stoll(steps[i].at("step")) == static_cast<std::int64_t>(i + 1));
  }
  // Steps 5 to 8 are the resumed run's.
  const auto& history = run.trainer.state().metrics;
  for (std::int64_t step = 5; step <= 8; ++step) {
    BOOST_TEST(std::stod(steps[step - 1].at("step_loss")) == at_step(history, "train_loss", step));
  }
  const auto epochs = csv.of_kind("epoch");
  BOOST_TEST_REQUIRE(epochs.size() == 2u);
  BOOST_TEST(epochs[0].at("epoch") == "0");
  BOOST_TEST(epochs[1].at("epoch") == "1");
  BOOST_TEST(std::stod(epochs[1].at("train_loss_epoch")) ==
             in_epoch(history, "train_loss_epoch", 1));
  BOOST_TEST(csv.rows.size() == 10u);
  for (auto width : csv.widths) BOOST_TEST(width == csv.header.size());
  bool reported = false;
  for (const auto& message : log.messages("info")) {
    reported = reported || has(message, "dropped 5 rows");
  }
  BOOST_TEST(reported);
}

BOOST_AUTO_TEST_CASE(a_resumed_run_drops_the_columns_only_the_dropped_rows_filled) {
  TempDir dir("csv");
  const auto path = dir.path / "metrics.csv";
  auto train = make_batches(4, 4);
  // Metrics recorded at the EpochEnd of epoch 1 onwards, in the order `names` gives.
  const auto record_from_epoch_1 = [](Trainer& trainer, std::vector<std::string> names) {
    trainer.on(
        Event::EpochEnd,
        [names](State& state) {
          if (state.epoch < 1) return;
          for (const auto& name : names) state.record_metric(name, 0.5);
        },
        -100);
  };
  {
    // The first run: its epoch 1 adds the column `accuracy`, after the checkpoint of epoch 0.
    Run run(TrainerOptions().max_epochs(2));
    record_from_epoch_1(run.trainer, {"accuracy"});
    run.trainer.add(std::make_shared<CsvLogger>(CsvLoggerOptions(path.string()).step_freq(1)));
    run.trainer.fit(train);
  }
  BOOST_TEST(read_csv(path).header.back() == "accuracy");

  // The resumed run records `precision` before `accuracy`: its columns come in that order, as an
  // uninterrupted run's would, not in the order the dropped rows left.
  Run run(TrainerOptions().max_epochs(2));
  resume_after_a_run(run.trainer, TrainerOptions().max_epochs(1), train,
                     path.parent_path() / "epoch-0.tbckpt");
  record_from_epoch_1(run.trainer, {"precision", "accuracy"});
  run.trainer.add(
      std::make_shared<CsvLogger>(CsvLoggerOptions(path.string()).step_freq(1).append(true)));
  CapturedLog log;
  run.trainer.fit(train);

  const Csv csv = read_csv(path);
  BOOST_TEST(
      csv.header == (std::vector<std::string>{"kind", "step", "epoch", "wall_time", "step_loss",
                                              "lr", "train_loss_epoch", "precision", "accuracy"}),
      boost::test_tools::per_element());
  BOOST_TEST(csv.text.find("kind,", 1) == std::string::npos);  // one header
  for (auto width : csv.widths) BOOST_TEST(width == csv.header.size());
  const auto epochs = csv.of_kind("epoch");
  BOOST_TEST_REQUIRE(epochs.size() == 2u);
  BOOST_TEST(epochs[0].at("accuracy").empty());  // the kept row of epoch 0 lost no cell
  BOOST_TEST(!epochs[0].at("train_loss_epoch").empty());
  BOOST_TEST(std::stod(epochs[1].at("precision")) == 0.5);
  BOOST_TEST(std::stod(epochs[1].at("accuracy")) == 0.5);
  BOOST_TEST(csv.of_kind("step").size() == 8u);
  bool reported = false;
  for (const auto& message : log.messages("info")) {
    reported = reported || has(message, "and the columns only they filled: accuracy");
  }
  BOOST_TEST(reported);
}

BOOST_AUTO_TEST_CASE(a_missing_tensor_is_warned_about_once_and_its_cells_stay_empty) {
  TempDir dir("csv");
  const auto path = dir.path / "metrics.csv";
  Run run(TrainerOptions().max_epochs(2));
  run.trainer.add(std::make_shared<CsvLogger>(
      CsvLoggerOptions(path.string()).step_freq(1).tensors_to_log({"step_loss", "accuracy"})));
  auto train = make_batches(3, 4);
  CapturedLog log;
  run.trainer.fit(train);

  const auto warnings = log.messages("warning");
  BOOST_TEST_REQUIRE(warnings.size() == 1u);
  BOOST_TEST(has(warnings[0], "no tensor named 'accuracy' at step 1"));
  BOOST_TEST(has(warnings[0], "present: step_loss"));
  const Csv csv = read_csv(path);
  const auto steps = csv.of_kind("step");
  BOOST_TEST_REQUIRE(steps.size() == 6u);
  for (const auto& row : steps) {
    BOOST_TEST(row.at("accuracy").empty());
    BOOST_TEST(!row.at("step_loss").empty());
  }
}

BOOST_AUTO_TEST_CASE(an_unwritable_path_fails_at_action_start_and_the_action_still_ends) {
  TempDir dir("csv");
  const auto blocker = dir.path / "not_a_directory";
  std::ofstream(blocker) << "a file where a directory is expected\n";
  const auto path = blocker / "metrics.csv";

  Run run;
  auto& trainer = run.trainer;
  auto recorder = std::make_shared<RecordingCallback>();
  trainer.add(recorder);
  trainer.add(std::make_shared<CsvLogger>(CsvLoggerOptions(path.string())));
  auto train = make_batches(3, 4);
  const auto message = message_of<ConfigError>([&] { trainer.fit(train); });
  BOOST_TEST(has(message, "CsvLogger 'csv_logger': cannot create the directory"));
  BOOST_TEST(has(message, path.string()));
  BOOST_TEST(joined(recorder->events) == "ActionStart Exception ActionEnd");
}

BOOST_AUTO_TEST_CASE(appending_to_a_file_it_did_not_write_is_a_config_error) {
  TempDir dir("csv");
  const auto path = dir.path / "other.csv";
  std::ofstream(path) << "a,b,c\n1,2,3\n";
  Run run;
  run.trainer.add(std::make_shared<CsvLogger>(CsvLoggerOptions(path.string()).append(true)));
  auto train = make_batches(2, 4);
  const auto message = message_of<ConfigError>([&] { run.trainer.fit(train); });
  BOOST_TEST(has(message, "does not start with kind,step,epoch,wall_time"));
  BOOST_TEST(run.trainer.state().step == 0);
}

// The path is a std::filesystem::path, as ModelCheckpointOptions' directory; strings still convert.
static_assert(
    std::is_same_v<decltype(std::declval<const CsvLoggerOptions&>().path()), const fs::path&>);
static_assert(std::is_convertible_v<std::string, CsvLoggerOptions>);
static_assert(std::is_convertible_v<const char*, CsvLoggerOptions>);
static_assert(std::is_convertible_v<fs::path, CsvLoggerOptions>);

BOOST_AUTO_TEST_CASE(path_is_a_filesystem_path_and_strings_convert) {
  TempDir dir("csv");
  const fs::path path = dir.path / "a dir" / "metrics.csv";
  BOOST_TEST(CsvLoggerOptions(path).path() == path);
  BOOST_TEST(CsvLoggerOptions(path.string()).path() == path);
  BOOST_TEST(CsvLoggerOptions("m.csv").path() == fs::path("m.csv"));
  BOOST_TEST(CsvLoggerOptions("m.csv").path(path).path() == path);
  Run run;
  run.trainer.add(std::make_shared<CsvLogger>(path.string()));  // a string, as before
  run.trainer.add(std::make_shared<CsvLogger>(
      CsvLoggerOptions(dir.path / "other.csv").name("other").step_freq(1)));
  run.trainer.fit(make_batches(2, 4));
  BOOST_TEST(read_csv(path).header.front() == "kind");
  BOOST_TEST(read_csv(dir.path / "other.csv").of_kind("step").size() == 2u);
}

BOOST_AUTO_TEST_CASE(bad_options_are_config_errors) {
  BOOST_TEST(
      has(message_of<ConfigError>([] { CsvLogger logger(CsvLoggerOptions("m.csv").step_freq(0)); }),
          "step_freq must be >= 1, got 0"));
  BOOST_TEST(has(message_of<ConfigError>([] { CsvLogger logger(CsvLoggerOptions("")); }),
                 "path is empty"));
  BOOST_TEST(has(message_of<ConfigError>([] {
                   CsvLogger logger(CsvLoggerOptions("m.csv").tensors_to_log({"loss", "loss"}));
                 }),
                 "names 'loss' twice"));
  BOOST_TEST(has(message_of<ConfigError>(
                     [] { CsvLogger logger(CsvLoggerOptions("m.csv").tensors_to_log({"lr"})); }),
                 "clashes with a fixed column"));
  BOOST_TEST(has(
      message_of<ConfigError>([] { CsvLogger logger(CsvLoggerOptions("m.csv").flush_secs(-1)); }),
      "flush_secs must be a finite number of seconds >= 0 (0: flush every row), got -1"));
}

BOOST_AUTO_TEST_CASE(default_role_and_options) {
  CsvLogger logger(CsvLoggerOptions("m.csv"));
  BOOST_TEST((logger.role() == Role::Logger));
  BOOST_TEST(logger.name() == "csv_logger");
  BOOST_TEST(logger.options().step_freq() == 50);
  BOOST_TEST(!logger.options().append());
  BOOST_TEST(logger.options().flush_secs() == 1.0);
}

BOOST_AUTO_TEST_SUITE_END()
