// torchbus-train on two ranks, launched as users launch it: under OpenMPI's mpirun, or with
// torchrun's variables set per process (where a test needs each rank's pid and exit code). The run
// directory, the data shards, failures, signals and --resume are read back from what it wrote.

#include "summary_json.hpp"

#include "run_train.hpp"

#include <boost/test/unit_test.hpp>
#include <distributed/launch.hpp>
#include <nlohmann/json.hpp>
#include <support/errors.hpp>
#include <support/scratch.hpp>
#include <support/tfrecord_reader.hpp>
#include <torchbus/state_dict.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using torchbus::testing::contains;
using torchbus::testing::has;
using torchbus::testing::json_number;
using torchbus::testing::json_string;
using torchbus::testing::kTrain;
using torchbus::testing::lacks;
using torchbus::testing::read_text;
using torchbus::testing::TempDir;
using torchbus::testing::wait_until_exists;
using torchbus::testing::wait_until_written;

namespace {

/// How one launch (one process, or mpirun with its ranks) ended.
struct Ended {
  int status = -1;     ///< exit code, 128 + N if signal N ended it, -1 if it outlived its limit
  std::string output;  ///< standard output and error (of every rank under mpirun)
};

/// The command that runs two ranks of torchbus-train `arguments` under mpirun, rendezvous at
/// 127.0.0.1:`port`.
std::vector<std::string> mpirun_command(const std::vector<std::string>& arguments, int port) {
  std::vector<std::string> command{"mpirun", "-np", "2", "--oversubscribe"};
  if (geteuid() == 0) command.push_back("--allow-run-as-root");
  for (const auto& variable :
       {std::string("MASTER_ADDR=127.0.0.1"), "MASTER_PORT=" + std::to_string(port)}) {
    command.push_back("-x");
    command.push_back(variable);
  }
  command.push_back(kTrain);
  command.insert(command.end(), arguments.begin(), arguments.end());
  return command;
}

/// torchbus-train `arguments` as one process's command.
std::vector<std::string> train_command(const std::vector<std::string>& arguments) {
  std::vector<std::string> command{kTrain};
  command.insert(command.end(), arguments.begin(), arguments.end());
  return command;
}

/// Waits up to `limit` for `pid` (started with its output in `log`).
Ended wait_for(pid_t pid, const fs::path& log, double limit = 180) {
  const auto status = torchbus::testing::wait_at_most(pid, std::chrono::duration<double>(limit));
  return Ended{status.value_or(-1), read_text(log)};
}

/// Runs `command` to its end, its output in `log`.
Ended run(const std::vector<std::string>& command, const fs::path& log) {
  return wait_for(torchbus::testing::spawn(command, {}, log), log);
}

/// Two ranks of torchbus-train started with torchrun's variables, rank r's output in
/// `logs`/rank<r>.log (the folder is created).
struct TorchrunPair {
  std::vector<pid_t> pids;  ///< rank 0's, rank 1's
  fs::path logs;            ///< the folder of their output
  TorchrunPair(const std::vector<std::string>& arguments, const fs::path& folder) : logs(folder) {
    fs::create_directories(logs);
    const auto port = torchbus::testing::free_port();
    for (int rank = 0; rank < 2; ++rank) {
      pids.push_back(torchbus::testing::spawn(
          train_command(arguments), torchbus::testing::torchrun_environment(rank, 2, port),
          log(rank)));
    }
  }
  /// The output of rank `rank`.
  fs::path log(int rank) const { return logs / ("rank" + std::to_string(rank) + ".log"); }
  /// How rank `rank` ended, waiting at most `limit` seconds.
  Ended wait(int rank, double limit = 180) const {
    return wait_for(pids[static_cast<std::size_t>(rank)], log(rank), limit);
  }
};

/// The pid of the process mpirun `parent` started as rank `rank` (OMPI_COMM_WORLD_RANK in its
/// environment), or -1.
pid_t mpirun_rank_pid(pid_t parent, int rank) {
  const std::string variable =
      std::string(1, '\0') + "OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + std::string(1, '\0');
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const auto name = entry.path().filename().string();
    if (!std::all_of(name.begin(), name.end(), [](char c) { return std::isdigit(c) != 0; })) {
      continue;
    }
    // /proc/<pid>/stat: "pid (command) state ppid ...".
    const auto stat = read_text(entry.path() / "stat");
    const auto command_end = stat.rfind(')');
    if (command_end == std::string::npos) continue;
    std::istringstream fields(stat.substr(command_end + 1));
    char state = 0;
    pid_t ppid = -1;
    fields >> state >> ppid;
    if (ppid != parent) continue;
    if ((std::string(1, '\0') + read_text(entry.path() / "environ")).find(variable) !=
        std::string::npos) {
      return static_cast<pid_t>(std::stol(name));
    }
  }
  return -1;
}

/// The entries of `directory` (names only).
std::set<std::string> entries(const fs::path& directory) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(directory)) {
    names.insert(entry.path().filename().string());
  }
  return names;
}

/// The lines of `text` that contain `part`.
std::vector<std::string> lines_with(const std::string& text, const std::string& part) {
  std::vector<std::string> found;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find(part) != std::string::npos) found.push_back(line);
  }
  return found;
}

/// torchbus-train's flags for the tests that resume on another number of ranks, with --out
/// `directory` and `extra`: 300 steps (128 an epoch at a global batch of 64) of a wider MLP, so
/// that a SIGKILL after step 30 comes in epoch 0 however fast the machine; checkpoints every 20.
std::vector<std::string> resharding_flags(const fs::path& directory,
                                          const std::vector<std::string>& extra) {
  std::vector<std::string> arguments{"--epochs",
                                     "3",
                                     "--max-steps",
                                     "300",
                                     "--checkpoint-every",
                                     "20",
                                     "--hidden",
                                     "256",
                                     "256",
                                     "--log-every",
                                     "1",
                                     "--threads",
                                     "1",
                                     "--no-progress",
                                     "--out",
                                     directory.string()};
  arguments.insert(arguments.end(), extra.begin(), extra.end());
  return arguments;
}

/// Checks that `run`/model.pt holds the names of `reference`/model.pt and its weights within
/// float rounding (1e-5).
void check_weights_within_rounding(const fs::path& reference, const fs::path& run) {
  const auto expected = torchbus::read_state_dict(reference / "model.pt");
  const auto weights = torchbus::read_state_dict(run / "model.pt");
  BOOST_TEST_REQUIRE(weights.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    BOOST_TEST_CONTEXT(expected[i].first) {
      BOOST_TEST(weights[i].first == expected[i].first);
      BOOST_TEST(torch::allclose(weights[i].second, expected[i].second, /*rtol=*/0,
                                 /*atol=*/1e-5));
    }
  }
}

/// The train_accuracy of every epoch row of a metrics.csv (NaN where a row has none).
std::vector<double> epoch_train_accuracies(const fs::path& csv) {
  std::istringstream in(read_text(csv));
  std::string line;
  std::getline(in, line);
  std::vector<std::string> header;
  std::istringstream header_cells(line);
  for (std::string cell; std::getline(header_cells, cell, ',');) header.push_back(cell);
  const auto column = static_cast<std::size_t>(
      std::find(header.begin(), header.end(), "train_accuracy") - header.begin());
  std::vector<double> accuracies;
  while (std::getline(in, line)) {
    if (line.rfind("epoch,", 0) != 0) continue;
    std::vector<std::string> cells;
    std::istringstream row(line);
    for (std::string cell; std::getline(row, cell, ',');) cells.push_back(cell);
    accuracies.push_back(column < cells.size() && !cells[column].empty() ? std::stod(cells[column])
                                                                         : std::nan(""));
  }
  return accuracies;
}

/// The step count of a rank's closing log line ("done in 1.2 s: 42 steps, ..."), or -1.
long steps_done(const std::string& output) {
  const auto done = output.rfind("done in ");
  if (done == std::string::npos) return -1;
  const auto colon = output.find(": ", done);
  return colon == std::string::npos ? -1 : std::stol(output.substr(colon + 2));
}

/// A CSV file of 25 rows for a two-class problem: 20 learnable training rows, then 5 validation
/// rows (the last fifth) with identical inputs and labels 0 1 1 0 1. Whatever class the model
/// predicts for that input, its accuracy over the whole split is a multiple of 1/5, while over
/// the rows one of two ranks validates (3 or 2 of them) it is a multiple of 1/3 or 1/2.
fs::path write_split_csv(const fs::path& directory) {
  const auto path = directory / "split.csv";
  std::ofstream out(path);
  out << "x,y,label\n";
  for (int i = 0; i < 20; ++i) {
    const int label = i % 2;
    out << label * 2.0 + (i % 7) * 0.1 << "," << 1 - label << "," << label << "\n";
  }
  for (const int label : {0, 1, 1, 0, 1}) out << "0,1," << label << "\n";
  return path;
}

/// Whether `value` times `count` is an integer (to 1e-9).
bool whole_multiple(double value, int count) {
  const double scaled = value * count;
  return std::abs(scaled - std::round(scaled)) < 1e-9;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(train_distributed)

// Two ranks with batch 32 each see at every step the samples one process sees with batch 64: the
// same learning, but one run directory written by rank 0 alone.
BOOST_AUTO_TEST_CASE(two_mpirun_ranks_write_one_run_directory_and_learn_as_one_process) {
  TempDir work("train_distributed");
  const auto single = work.path / "single", pair = work.path / "pair";
  const std::vector<std::string> common{"--max-steps", "60", "--threads",     "1",
                                        "--log-every", "10", "--no-progress", "--checkpoint-every",
                                        "20"};
  auto arguments = common;
  arguments.insert(arguments.end(), {"--batch-size", "64", "--out", single.string()});
  const auto one = run(train_command(arguments), work.path / "single.log");
  BOOST_TEST_REQUIRE(one.status == 0, one.output);
  arguments = common;
  arguments.insert(arguments.end(), {"--batch-size", "32", "--out", pair.string()});
  const auto two =
      run(mpirun_command(arguments, torchbus::testing::free_port()), work.path / "pair.log");
  BOOST_TEST_REQUIRE(two.status == 0, two.output);

  const auto one_summary = read_text(single / "summary.json");
  const auto summary = read_text(pair / "summary.json");
  BOOST_TEST(json_number(one_summary, "world_size") == 1);
  BOOST_TEST(json_number(summary, "world_size") == 2);
  // The identity names the global batch (2 ranks x 32), which a resume on other ranks keeps.
  BOOST_TEST(has(read_text(pair / "identity.txt"), "global_batch=64\n"));
  BOOST_TEST(lacks(read_text(pair / "identity.txt"), "world_size="));
  BOOST_TEST(json_number(summary, "steps") == json_number(one_summary, "steps"));
  // The same samples per step: the same accuracy band, the same losses up to rounding.
  BOOST_TEST(
      json_number(summary, "final_val_accuracy") == json_number(one_summary, "final_val_accuracy"),
      boost::test_tools::tolerance(0.02));
  BOOST_TEST(json_number(summary, "final_val_loss") == json_number(one_summary, "final_val_loss"),
             boost::test_tools::tolerance(1e-3));
  BOOST_TEST(json_number(summary, "final_val_accuracy") > 2 * 0.1);  // chance is 0.1

  // One run directory: the outputs of one run, each written once, by rank 0.
  BOOST_TEST(entries(pair) == entries(single));
  BOOST_TEST(torchbus::testing::event_files(pair / "tensorboard").size() == 1u);
  BOOST_TEST(entries(pair / "checkpoints") == entries(single / "checkpoints"));
  const auto csv = read_text(pair / "metrics.csv");
  BOOST_TEST(lines_with(csv, "step,20,").size() == 1u, csv);
  const auto log = read_text(pair / "train.log");
  BOOST_TEST(lines_with(log, "[rank 0]").size() == lines_with(log, "]").size(), log);
  BOOST_TEST(!contains(log, "[rank 1]"));
  // Rank 1 logs to its console only, each line naming it.
  const auto done = lines_with(two.output, "[rank 1] [info] done in");
  BOOST_TEST_REQUIRE(done.size() == 1u, two.output);
  BOOST_TEST(steps_done(done.front()) == 60);
}

// Each rank validates its share of the split (3 and 2 of 5 rows); the accuracy is over all 5.
BOOST_AUTO_TEST_CASE(the_validation_accuracy_covers_the_whole_split_not_one_share) {
  TempDir work("train_distributed");
  const auto csv = write_split_csv(work.path);
  const std::vector<std::string> common{
      "--data", "csv:" + csv.string(), "--epochs", "10",           "--lr",
      "0.01",   "--threads",           "1",        "--no-progress"};
  auto arguments = common;
  arguments.insert(arguments.end(), {"--batch-size", "8", "--out", (work.path / "one").string()});
  const auto one = run(train_command(arguments), work.path / "one.log");
  BOOST_TEST_REQUIRE(one.status == 0, one.output);
  arguments = common;
  arguments.insert(arguments.end(), {"--batch-size", "4", "--out", (work.path / "two").string()});
  const auto two =
      run(mpirun_command(arguments, torchbus::testing::free_port()), work.path / "two.log");
  BOOST_TEST_REQUIRE(two.status == 0, two.output);
  const auto accuracy =
      json_number(read_text(work.path / "two" / "summary.json"), "final_val_accuracy");
  BOOST_TEST(accuracy ==
             json_number(read_text(work.path / "one" / "summary.json"), "final_val_accuracy"));
  BOOST_TEST(whole_multiple(accuracy, 5), accuracy);
  BOOST_TEST(!whole_multiple(accuracy, 3), accuracy);
  BOOST_TEST(!whole_multiple(accuracy, 2), accuracy);
}

BOOST_AUTO_TEST_CASE(a_rank_killed_with_sigkill_makes_the_other_exit_1_within_10_s_naming_it) {
  for (const int victim : {1, 0}) {  // rank 0 also hosts the rendezvous store
    BOOST_TEST_CONTEXT("rank " << victim << " killed") {
      TempDir work("train_distributed");
      const auto out = work.path / "run";
      const TorchrunPair ranks({"--epochs", "1000", "--threads", "1", "--log-every", "10",
                                "--no-progress", "--out", out.string()},
                               work.path);
      const bool under_way = wait_until_written(out / "train.log", "step 20 ");
      kill(ranks.pids[static_cast<std::size_t>(victim)], SIGKILL);
      const int survivor = 1 - victim;
      const auto ended = ranks.wait(survivor, 10.0);
      ranks.wait(victim);
      BOOST_TEST_REQUIRE(under_way, read_text(ranks.log(0)));
      BOOST_TEST_INFO("survivor's output: " << ended.output);
      BOOST_TEST(ended.status == 1);  // -1: still running after 10 s
      BOOST_TEST(has(ended.output, "torchbus-train: run failed: rank " + std::to_string(survivor)));
      BOOST_TEST(has(ended.output, "rank " + std::to_string(victim) + " closed the connection"));
      BOOST_TEST(!contains(ended.output, "terminate called"));
      const auto summary = read_text(out / "summary.json");
      if (victim == 1) {
        // Rank 0 records how far the run got and why it failed.
        BOOST_TEST(json_number(summary, "exit_code") == 1);
        BOOST_TEST(has(json_string(summary, "stop_reason"), "rank 1 closed the connection"));
        BOOST_TEST(json_number(summary, "steps") >= 20);
      } else {
        BOOST_TEST(summary.empty());  // rank 1 writes nothing into the run directory
      }
    }
  }
}

// Under mpirun end to end: a rank killed mid-run (mpirun then ends the job), then --resume on two
// ranks, against an uninterrupted two-rank run.
BOOST_AUTO_TEST_CASE(kill_and_resume_on_two_ranks_ends_bitwise_as_an_uninterrupted_run) {
  TempDir work("train_distributed");
  const auto reference = work.path / "uninterrupted", out = work.path / "killed";
  // 400 steps (of 64 an epoch on each rank): the SIGKILL after step 50 (and the search for rank
  // 1's process) finds 350 to go (with 200, a fast machine might have finished first).
  const std::vector<std::string> flags{
      "--epochs", "10",  "--max-steps", "400", "--checkpoint-every", "20", "--hidden",
      "256",      "256", "--log-every", "1",   "--threads",          "1",  "--no-progress"};
  auto with_out = [&](const fs::path& directory, std::vector<std::string> extra = {}) {
    auto arguments = flags;
    arguments.insert(arguments.end(), {"--out", directory.string()});
    arguments.insert(arguments.end(), extra.begin(), extra.end());
    return mpirun_command(arguments, torchbus::testing::free_port());
  };
  const auto uninterrupted = run(with_out(reference), work.path / "uninterrupted.log");
  BOOST_TEST_REQUIRE(uninterrupted.status == 0, uninterrupted.output);
  const auto expected = json_string(read_text(reference / "summary.json"), "params_sha256");

  const auto log = work.path / "killed.log";
  const pid_t mpirun = torchbus::testing::spawn(with_out(out), {}, log);
  const bool under_way = wait_until_written(out / "train.log", "step 50 ");
  const pid_t rank1 = mpirun_rank_pid(mpirun, 1);
  if (rank1 > 0) kill(rank1, SIGKILL);
  const auto killed = wait_for(mpirun, log);
  BOOST_TEST_REQUIRE(under_way, killed.output);
  BOOST_TEST_REQUIRE(rank1 > 0, "rank 1 of mpirun " << mpirun << " not found");
  BOOST_TEST(killed.status != 0, killed.output);
  const auto failed = read_text(out / "summary.json");  // if rank 0 noticed before mpirun ended it
  BOOST_TEST_REQUIRE(json_number(failed, "exit_code") != 0,
                     "the kill came after the end: " << failed);
  // A checkpoint of step 40 or later to resume from (the run keeps its newest three, so which ones
  // are left depends on how far past step 50 the kill came).
  const auto last = fs::read_symlink(out / "checkpoints" / "last.tbckpt").string();
  const auto step_at = last.rfind("-step-");
  BOOST_TEST_REQUIRE(step_at != std::string::npos, last);
  BOOST_TEST_REQUIRE(std::stol(last.substr(step_at + 6)) >= 40, last);

  const auto resumed = run(with_out(out, {"--resume"}), work.path / "resumed.log");
  BOOST_TEST_REQUIRE(resumed.status == 0, resumed.output);
  BOOST_TEST(lines_with(resumed.output, "resumed from").size() == 2u, resumed.output);
  const auto summary = read_text(out / "summary.json");
  BOOST_TEST(json_number(summary, "steps") == 400);
  BOOST_TEST(json_string(summary, "params_sha256") == expected);
}

// Two ranks of batch 32, SIGKILLed mid-epoch, resumed by one process of batch 64 (the same global
// batch): it continues the epoch where the ranks left it and ends with the weights of the
// uninterrupted two-rank run within float rounding (model.pt).
BOOST_AUTO_TEST_CASE(a_run_killed_on_two_ranks_resumes_on_one_with_the_same_global_batch) {
  TempDir work("train_distributed");
  const auto reference = work.path / "uninterrupted", out = work.path / "killed";
  const auto with = resharding_flags;
  const TorchrunPair whole(with(reference, {"--batch-size", "32"}), work.path / "whole_logs");
  BOOST_TEST_REQUIRE(whole.wait(0).status == 0, read_text(whole.log(0)));
  BOOST_TEST_REQUIRE(whole.wait(1).status == 0, read_text(whole.log(1)));

  const TorchrunPair killed(with(out, {"--batch-size", "32"}), work.path / "killed_logs");
  // Step 30, and a checkpoint (written in the background: on a loaded machine, later).
  const bool under_way = wait_until_written(out / "train.log", "step 30 ") &&
                         wait_until_exists(out / "checkpoints" / "last.tbckpt");
  for (const pid_t pid : killed.pids) kill(pid, SIGKILL);
  for (int rank = 0; rank < 2; ++rank) killed.wait(rank);
  BOOST_TEST_REQUIRE(under_way, read_text(killed.log(0)));
  BOOST_TEST_REQUIRE(!fs::exists(out / "summary.json"), "the kill came after the end");

  const auto alone =
      run(train_command(with(out, {"--batch-size", "64", "--resume"})), work.path / "alone.log");
  BOOST_TEST_REQUIRE(alone.status == 0, alone.output);
  BOOST_TEST(has(alone.output, "resuming a checkpoint of 2 ranks on 1: epoch 0 continues"),
             alone.output);
  const auto summary = read_text(out / "summary.json");
  BOOST_TEST(json_number(summary, "steps") == 300);
  BOOST_TEST(json_number(summary, "world_size") == 1);
  // Each segment's split of the global batch, the second from the checkpoint's step on.
  const auto segments = nlohmann::json::parse(summary).at("segments");
  BOOST_TEST_REQUIRE(segments.size() == 2u, segments.dump());
  BOOST_TEST(segments[0].at("first_step").get<int>() == 0);
  BOOST_TEST(segments[0].at("world_size").get<int>() == 2);
  BOOST_TEST(segments[0].at("batch_size").get<int>() == 32);
  BOOST_TEST(segments[1].at("first_step").get<int>() >= 20);
  BOOST_TEST(segments[1].at("first_step").get<int>() % 20 == 0);
  BOOST_TEST(segments[1].at("world_size").get<int>() == 1);
  BOOST_TEST(segments[1].at("batch_size").get<int>() == 64);
  check_weights_within_rounding(reference, out);
}

// One process of batch 64, SIGKILLed mid-epoch, resumed by two ranks of batch 32 (the same global
// batch): it ends with the uninterrupted run's weights within float rounding, and the interrupted
// epoch's train_accuracy is over all its batches (rank 0 goes on from the checkpoint's tally, rank
// 1 from zero; without that it counted the batches after the resume only, 0.53 against 0.47).
BOOST_AUTO_TEST_CASE(a_run_killed_in_one_process_resumes_on_two_ranks_with_the_same_global_batch) {
  TempDir work("train_distributed");
  const auto reference = work.path / "uninterrupted", out = work.path / "killed";
  const auto with = resharding_flags;
  const auto whole =
      run(train_command(with(reference, {"--batch-size", "64"})), work.path / "whole.log");
  BOOST_TEST_REQUIRE(whole.status == 0, whole.output);

  const auto log = work.path / "killed.log";
  const pid_t pid =
      torchbus::testing::spawn(train_command(with(out, {"--batch-size", "64"})), {}, log);
  const bool under_way = wait_until_written(out / "train.log", "step 30 ") &&
                         wait_until_exists(out / "checkpoints" / "last.tbckpt");
  kill(pid, SIGKILL);
  const auto killed = wait_for(pid, log);
  BOOST_TEST_REQUIRE(under_way, killed.output);
  const auto last = fs::read_symlink(out / "checkpoints" / "last.tbckpt").string();
  const auto step_at = last.rfind("-step-");
  BOOST_TEST_REQUIRE(step_at != std::string::npos, last);
  const auto checkpoint_step = std::stol(last.substr(step_at + 6));
  BOOST_TEST_REQUIRE(checkpoint_step >= 20, last);
  BOOST_TEST_REQUIRE(checkpoint_step < 128, "the kill came after epoch 0 ended: " << last);

  const TorchrunPair resumed(with(out, {"--batch-size", "32", "--resume"}),
                             work.path / "resumed_logs");
  BOOST_TEST_REQUIRE(resumed.wait(0).status == 0, read_text(resumed.log(0)));
  BOOST_TEST_REQUIRE(resumed.wait(1).status == 0, read_text(resumed.log(1)));
  BOOST_TEST(has(read_text(resumed.log(0)), "resuming a checkpoint of 1 rank on 2: epoch 0"));
  const auto summary = read_text(out / "summary.json");
  BOOST_TEST(json_number(summary, "steps") == 300);
  BOOST_TEST(json_number(summary, "world_size") == 2);
  check_weights_within_rounding(reference, out);
  // Within a few of the epoch's 8,192 predictions: rounding may flip a near tie.
  const auto accuracies = epoch_train_accuracies(out / "metrics.csv");
  const auto reference_accuracies = epoch_train_accuracies(reference / "metrics.csv");
  BOOST_TEST_REQUIRE(accuracies.size() == 3u);
  BOOST_TEST_REQUIRE(reference_accuracies.size() == 3u);
  for (std::size_t epoch = 0; epoch < 3; ++epoch) {
    BOOST_TEST_CONTEXT("epoch " << epoch) {
      BOOST_TEST(std::abs(accuracies[epoch] - reference_accuracies[epoch]) <= 4.0 / 8192,
                 accuracies[epoch] << " against " << reference_accuracies[epoch]);
    }
  }
}

// On the same number of ranks a resume keeps the split: --batch-size 64 --accumulate 1 does not
// continue a run of 32 x 2 (the trainer would refuse its windows), and nothing of it changes.
BOOST_AUTO_TEST_CASE(another_split_on_the_same_ranks_is_refused_before_anything_changes) {
  TempDir work("train_distributed");
  const auto out = work.path / "run";
  const std::vector<std::string> flags{"--epochs",      "1",     "--threads", "1",
                                       "--no-progress", "--out", out.string()};
  auto with = [&](std::vector<std::string> extra) {
    auto arguments = flags;
    arguments.insert(arguments.end(), extra.begin(), extra.end());
    return train_command(arguments);
  };
  const auto first = run(with({"--batch-size", "32", "--accumulate", "2"}), work.path / "a.log");
  BOOST_TEST_REQUIRE(first.status == 0, first.output);
  const auto summary = read_text(out / "summary.json");
  const auto again = run(with({"--batch-size", "64", "--resume"}), work.path / "b.log");
  BOOST_TEST(again.status == 1, again.output);
  BOOST_TEST(has(again.output,
                 "it was written by 1 rank with --accumulate 2; on the same number "
                 "of ranks a resume keeps --batch-size and --accumulate"),
             again.output);
  BOOST_TEST(read_text(out / "summary.json") == summary);
}

// Start-up problems end every rank with one exit code: a --resume on another number of ranks
// that would change the global batch (named in the message), and a validation split smaller
// than the ranks.
BOOST_AUTO_TEST_CASE(start_up_refusals_end_every_rank_with_the_same_code) {
  TempDir work("train_distributed");
  const std::vector<std::string> flags{"--max-steps", "20", "--threads", "1", "--no-progress"};
  auto with_out = [&](const fs::path& directory, std::vector<std::string> extra = {}) {
    auto arguments = flags;
    arguments.insert(arguments.end(), {"--out", directory.string()});
    arguments.insert(arguments.end(), extra.begin(), extra.end());
    return arguments;
  };
  // Two ranks, then one process resuming.
  const auto of_two = work.path / "of_two";
  const auto two =
      run(mpirun_command(with_out(of_two), torchbus::testing::free_port()), work.path / "two.log");
  BOOST_TEST_REQUIRE(two.status == 0, two.output);
  const auto summary = read_text(of_two / "summary.json");
  const auto alone = run(train_command(with_out(of_two, {"--resume"})), work.path / "alone.log");
  BOOST_TEST(alone.status == 1, alone.output);
  BOOST_TEST(has(alone.output, "global_batch: 128 -> 64"), alone.output);
  BOOST_TEST(read_text(of_two / "summary.json") == summary);

  // One process, then two ranks resuming: rank 0 refuses, rank 1 exits with its code.
  const auto of_one = work.path / "of_one";
  const auto one = run(train_command(with_out(of_one)), work.path / "one.log");
  BOOST_TEST_REQUIRE(one.status == 0, one.output);
  const TorchrunPair resume(with_out(of_one, {"--resume"}), work.path / "resume_logs");
  const auto rank0 = resume.wait(0), rank1 = resume.wait(1);
  BOOST_TEST(rank0.status == 1, rank0.output);
  BOOST_TEST(rank1.status == 1, rank1.output);
  BOOST_TEST(has(rank0.output, "global_batch: 64 -> 128"), rank0.output);
  BOOST_TEST(has(rank1.output, "rank 0 ended its start-up with exit code 1"));
  BOOST_TEST(has(rank1.output, "global_batch: 64 -> 128"), rank1.output);

  // A CSV of 5 rows validates on 1: too few for two ranks, found before anything is written.
  const auto csv = work.path / "tiny.csv";
  std::ofstream(csv) << "x,label\n0,0\n1,1\n0,0\n1,1\n0,0\n";
  const auto tiny = work.path / "tiny";
  const TorchrunPair small(with_out(tiny, {"--data", "csv:" + csv.string()}),
                           work.path / "tiny_logs");
  for (const auto& ended : {small.wait(0), small.wait(1)}) {
    BOOST_TEST(ended.status == 1, ended.output);
    BOOST_TEST(has(ended.output, "the validation split has 1 sample(s) for 2 ranks"));
  }
  BOOST_TEST(!fs::exists(tiny));

  // --find-lr sweeps in one process: under mpirun every rank refuses it as a usage error.
  const auto sweep = work.path / "sweep";
  const auto refused =
      run(mpirun_command(with_out(sweep, {"--find-lr"}), torchbus::testing::free_port()),
          work.path / "sweep.log");
  BOOST_TEST(refused.status == 2, refused.output);
  BOOST_TEST(has(refused.output,
                 "torchbus-train: --find-lr runs the learning-rate range test in "
                 "one process"),
             refused.output);
  BOOST_TEST(has(refused.output, "rank 1 stops: rank 0 ended its start-up with exit code 2"),
             refused.output);
  BOOST_TEST(!fs::exists(sweep));
}

// A run is live in OUT: another launch into OUT is refused, naming the process holding it; then
// SIGTERM to every rank (as mpirun forwards it) stops both at one step, with a checkpoint.
BOOST_AUTO_TEST_CASE(a_live_run_refuses_a_second_launch_and_sigterm_stops_every_rank_at_one_step) {
  TempDir work("train_distributed");
  const auto out = work.path / "live";
  // 100000 epochs: it is still training after the launches below, on any machine; SIGTERM ends it.
  const std::vector<std::string> flags{"--epochs",    "100000", "--threads",     "1",
                                       "--log-every", "10",     "--no-progress", "--out",
                                       out.string()};
  const TorchrunPair live(flags, work.path / "live_logs");
  BOOST_TEST_REQUIRE(wait_until_written(out / "train.log", "step 20 "), read_text(live.log(0)));

  auto resume_flags = flags;
  resume_flags.push_back("--resume");
  const auto second = run(train_command(resume_flags), work.path / "second.log");
  BOOST_TEST(second.status == 2, second.output);
  BOOST_TEST(has(second.output, "--out " + out.string() + " is in use: process " +
                                    std::to_string(live.pids[0]) + " holds its lock"));
  const TorchrunPair pair(flags, work.path / "second_pair");
  for (const auto& ended : {pair.wait(0), pair.wait(1)}) {
    BOOST_TEST(ended.status == 2, ended.output);
    BOOST_TEST(has(ended.output, "is in use: process " + std::to_string(live.pids[0])));
  }

  for (const pid_t pid : live.pids) kill(pid, SIGTERM);
  const auto rank0 = live.wait(0, 30), rank1 = live.wait(1, 30);
  BOOST_TEST(rank0.status == 128 + SIGTERM, rank0.output);
  BOOST_TEST(rank1.status == 128 + SIGTERM, rank1.output);
  const auto summary = read_text(out / "summary.json");
  BOOST_TEST(json_string(summary, "stop_reason") == "interrupted (SIGTERM)");
  BOOST_TEST(json_number(summary, "exit_code") == 128 + SIGTERM);
  const auto steps = static_cast<long>(json_number(summary, "steps"));
  BOOST_TEST(steps_done(rank0.output) == steps);
  BOOST_TEST(steps_done(rank1.output) == steps);
  const auto last = fs::read_symlink(out / "checkpoints" / "last.tbckpt").string();
  BOOST_TEST(has(last, "-step-" + std::string(6 - std::to_string(steps).size(), '0') +
                           std::to_string(steps) + ".tbckpt"));
}

BOOST_AUTO_TEST_SUITE_END()
