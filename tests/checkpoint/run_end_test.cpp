// A run's end is part of its state: a checkpoint taken at a finishing stop makes a resume train
// nothing; an interruption resumes; a checkpoint that cannot be read for any reason is named and
// skipped, and odd entries of a checkpoint folder are never followed.

#include "resume_setup.hpp"

#include <boost/test/unit_test.hpp>
#include <support/reframe_checkpoint.hpp>
#include <support/same_series.hpp>
#include <support/scratch.hpp>
#include <torchbus/callbacks/early_stopping.hpp>
#include <torchbus/callbacks/learning_rate_scheduler.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <tuple>
#include <vector>

using namespace torchbus;
using namespace torchbus::testing;
namespace fs = std::filesystem;

namespace {

/// Runs ResumeRun, stops it at step 5 with `kind` and saves a checkpoint at that StepEnd.
ResumeRun& stopped_run(ResumeRun& run, StopKind kind, const fs::path& file) {
  run.trainer.on(Event::StepEnd, [&, kind](State& s) {
    if (s.step != 5) return;
    s.request_stop("enough at step 5", kind);
    run.trainer.save_checkpoint(file);
  });
  run.fit();
  return run;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(run_end)

BOOST_AUTO_TEST_CASE(a_finished_stop_is_kept_and_a_resume_trains_nothing) {
  const auto file = scratch("run_end", "finished") / "stop.tbckpt";
  ResumeRun first;
  stopped_run(first, StopKind::Finished, file);
  BOOST_TEST(first.trainer.state().step == 5);
  BOOST_TEST(read_checkpoint_position(file).stop_reason == "enough at step 5");

  ResumeRun resumed(/*init_seed=*/99);
  std::string events;
  for (const auto event : {Event::ActionStart, Event::EpochStart, Event::StepStart,
                           Event::BatchStart, Event::EpochEnd, Event::ActionEnd}) {
    resumed.trainer.on(event,
                       [&events, event](State&) { events += std::string(to_string(event)) + " "; });
  }
  resumed.trainer.resume_from(file);
  resumed.fit();
  BOOST_TEST(events == "ActionStart ActionEnd ");
  BOOST_TEST(resumed.seen.empty());
  BOOST_TEST(resumed.trainer.state().step == 5);
  BOOST_TEST(resumed.trainer.state().stop_requested());
  BOOST_TEST((resumed.trainer.state().stop_kind() == StopKind::Finished));
  BOOST_TEST(resumed.trainer.state().stop_reason() == "enough at step 5");
  const auto a = first.model->parameters();
  const auto b = resumed.model->parameters();
  for (std::size_t i = 0; i < a.size(); ++i) BOOST_TEST(torch::equal(a[i], b[i]));

  // A fresh fit() of the same trainer is a new run: the stop is forgotten.
  resumed.fit();
  BOOST_TEST(resumed.trainer.state().step == 12);
}

BOOST_AUTO_TEST_CASE(an_interruption_resumes_to_the_uninterrupted_weights) {
  ResumeRun uninterrupted;
  uninterrupted.fit();
  const auto file = scratch("run_end", "interrupted") / "stop.tbckpt";
  ResumeRun first;
  stopped_run(first, StopKind::Interrupted, file);
  BOOST_TEST(first.trainer.state().step == 5);
  BOOST_TEST(read_checkpoint_position(file).stop_reason.empty());

  ResumeRun resumed(/*init_seed=*/99);
  resumed.trainer.resume_from(file);
  resumed.fit();
  BOOST_TEST(!resumed.trainer.state().stop_requested());
  BOOST_TEST(resumed.trainer.state().step == 12);
  const auto a = uninterrupted.model->parameters();
  const auto b = resumed.model->parameters();
  for (std::size_t i = 0; i < a.size(); ++i) BOOST_TEST(torch::equal(a[i], b[i]));
}

// Stopped at step 5 (in the second epoch) or at the first EpochStart (before any metric), and
// checkpointed at the stop's EpochEnd or ActionEnd, after the cut-short epoch recorded its loss
// mean and a subscriber its own epoch metric: the resumed run's metric history is the
// uninterrupted run's, each epoch's end recorded once; a schedule per epoch (which records the lr
// of every step) advances, and EarlyStopping checks, once per epoch.
BOOST_AUTO_TEST_CASE(an_interruption_resumes_to_the_uninterrupted_metric_history) {
  const auto observe_epochs = [](ResumeRun& run) {
    run.trainer.on(Event::EpochEnd, [](State& s) {
      s.record_metric("batches_in_epoch", static_cast<double>(s.batch_in_epoch));
    });
    run.trainer.add(std::make_shared<LearningRateScheduler>(
        StepDecayOptions(1).gamma(0.5),
        LearningRateSchedulerOptions().interval(ScheduleInterval::Epoch)));
    // Checks every epoch's mean once (Max: the falling loss makes every check after the first
    // one without improvement, so a check of the cut-short end would show in wait()).
    auto stopping = std::make_shared<EarlyStopping>(EarlyStoppingOptions()
                                                        .monitor("train_loss_epoch")
                                                        .mode(Mode::Max)
                                                        .check_on(Event::EpochEnd)
                                                        .patience(100));
    run.trainer.add(stopping);
    return stopping;
  };
  ResumeRun uninterrupted;
  const auto expected_stopping = observe_epochs(uninterrupted);
  uninterrupted.fit();
  const auto& expected = uninterrupted.trainer.state().metrics;
  for (const auto stopped_at : {Event::StepEnd, Event::EpochStart}) {
    for (const auto saved_at : {Event::EpochEnd, Event::ActionEnd}) {
      BOOST_TEST_CONTEXT("stopped at " << to_string(stopped_at) << ", checkpoint at "
                                       << to_string(saved_at)) {
        const auto file = scratch("run_end", "history") / "stop.tbckpt";
        ResumeRun first;
        observe_epochs(first);
        first.trainer.on(stopped_at, [](State& s) {
          if (s.step == 5 || s.global_batch == 0) s.request_stop("stop", StopKind::Interrupted);
        });
        first.trainer.on(saved_at, [&](State&) { first.trainer.save_checkpoint(file); });
        first.fit();
        BOOST_TEST(first.trainer.state().metrics.length("batches_in_epoch") ==
                   (stopped_at == Event::StepEnd ? 2 : 1));

        ResumeRun resumed(/*init_seed=*/99);
        const auto stopping = observe_epochs(resumed);
        resumed.trainer.resume_from(file);
        resumed.fit();
        const auto& got = resumed.trainer.state().metrics;
        BOOST_TEST(got.names() == expected.names(), boost::test_tools::per_element());
        for (const auto& name : expected.names()) check_same_series(expected, got, name);
        BOOST_TEST(stopping->wait() == expected_stopping->wait());
        BOOST_TEST(stopping->best() == expected_stopping->best());
        const auto weights = uninterrupted.model->parameters();
        const auto resumed_weights = resumed.model->parameters();
        for (std::size_t i = 0; i < weights.size(); ++i) {
          BOOST_TEST(torch::equal(weights[i], resumed_weights[i]));
        }
      }
    }
  }
}

// Bytes changed inside the payload, then framed again with a matching CRC (as a forger, or a
// damage before framing, would): every load either succeeds or is a CheckpointError naming the
// file, never another exception; a folder resume skips the damaged file for the older one.
BOOST_AUTO_TEST_CASE(a_damaged_payload_behind_a_valid_crc_is_a_named_checkpoint_error) {
  const auto folder = scratch("run_end", "damaged_payload");
  ResumeRun run;
  run.trainer.on(Event::StepEnd, [&](State& s) {
    if (s.step == 2 || s.step == 4) {
      run.trainer.save_checkpoint(folder / ("step-" + std::to_string(s.step) + ".tbckpt"));
    }
  });
  run.fit();
  const auto original = read_text(folder / "step-4.tbckpt");
  const auto payload = read_checkpoint_payload(folder / "step-4.tbckpt");
  const auto damaged = folder / "damaged" / "step-4.tbckpt";
  fs::create_directories(damaged.parent_path());
  int rejected = 0;
  const std::size_t trials = 48;
  for (std::size_t trial = 0; trial < trials; ++trial) {
    auto changed = payload;
    const auto offset = payload.size() * trial / trials;
    for (std::size_t i = offset; i < std::min(payload.size(), offset + 4); ++i) changed[i] = '`';
    std::ofstream(damaged, std::ios::binary | std::ios::trunc)
        << reframe_checkpoint(original, payload.size(), changed);
    ResumeRun target(77);
    for (const auto& load :
         {std::function<void()>([&] { target.trainer.load_checkpoint(damaged); }),
          std::function<void()>([&] { read_checkpoint_position(damaged); })}) {
      try {
        load();
      } catch (const CheckpointError& error) {
        ++rejected;
        BOOST_TEST(std::string(error.what()).find(damaged.string()) != std::string::npos,
                   error.what());
      } catch (const std::exception& error) {
        BOOST_ERROR("offset " << offset << ": not a CheckpointError: " << error.what());
      }
    }
  }
  BOOST_TEST_MESSAGE(rejected << " of " << 2 * trials << " loads of damaged payloads refused");
  BOOST_TEST(rejected > 0);

  // A payload that is no archive at all, as the newest checkpoint of a folder: skipped, named.
  std::ofstream(folder / "step-4.tbckpt", std::ios::binary | std::ios::trunc)
      << reframe_checkpoint(original, payload.size(), "not an archive, though its CRC is right");
  BOOST_CHECK_NO_THROW(read_checkpoint_payload(folder / "step-4.tbckpt"));
  ResumeRun resumed(99);
  resumed.trainer.resume_from(folder);
  resumed.trainer.on(Event::ActionStart, [](State& s) { BOOST_TEST(s.step == 2); });
  resumed.fit();
  BOOST_TEST(resumed.trainer.state().step == 12);
}

// A payload that is an archive but holds an entry of the wrong type: the error names the file and
// the section that could not read it, and the model is untouched.
BOOST_AUTO_TEST_CASE(a_well_formed_payload_of_wrong_entries_names_its_section) {
  const auto folder = scratch("run_end", "wrong_entry");
  ResumeRun run;
  run.trainer.save_checkpoint(folder / "good.tbckpt");
  torch::serialize::OutputArchive archive;
  archive.write("format_version", c10::IValue(std::int64_t{1}));
  archive.write("position", c10::IValue(std::vector<std::int64_t>{0, 2, 0, 2}));
  archive.write("accumulate_grad_batches", c10::IValue(std::int64_t{1}));
  archive.write("parameters_names", c10::IValue(std::int64_t{7}));  // text in a real checkpoint
  std::ostringstream payload;
  archive.save_to(payload);
  const auto file = folder / "wrong.tbckpt";
  std::ofstream(file, std::ios::binary)
      << reframe_checkpoint(read_text(folder / "good.tbckpt"),
                            read_checkpoint_payload(folder / "good.tbckpt").size(), payload.str());
  ResumeRun target(77);
  const auto before = target.model->parameters()[0].clone();
  try {
    target.trainer.load_checkpoint(file);
    BOOST_ERROR("a checkpoint of wrong entries loaded");
  } catch (const CheckpointError& error) {
    const std::string what = error.what();
    BOOST_TEST(
        what.find(file.string() + " cannot be loaded (its model section): ") != std::string::npos,
        what);
  }
  BOOST_TEST(torch::equal(target.model->parameters()[0], before));
}

// The entries that place a resume in an epoch cut short (whether its order was drawn, the points
// its end recorded), malformed in a payload that is otherwise well formed: a CheckpointError that
// names the file and the entry; the same entries well formed read.
BOOST_AUTO_TEST_CASE(malformed_entries_of_an_epoch_cut_short_are_named) {
  const auto folder = scratch("run_end", "malformed_epoch_end");
  ResumeRun run;
  run.trainer.save_checkpoint(folder / "good.tbckpt");
  const auto original = read_text(folder / "good.tbckpt");
  const auto original_payload = read_checkpoint_payload(folder / "good.tbckpt").size();
  using Entries = std::function<void(torch::serialize::OutputArchive&)>;
  const auto ranges = [](std::vector<std::int64_t> values, std::int64_t rows) {
    return torch::tensor(values, torch::kLong).reshape({rows, -1});
  };
  // Writes a checkpoint of a position in epoch 1 with `entries`, and reads its position.
  const auto read_with = [&](const std::string& name, const Entries& entries) {
    torch::serialize::OutputArchive archive;
    archive.write("format_version", c10::IValue(std::int64_t{1}));
    archive.write("position", c10::IValue(std::vector<std::int64_t>{1, 6, 2, 6}));
    archive.write("accumulate_grad_batches", c10::IValue(std::int64_t{1}));
    entries(archive);
    std::ostringstream payload;
    archive.save_to(payload);
    const auto file = folder / (name + ".tbckpt");
    std::ofstream(file, std::ios::binary)
        << reframe_checkpoint(original, original_payload, payload.str());
    return read_checkpoint_position(file);
  };
  const auto names = [](const char* lines) { return c10::IValue(std::string(lines)); };

  BOOST_CHECK_NO_THROW(read_with("well_formed", [&](auto& archive) {
    archive.write("epoch_order_drawn", c10::IValue(true));
    archive.write("epoch_end_point_names", names("train_loss_epoch\nval_loss"));
    archive.write("epoch_end_point_ranges", ranges({1, 2, 0, 0}, 2));
  }));
  BOOST_TEST(read_with("none", [](auto&) {}).step == 6);  // a checkpoint before the entries

  const std::vector<std::tuple<std::string, std::string, Entries>> malformed = {
      {"drawn_not_a_bool", "'epoch_order_drawn'",
       [](auto& archive) { archive.write("epoch_order_drawn", c10::IValue(std::int64_t{1})); }},
      {"names_without_ranges", "'epoch_end_point'",
       [&](auto& archive) { archive.write("epoch_end_point_names", names("val_loss")); }},
      {"ranges_without_names", "'epoch_end_point'",
       [&](auto& archive) {
         archive.write("epoch_end_point_ranges", ranges({0, 1}, 1));
       }},
      {"names_not_text", "'epoch_end_point'",
       [&](auto& archive) {
         archive.write("epoch_end_point_names", c10::IValue(std::int64_t{3}));
         archive.write("epoch_end_point_ranges", ranges({0, 1}, 1));
       }},
      {"fewer_ranges_than_names", "'epoch_end_point_ranges' entry: 2 names, ranges of shape [1, 2]",
       [&](auto& archive) {
         archive.write("epoch_end_point_names", names("a\nb"));
         archive.write("epoch_end_point_ranges", ranges({0, 1}, 1));
       }},
      {"three_columns", "expected 1 x 2 int64",
       [&](auto& archive) {
         archive.write("epoch_end_point_names", names("a"));
         archive.write("epoch_end_point_ranges", ranges({0, 1, 2}, 1));
       }},
      {"float_ranges", "'epoch_end_point_ranges' entry",
       [&](auto& archive) {
         archive.write("epoch_end_point_names", names("a"));
         archive.write("epoch_end_point_ranges", torch::tensor({0.0, 1.0}).reshape({1, 2}));
       }},
      {"negative_begin", "points [-1, 2) of 'a'",
       [&](auto& archive) {
         archive.write("epoch_end_point_names", names("a"));
         archive.write("epoch_end_point_ranges", ranges({-1, 2}, 1));
       }},
      {"end_before_begin", "points [3, 2) of 'b'",
       [&](auto& archive) {
         archive.write("epoch_end_point_names", names("a\nb"));
         archive.write("epoch_end_point_ranges", ranges({0, 1, 3, 2}, 2));
       }},
  };
  for (const auto& [name, expected, entries] : malformed) {
    const auto file = folder / (name + ".tbckpt");
    try {
      read_with(name, entries);
      BOOST_ERROR(name << ": a malformed checkpoint was read");
    } catch (const CheckpointError& error) {
      const std::string what = error.what();
      BOOST_TEST(what.find(file.string()) != std::string::npos, name << ": " << what);
      BOOST_TEST(what.find(expected) != std::string::npos, name << ": " << what);
    }
  }
}

BOOST_AUTO_TEST_CASE(odd_entries_of_a_checkpoint_folder_are_skipped_never_followed) {
  const auto folder = scratch("run_end", "odd_entries");
  ResumeRun run;
  run.trainer.on(Event::StepEnd, [&](State& s) {
    if (s.step == 3) run.trainer.save_checkpoint(folder / "good.tbckpt");
  });
  run.fit();
  fs::create_symlink("loop.tbckpt", folder / "loop.tbckpt");  // a link to itself
  fs::create_symlink("good.tbckpt", folder / "link.tbckpt");
  fs::create_directory(folder / "folder.tbckpt");
  BOOST_TEST_REQUIRE(mkfifo((folder / "pipe.tbckpt").c_str(), 0600) == 0);
  std::vector<std::string> skipped;
  const auto found = valid_checkpoints(folder, &skipped);
  BOOST_TEST_REQUIRE(found.size() == 1u);
  BOOST_TEST(found.front().path == folder / "good.tbckpt");
  BOOST_TEST_REQUIRE(skipped.size() == 2u);  // the folder and the pipe; links are not followed
  for (const auto& message : skipped) {
    BOOST_TEST(message.find("is not a regular file") != std::string::npos, message);
  }
  ResumeRun resumed(99);
  resumed.trainer.resume_from(folder);
  resumed.fit();
  BOOST_TEST(resumed.trainer.state().step == 12);
}

BOOST_AUTO_TEST_SUITE_END()
