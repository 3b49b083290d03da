#include <boost/test/unit_test.hpp>
#include <support/captured_log.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <support/scratch.hpp>
#include <torchbus/callbacks/model_checkpoint.hpp>
#include <torchbus/state_dict.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>

using namespace torchbus;
using namespace torchbus::testing;
namespace fs = std::filesystem;

namespace {

struct CheckpointRun : Run {
  explicit CheckpointRun(TrainerOptions options = TrainerOptions().max_epochs(2))
      : Run(std::move(options)) {}
  void fit(int batches = 4) {
    auto data = make_batches(batches, 4);
    trainer.fit(data);
  }
};

/// Fits 2 epochs of 4 batches with validation data, a checkpoint every `every_n_steps` steps
/// ranked by val_loss (all kept); returns the checkpoints kept, in step order, and val_loss.
std::pair<std::vector<ModelCheckpoint::KeptCheckpoint>, std::vector<MetricPoint>>
fit_ranked_by_val_loss(const std::string& name, TrainerOptions options,
                       std::int64_t every_n_steps) {
  CheckpointRun run(options.max_epochs(2));
  auto checkpoint = std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions(scratch_path("model_checkpoint", name))
          .every_n_steps(every_n_steps)
          .every_n_epochs(0)
          .monitor("val_loss")
          .save_top_k(-1)
          .background(false));
  run.trainer.add(checkpoint);
  auto train = make_batches(4, 4);
  auto validation = make_batches(2, 4, 4, 3, 11);
  run.trainer.fit(train, validation);
  auto kept = checkpoint->kept_checkpoints();
  for (std::size_t i = 1; i < kept.size(); ++i) {
    BOOST_TEST(kept[i - 1].value.value_or(0) <= kept[i].value.value_or(0));  // best first
  }
  std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return {kept, run.trainer.state().metrics.series("val_loss")};
}

/// What two ModelCheckpoints of one run keep: "best" (by val_loss, the best one and the newest,
/// at every epoch end; it resumes from its folder) and "periodic" (every 3 steps, all kept).
struct TwoCheckpoints {
  std::vector<ModelCheckpoint::KeptCheckpoint> best, periodic;
  std::set<std::string> best_files, periodic_files;
};

/// Fits up to `epochs` epochs of 4 steps with the two ModelCheckpoints in `root`/best and
/// `root`/periodic.
TwoCheckpoints fit_with_two_checkpoints(const fs::path& root, std::int64_t epochs) {
  CheckpointRun run(TrainerOptions().max_epochs(epochs));
  auto best = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions(root / "best")
                                                    .name("best")
                                                    .monitor("val_loss")
                                                    .save_top_k(1)
                                                    .resume(true));
  auto periodic = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions(root / "periodic")
                                                        .name("periodic")
                                                        .every_n_steps(3)
                                                        .every_n_epochs(0)
                                                        .save_top_k(-1));
  run.trainer.add(best);
  run.trainer.add(periodic);
  auto train = make_batches(4, 4);
  auto validation = make_batches(2, 4, 4, 3, 11);
  run.trainer.fit(train, validation);
  return {best->kept_checkpoints(), periodic->kept_checkpoints(), entry_names(root / "best"),
          entry_names(root / "periodic")};
}

/// The file names, steps and values of `kept`, as text.
std::vector<std::string> describe(const std::vector<ModelCheckpoint::KeptCheckpoint>& kept) {
  std::vector<std::string> out;
  for (const auto& k : kept) {
    out.push_back(k.path.filename().string() + " step " + std::to_string(k.step) + " value " +
                  (k.value ? std::to_string(*k.value) : "none"));
  }
  return out;
}

/// Lightning's top-k bookkeeping, transcribed from Lightning 2.x
/// src/lightning/pytorch/callbacks/model_checkpoint.py (commit b313cd9): check_monitor_top_k
/// (:514-531: save while fewer than k are kept, else only if `torch.lt` (min) / `torch.gt` (max)
/// than the kth value) and _update_best_and_save (:720-747: drop the kth, store a NaN as +inf
/// (min) / -inf (max), the kth is `max` (min) / `min` (max) of the dict, i.e. the first inserted of
/// the worst). Returns, after each score (checkpoint i at step i + 1), the steps kept, sorted.
std::vector<std::vector<std::int64_t>> lightning_top_k(const std::vector<double>& scores,
                                                       std::size_t k, Mode mode) {
  const bool min = mode == Mode::Min;
  std::vector<std::pair<std::int64_t, double>> best_k;  // a Python dict: insertion order
  std::int64_t kth_step = -1;
  std::vector<std::vector<std::int64_t>> kept_after;
  for (std::size_t i = 0; i < scores.size(); ++i) {
    double current = scores[i];
    bool save = best_k.size() < k;
    auto kth = std::find_if(best_k.begin(), best_k.end(),
                            [&](const auto& entry) { return entry.first == kth_step; });
    if (!save) save = min ? current < kth->second : current > kth->second;  // NaN: false
    if (save) {
      if (best_k.size() == k) best_k.erase(kth);
      if (std::isnan(current)) current = min ? INFINITY : -INFINITY;
      best_k.emplace_back(static_cast<std::int64_t>(i + 1), current);
      if (best_k.size() == k) {
        auto worst = best_k.begin();  // Python's max/min return the first of equal ones
        for (auto it = best_k.begin(); it != best_k.end(); ++it) {
          if (min ? it->second > worst->second : it->second < worst->second) worst = it;
        }
        kth_step = worst->first;
      }
    }
    std::vector<std::int64_t> steps;
    for (const auto& entry : best_k) steps.push_back(entry.first);
    std::sort(steps.begin(), steps.end());
    kept_after.push_back(steps);
  }
  return kept_after;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(model_checkpoint)

BOOST_AUTO_TEST_CASE(saves_at_the_expected_steps_and_links_last) {
  const auto folder = scratch_path("model_checkpoint", "steps");
  CheckpointRun run;
  auto checkpoint = std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions(folder).every_n_steps(3).every_n_epochs(0).save_top_k(-1));
  run.trainer.add(checkpoint);
  run.fit();
  BOOST_TEST(
      entry_names(folder) == (std::set<std::string>{"epoch-000-step-000003.tbckpt",
                                                    "epoch-001-step-000006.tbckpt", "last.tbckpt"}),
      boost::test_tools::per_element());
  BOOST_TEST(fs::read_symlink(folder / "last.tbckpt") == "epoch-001-step-000006.tbckpt");
  CheckpointHeader header;
  read_checkpoint_payload(folder / "last.tbckpt", &header);
  BOOST_TEST(header.step == 6);
}

// Background writes: the link and the pruning follow each write on the writer's thread, so the
// training thread never waits for the disk before the next checkpoint; the files are as with
// synchronous writes once fit() returns.
BOOST_AUTO_TEST_CASE(background_writes_keep_the_same_files_and_link_as_synchronous_ones) {
  std::vector<std::set<std::string>> files;
  for (const bool background : {false, true}) {
    const auto folder =
        scratch_path("model_checkpoint", background ? "pruned_background" : "pruned_sync");
    CheckpointRun run;
    run.trainer.add(std::make_shared<ModelCheckpoint>(
        ModelCheckpointOptions(folder).every_n_steps(1).every_n_epochs(0).save_top_k(2).background(
            background)));
    run.fit();
    files.push_back(entry_names(folder));
    BOOST_TEST(fs::read_symlink(folder / "last.tbckpt") == "epoch-001-step-000008.tbckpt");
  }
  BOOST_TEST(files[0] == (std::set<std::string>{"epoch-001-step-000007.tbckpt",
                                                "epoch-001-step-000008.tbckpt", "last.tbckpt"}),
             boost::test_tools::per_element());
  BOOST_TEST(files[1] == files[0], boost::test_tools::per_element());
}

// A background write that fails surfaces on the training thread at a later boundary, naming the
// file, and fails the run (ModelCheckpoint's error policy: propagate).
BOOST_AUTO_TEST_CASE(a_failed_background_write_fails_the_run_naming_the_file) {
  const auto folder = scratch_path("model_checkpoint", "background_failure");
  CheckpointRun run;
  run.trainer.add(std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions(folder).every_n_steps(1).every_n_epochs(0)));
  bool exception_fired = false;
  run.trainer.on(Event::Exception, [&](State&) { exception_fired = true; });
  // After ActionStart created the folder, a file takes its place: every write into it fails.
  run.trainer.on(Event::EpochStart, once(1), [&](State&) {
    fs::remove_all(folder);
    std::ofstream(folder) << "a file where the checkpoint folder was\n";
  });
  CapturedLog log;
  const auto message = message_of<CheckpointError>([&] { run.fit(); });
  BOOST_TEST(
      has(message, "the background write of checkpoint " + (folder / "epoch-000-step-").string()));
  BOOST_TEST(exception_fired);
  fs::remove(folder);
}

// An exception mid-step closes StepEnd and EpochEnd on its way out: the checkpoint does not try to
// save there (it could not: a checkpoint needs a step boundary) and logs nothing about it.
BOOST_AUTO_TEST_CASE(an_exception_mid_step_saves_nothing_and_logs_no_error) {
  const auto folder = scratch_path("model_checkpoint", "exception");
  CheckpointRun run;
  run.trainer.add(std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions(folder).every_n_steps(1).every_n_epochs(1).background(false)));
  run.trainer.on(Event::AfterBackward, [](State& state) {
    if (state.step == 2) throw std::runtime_error("injected");
  });
  CapturedLog log;
  BOOST_CHECK_THROW(run.fit(), std::runtime_error);
  BOOST_TEST(
      entry_names(folder) == (std::set<std::string>{"epoch-000-step-000001.tbckpt",
                                                    "epoch-000-step-000002.tbckpt", "last.tbckpt"}),
      boost::test_tools::per_element());
  const auto errors = log.messages("error");
  BOOST_TEST(errors.empty(), (errors.empty() ? std::string() : errors.front()));
}

BOOST_AUTO_TEST_CASE(keeps_the_best_k_by_a_monitored_metric) {
  const auto folder = scratch_path("model_checkpoint", "best");
  CheckpointRun run(TrainerOptions().max_epochs(1));
  // A scripted metric, recorded before the checkpoint runs: best at steps 2 and 4.
  const std::vector<double> scores{0.9, 0.2, 0.8, 0.1, 0.7, 0.6};
  run.trainer.on(Event::StepEnd, [&](State& s) { s.record_metric("score", scores[s.step - 1]); });
  auto checkpoint = std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions(folder).every_n_steps(1).every_n_epochs(0).monitor("score").save_top_k(
          2));
  run.trainer.add(checkpoint);
  run.fit(6);
  // The two best, plus the newest that `last` points to.
  BOOST_TEST(
      entry_names(folder) ==
          (std::set<std::string>{"epoch-000-step-000002.tbckpt", "epoch-000-step-000004.tbckpt",
                                 "epoch-000-step-000006.tbckpt", "last.tbckpt"}),
      boost::test_tools::per_element());
  BOOST_TEST(checkpoint->kept().front().filename() == "epoch-000-step-000004.tbckpt");
  for (const auto& path : checkpoint->kept()) BOOST_CHECK_NO_THROW(read_checkpoint_payload(path));
}

BOOST_AUTO_TEST_CASE(keeps_the_top_k_as_lightning_with_ties_and_nan) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Case {
    std::vector<double> scores;
    std::size_t k;
    Mode mode;
  };
  const std::vector<Case> cases{
      {{0.7, 0.7, 0.3, 0.3, 0.1}, 2, Mode::Min},  // issue 28: kept after 3 [2, 3]
      {{0.4, 0.6, 0.6, 0.2, 0.6, 0.6, 0.1}, 2, Mode::Min},
      {{0.5, nan, 0.4, nan, nan, 0.3, nan}, 2, Mode::Min},  // a later NaN never replaces
      {{nan, nan, 0.9, nan}, 2, Mode::Max},
      {{0.1, 0.3, 0.3, 0.2, 0.3, 0.9, 0.3}, 3, Mode::Max},
  };
  for (std::size_t c = 0; c < cases.size(); ++c) {
    BOOST_TEST_CONTEXT("case " << c) {
      const auto& scores = cases[c].scores;  // not a structured binding: lambdas capture it
      const auto k = cases[c].k;
      const auto mode = cases[c].mode;
      const auto folder = scratch_path("model_checkpoint", "lightning_" + std::to_string(c));
      CheckpointRun run(TrainerOptions().max_epochs(1));
      // Placed after the checkpoint by priority: ModelCheckpoint's after(Role::Metrics) puts it
      // first.
      run.trainer.on(
          Event::StepEnd, [&](State& s) { s.record_metric("score", scores[s.step - 1]); },
          with_role(Role::Metrics).with_priority(100));
      auto checkpoint = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions(folder)
                                                              .every_n_steps(1)
                                                              .every_n_epochs(0)
                                                              .monitor("score")
                                                              .mode(mode)
                                                              .save_top_k(k)
                                                              .save_last(false)
                                                              .background(false));
      run.trainer.add(checkpoint);
      std::vector<std::vector<std::int64_t>> kept_after;
      run.trainer.on(
          Event::StepEnd,
          [&](State&) {
            std::vector<std::int64_t> steps;
            for (const auto& kept : checkpoint->kept_checkpoints()) steps.push_back(kept.step);
            std::sort(steps.begin(), steps.end());
            kept_after.push_back(steps);
          },
          after(Role::Checkpoint));
      run.fit(static_cast<int>(scores.size()));
      const auto expected = lightning_top_k(scores, k, mode);
      BOOST_TEST_REQUIRE(kept_after.size() == expected.size());
      for (std::size_t i = 0; i < expected.size(); ++i) {
        BOOST_TEST_CONTEXT("after checkpoint " << i + 1) {
          BOOST_TEST(kept_after[i] == expected[i], boost::test_tools::per_element());
        }
      }
      // A NaN is kept as the worst value: +inf (Min) or -inf (Max), as Lightning stores it.
      for (const auto& kept : checkpoint->kept_checkpoints()) {
        if (std::isnan(scores[kept.step - 1])) {
          BOOST_TEST(*kept.value == (mode == Mode::Min ? INFINITY : -INFINITY));
        }
      }
    }
  }
}

// export_state_dict: a state_dict file with the weights of each checkpoint kept, pruned with it.
BOOST_AUTO_TEST_CASE(exports_the_weights_of_what_it_keeps_as_state_dicts) {
  const auto folder = scratch_path("model_checkpoint", "export");
  CheckpointRun run(TrainerOptions().max_epochs(1));
  const std::vector<double> scores{0.9, 0.2, 0.8, 0.1, 0.7, 0.6};
  std::map<std::int64_t, NamedTensors> weights;  // by step
  run.trainer.on(Event::StepEnd, [&](State& s) {
    s.record_metric("score", scores[s.step - 1]);
    for (const auto& [name, tensor] : state_dict_of(*s.model)) {
      weights[s.step].emplace_back(name, tensor.detach().clone());
    }
  });
  run.trainer.add(std::make_shared<ModelCheckpoint>(ModelCheckpointOptions(folder)
                                                        .every_n_steps(1)
                                                        .every_n_epochs(0)
                                                        .monitor("score")
                                                        .save_top_k(2)
                                                        .export_state_dict(true)));
  run.fit(6);
  BOOST_TEST(entry_names(folder) ==
                 (std::set<std::string>{"epoch-000-step-000002.tbckpt", "epoch-000-step-000002.pt",
                                        "epoch-000-step-000004.tbckpt", "epoch-000-step-000004.pt",
                                        "epoch-000-step-000006.tbckpt", "epoch-000-step-000006.pt",
                                        "last.tbckpt", "last.pt"}),
             boost::test_tools::per_element());
  BOOST_TEST(fs::read_symlink(folder / "last.pt") == "epoch-000-step-000006.pt");
  for (const std::int64_t step : {2, 4, 6}) {
    char name[32];
    std::snprintf(name, sizeof name, "epoch-000-step-%06lld.pt", static_cast<long long>(step));
    const auto exported = read_state_dict(folder / name);
    BOOST_TEST_REQUIRE(exported.size() == weights[step].size(), name);
    for (std::size_t i = 0; i < exported.size(); ++i) {
      BOOST_TEST(exported[i].first == weights[step][i].first);
      BOOST_TEST(torch::equal(exported[i].second, weights[step][i].second), name);
    }
  }
  BOOST_TEST(!torch::equal(weights[2].front().second, weights[4].front().second));
}

BOOST_AUTO_TEST_CASE(saves_when_stopped_and_resumes_from_its_folder) {
  const auto folder = scratch_path("model_checkpoint", "stop");
  {
    CheckpointRun run(TrainerOptions().max_epochs(3));
    run.trainer.on(Event::StepEnd, [](State& s) {  // a pause: the run goes on when resumed
      if (s.step == 5) s.request_stop("enough for now", StopKind::Interrupted);
    });
    run.trainer.add(
        std::make_shared<ModelCheckpoint>(ModelCheckpointOptions(folder).every_n_epochs(0)));
    run.fit();
  }
  BOOST_TEST(entry_names(folder).count("epoch-001-step-000005.tbckpt") == 1u);
  CheckpointRun resumed(TrainerOptions().max_epochs(3));
  std::int64_t step_at_start = -1;
  resumed.trainer.on(Event::ActionStart, [&](State& s) { step_at_start = s.step; });
  CapturedLog log;
  resumed.trainer.add(std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions(folder).every_n_epochs(0).resume(true)));
  resumed.fit();
  BOOST_TEST(step_at_start == 5);
  BOOST_TEST(resumed.trainer.state().step == 12);
  // The log counts epochs from 0, as state.epoch and the file names do.
  const auto lines = log.messages("info", "resumed from");
  BOOST_TEST_REQUIRE(lines.size() == 1u);
  BOOST_TEST(lines[0].find("epoch-001-step-000005.tbckpt at epoch 1, step 5, batch 1 of the "
                           "epoch") != std::string::npos,
             lines[0]);
}

BOOST_AUTO_TEST_CASE(a_fast_dev_run_starts_fresh_where_resume_true_would_resume) {
  const auto folder = scratch_path("model_checkpoint", "fast_dev_run_resume");
  {
    CheckpointRun run(TrainerOptions().max_epochs(1));
    run.trainer.add(std::make_shared<ModelCheckpoint>(ModelCheckpointOptions(folder)));
    run.fit();
    BOOST_TEST_REQUIRE(run.trainer.state().step == 4);
  }
  const auto before = entry_names(folder);
  // The quick check of the loop ignores the resume the callback asks for, and writes nothing.
  CheckpointRun quick(TrainerOptions().max_epochs(2).fast_dev_run(true));
  std::int64_t quick_start = -1;
  quick.trainer.on(Event::ActionStart, [&](State& s) { quick_start = s.step; });
  CapturedLog log;
  quick.trainer.add(std::make_shared<ModelCheckpoint>(ModelCheckpointOptions(folder).resume(true)));
  quick.fit();
  BOOST_TEST(quick_start == 0);
  BOOST_TEST(quick.trainer.state().step == 1);
  BOOST_TEST(log.messages("info", "fast_dev_run starts from scratch").size() == 1u);
  BOOST_TEST((entry_names(folder) == before));
  // An explicit resume_from is refused there, naming the conflict.
  CheckpointRun explicit_resume(TrainerOptions().max_epochs(2).fast_dev_run(true));
  explicit_resume.trainer.resume_from(folder);
  BOOST_CHECK_EXCEPTION(explicit_resume.fit(), ConfigError, [](const ConfigError& error) {
    return std::string(error.what()).find("fast_dev_run") != std::string::npos;
  });
  // Without fast_dev_run the same callback resumes.
  CheckpointRun resumed(TrainerOptions().max_epochs(2));
  std::int64_t resumed_start = -1;
  resumed.trainer.on(Event::ActionStart, [&](State& s) { resumed_start = s.step; });
  resumed.trainer.add(
      std::make_shared<ModelCheckpoint>(ModelCheckpointOptions(folder).resume(true)));
  resumed.fit();
  BOOST_TEST(resumed_start == 4);
  BOOST_TEST(resumed.trainer.state().step == 8);
}

BOOST_AUTO_TEST_CASE(state_round_trips_through_save_and_load) {
  const auto folder = scratch_path("model_checkpoint", "state");
  CheckpointRun run(TrainerOptions().max_epochs(1));
  run.trainer.on(Event::StepEnd, [](State& s) { s.record_metric("score", 1.0 / s.step); });
  auto checkpoint = std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions(folder).every_n_steps(1).every_n_epochs(0).monitor("score").mode(
          Mode::Max));
  run.trainer.add(checkpoint);
  run.fit(4);
  torch::serialize::OutputArchive out;
  checkpoint->save_state(out);
  std::stringstream bytes;
  out.save_to(bytes);
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  ModelCheckpoint restored{ModelCheckpointOptions(folder)};
  restored.load_state(in);
  BOOST_TEST(restored.kept() == checkpoint->kept(), boost::test_tools::per_element());
}

// A run directory copied elsewhere and resumed there prunes its own files, never the original's:
// the kept checkpoints are saved by file name.
BOOST_AUTO_TEST_CASE(a_copied_run_resumed_elsewhere_leaves_the_original_alone) {
  const auto original = scratch_path("model_checkpoint", "original");
  const auto copy = scratch_path("model_checkpoint", "copy");
  {
    CheckpointRun run(TrainerOptions().max_epochs(1));
    run.trainer.add(std::make_shared<ModelCheckpoint>(
        ModelCheckpointOptions(original).every_n_steps(1).every_n_epochs(0)));
    run.fit(4);
  }
  const auto before = entry_names(original);
  BOOST_TEST(before.size() == 4u);  // top 3 and the last link
  fs::create_directories(copy);
  fs::copy(original, copy, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  CheckpointRun resumed(TrainerOptions().max_epochs(2));
  resumed.trainer.add(std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions(copy).every_n_steps(1).every_n_epochs(0).resume(true)));
  resumed.fit(4);
  BOOST_TEST(resumed.trainer.state().step == 8);
  BOOST_TEST((entry_names(original) == before));
  BOOST_TEST(entry_names(copy).count("epoch-001-step-000008.tbckpt") == 1u);
  BOOST_TEST(entry_names(copy).count("epoch-000-step-000002.tbckpt") == 0u);  // pruned there
}

BOOST_AUTO_TEST_CASE(bad_input) {
  const auto file = scratch_path("model_checkpoint", "is_a_file");
  std::ofstream(file) << "x";
  CheckpointRun run;
  run.trainer.add(std::make_shared<ModelCheckpoint>(ModelCheckpointOptions(file)));
  BOOST_CHECK_EXCEPTION(run.fit(), ConfigError, [](const ConfigError& e) {
    return std::string(e.what()).find("exists and is not a directory") != std::string::npos;
  });
  BOOST_CHECK_THROW(ModelCheckpoint(ModelCheckpointOptions("x").save_top_k(-2)), ConfigError);
  BOOST_CHECK_THROW(ModelCheckpoint(ModelCheckpointOptions("")), ConfigError);
  BOOST_CHECK_EXCEPTION(ModelCheckpoint(ModelCheckpointOptions("x").pending_writes(0)), ConfigError,
                        [](const ConfigError& e) {
                          return std::string(e.what()).find("pending_writes must be >= 1, got 0") !=
                                 std::string::npos;
                        });
}

// Each step checkpoint is ranked by the validation of its own step (val_every_n_steps runs after
// StepEnd, the checkpoint waits for its EvalEnd), not by the one before.
BOOST_AUTO_TEST_CASE(a_step_checkpoint_is_ranked_by_the_validation_of_its_step) {
  const auto [kept, val_loss] = fit_ranked_by_val_loss(
      "ranked_by_own_validation", TrainerOptions().val_every_n_epochs(0).val_every_n_steps(2), 2);
  BOOST_TEST_REQUIRE(val_loss.size() == 4u);  // steps 2, 4, 6, 8
  BOOST_TEST_REQUIRE(kept.size() == 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    BOOST_TEST(kept[i].step == val_loss[i].step);
    BOOST_TEST_REQUIRE(kept[i].value.has_value());
    BOOST_TEST(*kept[i].value == val_loss[i].value, "step " << kept[i].step);
  }
}

// The last step of an epoch is saved at StepEnd before the epoch's validation exists; EpochEnd
// takes it again, ranked by that validation.
BOOST_AUTO_TEST_CASE(a_checkpoint_before_the_epochs_validation_is_rescored_at_epoch_end) {
  const auto [kept, val_loss] =
      fit_ranked_by_val_loss("rescored_at_epoch_end", TrainerOptions(), 4);
  BOOST_TEST_REQUIRE(val_loss.size() == 2u);  // epoch ends: steps 4 and 8
  BOOST_TEST_REQUIRE(kept.size() == 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    BOOST_TEST(kept[i].step == val_loss[i].step);
    BOOST_TEST_REQUIRE(kept[i].value.has_value());
    BOOST_TEST(*kept[i].value == val_loss[i].value);
  }
}

// A monitored metric that does not exist yet never ends a run: checkpoints before it are kept
// unranked (after the ranked ones, newest first) and the run goes on.
BOOST_AUTO_TEST_CASE(checkpoints_before_the_monitored_metric_exists_are_kept_unranked) {
  const auto folder = scratch_path("model_checkpoint", "unranked");
  CheckpointRun run(TrainerOptions().max_epochs(1));
  run.trainer.on(Event::StepEnd, [](State& s) {
    if (s.step >= 4) s.record_metric("score", 10.0 - static_cast<double>(s.step));
  });
  auto checkpoint = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions(folder)
                                                          .every_n_steps(1)
                                                          .every_n_epochs(0)
                                                          .monitor("score")
                                                          .save_top_k(3)
                                                          .background(false));
  run.trainer.add(checkpoint);
  BOOST_REQUIRE_NO_THROW(run.fit(6));
  BOOST_TEST(run.trainer.state().step == 6);
  // Ranked: steps 6 (4.0), 5 (5.0), 4 (6.0); the unranked 1-3 were pruned first.
  const auto kept = checkpoint->kept_checkpoints();
  BOOST_TEST_REQUIRE(kept.size() == 3u);
  BOOST_TEST(kept[0].step == 6);
  BOOST_TEST(*kept[0].value == 4.0);
  BOOST_TEST(kept[2].step == 4);
  BOOST_TEST(*kept[2].value == 6.0);

  // A run that stops before the metric exists still saves, unranked.
  const auto early = scratch_path("model_checkpoint", "unranked_stop");
  CheckpointRun stopped(TrainerOptions().max_epochs(1));
  stopped.trainer.on(Event::StepEnd, [](State& s) {
    if (s.step == 2) s.request_stop("stop before any validation");
  });
  auto on_stop = std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions(early).every_n_epochs(1).monitor("val_loss").background(false));
  stopped.trainer.add(on_stop);
  BOOST_REQUIRE_NO_THROW(stopped.fit(6));
  const auto saved = on_stop->kept_checkpoints();
  BOOST_TEST_REQUIRE(saved.size() == 1u);
  BOOST_TEST(saved[0].step == 2);
  BOOST_TEST(!saved[0].value.has_value());
  BOOST_TEST(fs::exists(early / "epoch-000-step-000002.tbckpt"));
}

BOOST_AUTO_TEST_CASE(two_instances_keep_their_own_checkpoints_and_both_resume) {
  const auto uninterrupted_root = scratch_path("model_checkpoint", "two_uninterrupted");
  const auto resumed_root = scratch_path("model_checkpoint", "two_resumed");
  const auto uninterrupted = fit_with_two_checkpoints(uninterrupted_root, 4);
  fit_with_two_checkpoints(resumed_root, 2);
  const auto resumed = fit_with_two_checkpoints(resumed_root, 4);  // from best/, at step 8

  BOOST_TEST(
      uninterrupted.periodic_files ==
          (std::set<std::string>{"epoch-000-step-000003.tbckpt", "epoch-001-step-000006.tbckpt",
                                 "epoch-002-step-000009.tbckpt", "epoch-002-step-000012.tbckpt",
                                 "epoch-003-step-000015.tbckpt", "last.tbckpt"}),
      boost::test_tools::per_element());
  // The best one and the newest (here the same), with last.tbckpt.
  BOOST_TEST(uninterrupted.best_files.count("epoch-003-step-000016.tbckpt") == 1u);
  BOOST_TEST(uninterrupted.best_files.count("last.tbckpt") == 1u);
  BOOST_TEST(uninterrupted.best_files.size() == uninterrupted.best.size() + 1);
  // Each resumed with its own state: the same files, steps and scores as without the break (the
  // checkpoint resumed from is pruned like any other).
  BOOST_TEST(describe(resumed.best) == describe(uninterrupted.best),
             boost::test_tools::per_element());
  BOOST_TEST(describe(resumed.periodic) == describe(uninterrupted.periodic),
             boost::test_tools::per_element());
  BOOST_TEST(resumed.best_files == uninterrupted.best_files, boost::test_tools::per_element());
  BOOST_TEST(resumed.periodic_files == uninterrupted.periodic_files,
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(the_name_comes_from_the_options) {
  BOOST_TEST(ModelCheckpoint(ModelCheckpointOptions("a")).name() == "model_checkpoint");
  BOOST_TEST(ModelCheckpoint(ModelCheckpointOptions("a").name("best")).name() == "best");
}

BOOST_AUTO_TEST_SUITE_END()
