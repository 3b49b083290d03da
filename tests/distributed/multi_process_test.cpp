// Two ranks on loopback, started both ways users start them (torchrun's variables, mpirun),
// against one process: same parameters, one all-reduce per bucket and step, agreed stops, a
// failing or killed rank reported instead of hanging, exact resume, and bad launch environments.

#include "launch.hpp"

#include <torch/torch.h>
#include <boost/test/unit_test.hpp>
#include <support/fixtures.hpp>
#include <support/scratch.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <sstream>

using namespace torchbus::testing;
namespace fs = std::filesystem;

namespace {

const std::string kWorker = TORCHBUS_DISTRIBUTED_WORKER;
#ifdef TORCHBUS_EXAMPLE_DISTRIBUTED
const fs::path kExample = TORCHBUS_EXAMPLE_DISTRIBUTED;
#else
// build/<preset>/tests/distributed_worker -> build/<preset>/examples/example_distributed
const fs::path kExample =
    fs::path(kWorker).parent_path().parent_path() / "examples" / "example_distributed";
#endif
#ifdef TORCHBUS_EXAMPLE_DISTRIBUTED_PREDICT
const fs::path kPredictExample = TORCHBUS_EXAMPLE_DISTRIBUTED_PREDICT;
#else
const fs::path kPredictExample = kExample.parent_path() / "example_distributed_predict";
#endif

std::vector<at::Tensor> load_parameters(const fs::path& path) {
  std::vector<at::Tensor> parameters;
  torch::load(parameters, path.string());
  return parameters;
}

bool all_close(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b, double tol) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!torch::allclose(a[i], b[i], /*rtol=*/0, /*atol=*/tol)) return false;
  }
  return true;
}

/// One process with batch 16 against two ranks with batch 8 each, started by `launch`.
template <typename LaunchTwo>
void check_two_ranks_match_one_process(std::int64_t accumulate, LaunchTwo launch_two) {
  TempDir single("distributed");
  TempDir pair("distributed");
  const auto k = "accumulate=" + std::to_string(accumulate);
  const auto one =
      run_torchrun_style(kWorker, {"out=" + single.path.string(), "batch=16", k}, 1, free_port());
  BOOST_REQUIRE_EQUAL(one.exit_codes, std::vector<int>{0});
  const auto two = launch_two({"out=" + pair.path.string(), "batch=8", k});
  BOOST_REQUIRE_MESSAGE(
      two.exit_codes == std::vector<int>(two.exit_codes.size(), 0),
      read_text(pair.path / "rank0.error") + read_text(pair.path / "rank1.error"));

  const auto reference = load_parameters(single.path / "rank0.params");
  const auto rank0 = load_parameters(pair.path / "rank0.params");
  const auto rank1 = load_parameters(pair.path / "rank1.params");
  BOOST_TEST(all_equal(rank0, rank1));  // the ranks never diverge
  BOOST_TEST(all_close(rank0, reference, 1e-5));

  // 96 samples: 6 batches of 16 (or 6 of 8 per rank) per epoch, 2 epochs, k batches per step.
  const auto steps = 2 * ((6 + accumulate - 1) / accumulate);
  const auto results = read_results(pair.path / "rank0.txt");
  BOOST_TEST(std::stoll(results.at("step")) == steps);
  // Buckets of at most 600 bytes, last layer first: [16 + 256 + 64] and [512] bytes of gradients.
  // A step costs one all-reduce per bucket and nothing else; the first starts during the backward.
  BOOST_TEST(results.at("collectives_per_step_min") == "2");
  BOOST_TEST(results.at("collectives_per_step_max") == "2");
  BOOST_TEST(results.at("started_in_backward_min") == "1");
  BOOST_TEST(results.at("group_starts") == "1");
  // Evaluation metrics cover every rank's shard: the same as one process evaluating everything.
  const auto reference_results = read_results(single.path / "rank0.txt");
  BOOST_TEST(std::stod(results.at("val_loss")) == std::stod(reference_results.at("val_loss")),
             boost::test_tools::tolerance(1e-4));
  BOOST_TEST(results.at("val_accuracy") == reference_results.at("val_accuracy"));
  BOOST_TEST(read_results(pair.path / "rank1.txt").at("val_accuracy") ==
             results.at("val_accuracy"));
}

auto torchrun_pair() {
  return [](const std::vector<std::string>& args) {
    return run_torchrun_style(kWorker, args, 2, free_port());
  };
}

auto mpirun_pair() {
  return [](const std::vector<std::string>& args) {
    return run_mpirun(kWorker, args, 2, free_port());
  };
}

/// How the rank that was not killed ended.
struct Survivor {
  int exit_code = -1;  ///< -1: still running after the bound (then killed)
  double seconds = 0;  ///< from the SIGKILL of the other rank to the survivor's exit
  std::string output;  ///< its standard output and error
};

/// Starts two ranks of `command` (torchrun's variables, each rank's output in dir/rank<r>.log),
/// waits until `running(dir)` says training is under way on both, SIGKILLs rank `victim` and
/// waits at most `bound` for the other one.
template <typename Running>
Survivor kill_one_rank_mid_training(const std::vector<std::string>& command, int victim,
                                    const fs::path& dir, Running running, double bound = 30.0) {
  const auto port = free_port();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    pids.push_back(spawn(command, torchrun_environment(rank, 2, port),
                         dir / ("rank" + std::to_string(rank) + ".log")));
  }
  const auto started = std::chrono::steady_clock::now();
  while (!running(dir) && std::chrono::steady_clock::now() - started < std::chrono::minutes(3)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const bool was_running = running(dir);
  kill(pids[static_cast<std::size_t>(victim)], SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  Survivor survivor;
  const auto exit_code = wait_at_most(pids[static_cast<std::size_t>(1 - victim)],
                                      std::chrono::duration<double>(bound));
  survivor.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  waitpid(pids[static_cast<std::size_t>(victim)], nullptr, 0);
  survivor.exit_code = exit_code.value_or(-1);
  survivor.output = read_text(dir / ("rank" + std::to_string(1 - victim) + ".log"));
  BOOST_REQUIRE_MESSAGE(was_running, "training never got under way: " + survivor.output);
  return survivor;
}

/// The survivor of a SIGKILLed peer exits non-zero at once with one error that names the dead
/// rank and says nothing of a timeout (the collective failed when the connection closed).
void check_survivor(const Survivor& survivor, int victim, double timeout_seconds) {
  BOOST_TEST_INFO("survivor's output: " << survivor.output);
  BOOST_TEST(survivor.exit_code == 1);
  BOOST_TEST(survivor.seconds < 30.0);
  BOOST_TEST(survivor.output.find("terminate called") == std::string::npos);
  BOOST_TEST(survivor.output.find("rank " + std::to_string(1 - victim) + ": ") !=
             std::string::npos);
  BOOST_TEST(survivor.output.find("rank " + std::to_string(victim) + " closed the connection") !=
             std::string::npos);
  if (survivor.seconds < timeout_seconds) {
    BOOST_TEST(survivor.output.find("timeout") == std::string::npos);
    BOOST_TEST(survivor.output.find("timed out") == std::string::npos);
  }
}

/// The samples each rank logged (samples=1), as "epoch step index" rows of every rank in `dir`.
struct SampleRow {
  std::int64_t epoch, step, index;
};
std::vector<SampleRow> logged_samples(const fs::path& dir) {
  std::vector<SampleRow> rows;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".samples") continue;
    std::ifstream in(entry.path());
    for (SampleRow row{}; in >> row.epoch >> row.step >> row.index;) rows.push_back(row);
  }
  return rows;
}

/// Starts `world` ranks of the worker with `args`, waits until rank 0 has marked `mark_step`,
/// and SIGKILLs every rank.
void kill_ranks_mid_training(const std::vector<std::string>& args, int world, const fs::path& dir) {
  const auto port = free_port();
  std::vector<std::string> command{kWorker};
  command.insert(command.end(), args.begin(), args.end());
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    pids.push_back(spawn(command, torchrun_environment(rank, world, port),
                         dir / ("rank" + std::to_string(rank) + ".log")));
  }
  const auto started = std::chrono::steady_clock::now();
  while (!fs::exists(dir / "rank0.running") &&
         std::chrono::steady_clock::now() - started < std::chrono::minutes(2)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (const pid_t pid : pids) kill(pid, SIGKILL);
  for (const pid_t pid : pids) waitpid(pid, nullptr, 0);
  BOOST_REQUIRE_MESSAGE(fs::exists(dir / "rank0.running"),
                        "training never reached the mark: " + read_text(dir / "rank0.log"));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(multi_process)

BOOST_AUTO_TEST_CASE(two_torchrun_ranks_match_one_process_with_twice_the_batch) {
  check_two_ranks_match_one_process(1, torchrun_pair());
  check_two_ranks_match_one_process(3, torchrun_pair());
}

BOOST_AUTO_TEST_CASE(two_mpirun_ranks_match_one_process_with_twice_the_batch) {
  check_two_ranks_match_one_process(1, mpirun_pair());
  check_two_ranks_match_one_process(3, mpirun_pair());
}

// A parameter no rank computes a gradient for keeps an undefined one, as on one process: weight
// decay does not shrink it (a zero gradient would let it).
// A GAN of two optimizer phases: two ranks of batch 8 train what one process of batch 16 trains,
// each phase's gradients averaged in its own buckets (docs/trainer.md, "Several optimizers").
BOOST_AUTO_TEST_CASE(two_ranks_of_optimizer_phases_match_one_process_with_twice_the_batch) {
  TempDir single("distributed");
  TempDir pair("distributed");
  // Windows of 3 batches, the generator on every 2nd batch: both phases step in every window.
  const std::vector<std::string> common{"gan=1", "accumulate=3", "generator_every=2"};
  auto args = common;
  args.push_back("out=" + single.path.string());
  args.push_back("batch=16");
  const auto one = run_torchrun_style(kWorker, args, 1, free_port());
  BOOST_REQUIRE_MESSAGE(one.exit_codes == std::vector<int>{0},
                        read_text(single.path / "rank0.error"));
  args = common;
  args.push_back("out=" + pair.path.string());
  args.push_back("batch=8");
  const auto two = run_torchrun_style(kWorker, args, 2, free_port());
  BOOST_REQUIRE_MESSAGE(
      two.exit_codes == std::vector<int>(2, 0),
      read_text(pair.path / "rank0.error") + read_text(pair.path / "rank1.error"));
  const auto reference = load_parameters(single.path / "rank0.params");
  const auto rank0 = load_parameters(pair.path / "rank0.params");
  BOOST_TEST(all_equal(rank0, load_parameters(pair.path / "rank1.params")));
  BOOST_TEST(all_close(rank0, reference, 1e-5));
  // The same GAN as two modules, each phase bringing its own (docs/trainer.md, "A model per
  // phase"): rank 0's weights are broadcast and the ranks train as with the wrapper module.
  TempDir separate("distributed");
  args = common;
  args.push_back("out=" + separate.path.string());
  args.push_back("batch=8");
  args.push_back("phase_models=1");
  const auto models = run_torchrun_style(kWorker, args, 2, free_port());
  BOOST_REQUIRE_MESSAGE(
      models.exit_codes == std::vector<int>(2, 0),
      read_text(separate.path / "rank0.error") + read_text(separate.path / "rank1.error"));
  BOOST_TEST(all_equal(load_parameters(separate.path / "rank0.params"), rank0));
  BOOST_TEST(all_equal(load_parameters(separate.path / "rank1.params"), rank0));
  const auto results = read_results(pair.path / "rank0.txt");
  const auto reference_results = read_results(single.path / "rank0.txt");
  BOOST_TEST(results.at("step") == reference_results.at("step"));
  BOOST_TEST(results.at("generator_updates") == reference_results.at("generator_updates"));
  BOOST_TEST(
      std::stod(results.at("generator_loss")) == std::stod(reference_results.at("generator_loss")),
      boost::test_tools::tolerance(1e-4));
  // Buckets of at most 600 bytes per phase: the discriminator's [68 + 64] and [512] bytes of
  // gradients, the generator's [128]: one all-reduce per bucket of each phase that steps.
  BOOST_TEST(results.at("collectives_per_step_max") == "3");
}

BOOST_AUTO_TEST_CASE(a_parameter_without_gradient_on_every_rank_is_left_alone) {
  TempDir single("distributed");
  TempDir pair("distributed");
  const auto one = run_torchrun_style(
      kWorker, {"out=" + single.path.string(), "batch=16", "unused=1"}, 1, free_port());
  BOOST_REQUIRE_EQUAL(one.exit_codes, std::vector<int>{0});
  const auto two = run_torchrun_style(kWorker, {"out=" + pair.path.string(), "batch=8", "unused=1"},
                                      2, free_port());
  BOOST_REQUIRE_MESSAGE(
      two.exit_codes == std::vector<int>(2, 0),
      read_text(pair.path / "rank0.error") + read_text(pair.path / "rank1.error"));
  const auto reference = load_parameters(single.path / "rank0.params");
  const auto rank0 = load_parameters(pair.path / "rank0.params");
  BOOST_TEST(all_close(rank0, reference, 1e-5));
  BOOST_TEST_REQUIRE(rank0.size() == 5u);
  BOOST_TEST(torch::equal(rank0.front(), torch::ones({3})));  // the Sequential's own, first
  BOOST_TEST(torch::equal(reference.front(), torch::ones({3})));
}

// A stop asked before the gradients leave (AfterBackward of step 3, which becomes step 4) ends
// both ranks after that step, as on one process; one asked at StepEnd 3 rides with step 4's
// gradients, so both end after step 4.
BOOST_AUTO_TEST_CASE(a_stop_on_one_rank_stops_both_at_the_same_step) {
  for (const auto& [event, expected_step] :
       {std::pair<std::string, std::string>{"AfterBackward", "4"}, {"StepEnd", "4"}}) {
    BOOST_TEST_CONTEXT("stop at " << event) {
      TempDir out("distributed");
      const auto launch = run_torchrun_style(
          kWorker,
          {"out=" + out.path.string(), "stop_rank=1", "stop_step=3", "stop_event=" + event}, 2,
          free_port());
      BOOST_REQUIRE_EQUAL(launch.exit_codes, (std::vector<int>{0, 0}));
      const auto rank0 = read_results(out.path / "rank0.txt");
      const auto rank1 = read_results(out.path / "rank1.txt");
      BOOST_TEST(rank0.at("step") == expected_step);
      BOOST_TEST(rank1.at("step") == expected_step);
      BOOST_TEST(rank0.at("stop_reason") == "rank 1 requested a stop");
      BOOST_TEST(rank1.at("stop_reason") == "test stop");
    }
  }
}

// An early stop every rank asks for at step 2, held by min_steps 5, ends one process and both
// ranks of two after step 5 (the ranks agree at the step that releases it).
BOOST_AUTO_TEST_CASE(an_early_stop_held_by_min_steps_ends_every_rank_at_that_step) {
  for (const int ranks : {1, 2}) {
    BOOST_TEST_CONTEXT(ranks << " rank(s)") {
      TempDir out("distributed");
      const auto launch = run_torchrun_style(
          kWorker, {"out=" + out.path.string(), "early_stop_step=2", "min_steps=5"}, ranks,
          free_port());
      BOOST_REQUIRE_EQUAL(launch.exit_codes, std::vector<int>(static_cast<std::size_t>(ranks), 0));
      for (int rank = 0; rank < ranks; ++rank) {
        const auto results = read_results(out.path / ("rank" + std::to_string(rank) + ".txt"));
        BOOST_TEST(results.at("step") == "5");
        BOOST_TEST(results.at("stop_reason") == "early stop");
      }
    }
  }
}

// A skip asked before the gradients leave is agreed: every rank skips that update. One asked at
// BeforeOptimizerStep on one rank only would let the models diverge: both ranks fail at the next
// step, saying so.
BOOST_AUTO_TEST_CASE(skipped_updates_are_agreed_or_refused) {
  TempDir agreed("distributed");
  const auto both = run_torchrun_style(
      kWorker, {"out=" + agreed.path.string(), "skip_rank=1", "skip_step=2"}, 2, free_port());
  BOOST_REQUIRE_EQUAL(both.exit_codes, (std::vector<int>{0, 0}));
  BOOST_TEST(read_results(agreed.path / "rank0.txt").at("step") == "11");  // 12 windows, 1 skipped
  BOOST_TEST(read_results(agreed.path / "rank1.txt").at("step") == "11");
  BOOST_TEST(all_equal(load_parameters(agreed.path / "rank0.params"),
                       load_parameters(agreed.path / "rank1.params")));

  TempDir refused("distributed");
  const auto one = run_torchrun_style(kWorker,
                                      {"out=" + refused.path.string(), "skip_rank=1", "skip_step=2",
                                       "skip_event=BeforeOptimizerStep"},
                                      2, free_port());
  BOOST_TEST(one.exit_codes == (std::vector<int>{1, 1}));
  for (const auto* rank : {"rank0.error", "rank1.error"}) {
    const auto error = read_text(refused.path / rank);
    BOOST_TEST_INFO(rank << ": " << error);
    BOOST_TEST(error.find("1 of 2 ranks applied the previous step's update, the others skipped it: "
                          "state.skip_update was set at BeforeOptimizerStep on some ranks only") !=
               std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(a_failing_rank_makes_the_other_exit_with_a_clear_error) {
  for (const int failing : {0, 1}) {
    TempDir out("distributed");
    const auto launch =
        run_torchrun_style(kWorker,
                           {"out=" + out.path.string(), "timeout_ms=30000",
                            "throw_rank=" + std::to_string(failing), "throw_step=2"},
                           2, free_port());
    BOOST_TEST(launch.exit_codes == (std::vector<int>{1, 1}));
    // A lost peer is noticed, not waited out: well under the timeout, start-up included (a
    // sanitizer build on a loaded machine takes ~10 s to get there).
    BOOST_TEST(launch.seconds < 20.0);
    const auto other = read_text(out.path / ("rank" + std::to_string(1 - failing) + ".error"));
    BOOST_TEST_INFO("other rank's error: " << other);
    BOOST_TEST(other.find("rank " + std::to_string(1 - failing) + ": ") == 0);
    if (failing == 1) {
      // Rank 0 hosts the store, so it can read why rank 1 failed.
      BOOST_TEST(other.find("rank 1 failed: injected failure at step 2") != std::string::npos);
    }
    BOOST_TEST(read_text(out.path / ("rank" + std::to_string(failing) + ".error"))
                   .find("injected failure at step 2") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(a_rank_killed_mid_training_makes_the_other_exit_at_once_naming_it) {
  for (const int victim : {1, 0}) {  // rank 0 also hosts the rendezvous store
    BOOST_TEST_CONTEXT("rank " << victim << " killed") {
      TempDir out("distributed");
      const auto survivor = kill_one_rank_mid_training(
          {kWorker, "out=" + out.path.string(), "epochs=100000", "mark_step=3", "timeout_ms=60000"},
          victim, out.path, [](const fs::path& dir) {
            return fs::exists(dir / "rank0.running") && fs::exists(dir / "rank1.running");
          });
      check_survivor(survivor, victim, 60.0);
      if (victim == 1) {
        BOOST_TEST(survivor.output.find("rank 1 reported no error: killed, crashed or exited "
                                        "early") != std::string::npos);
      } else {
        BOOST_TEST(survivor.output.find("rank 0 has exited") != std::string::npos);
      }
    }
  }
}

// The same with the example program users copy: its main catches the error, prints it and
// returns 1 (it used to end in std::terminate).
BOOST_AUTO_TEST_CASE(the_distributed_example_survives_a_killed_rank_with_a_clear_error) {
  if (!fs::exists(kExample)) {
    BOOST_TEST_MESSAGE("skipped: " << kExample << " is not built");
    return;
  }
  TempDir out("distributed");
  // stdbuf: the example's std::cout line by line, so that its progress shows in the log at once.
  // It preloads a library, which a sanitizer build must be told to accept.
  const char* asan_options = std::getenv("ASAN_OPTIONS");
  const auto accept_preload =
      "ASAN_OPTIONS=" + std::string(asan_options != nullptr ? asan_options : "") +
      ":verify_asan_link_order=0";
  const auto survivor = kill_one_rank_mid_training(
      {"env", accept_preload, "stdbuf", "-oL", kExample.string(), "1000000"}, 1, out.path,
      [](const fs::path& dir) {
        return read_text(dir / "rank0.log").find("step 20 ") != std::string::npos;
      });
  check_survivor(survivor, 1, 300.0);
}

BOOST_AUTO_TEST_CASE(a_checkpoint_of_rank_0_resumes_on_two_ranks_exactly) {
  TempDir uninterrupted("distributed");
  TempDir first("distributed");
  TempDir resumed("distributed");
  const auto checkpoint = (first.path / "step4.tbckpt").string();
  auto launch = run_torchrun_style(kWorker, {"out=" + uninterrupted.path.string(), "steps=9"}, 2,
                                   free_port());
  BOOST_REQUIRE_EQUAL(launch.exit_codes, (std::vector<int>{0, 0}));
  launch = run_torchrun_style(
      kWorker, {"out=" + first.path.string(), "steps=4", "save_step=4", "save=" + checkpoint}, 2,
      free_port());
  BOOST_REQUIRE_EQUAL(launch.exit_codes, (std::vector<int>{0, 0}));
  launch = run_torchrun_style(
      kWorker, {"out=" + resumed.path.string(), "steps=9", "resume=" + checkpoint}, 2, free_port());
  BOOST_REQUIRE_EQUAL(launch.exit_codes, (std::vector<int>{0, 0}));
  const auto expected = load_parameters(uninterrupted.path / "rank0.params");
  BOOST_TEST(all_equal(load_parameters(resumed.path / "rank0.params"), expected));
  BOOST_TEST(all_equal(load_parameters(resumed.path / "rank1.params"), expected));
  BOOST_TEST(read_results(resumed.path / "rank1.txt").at("step") == "9");
}

// 96 samples, 2 epochs at a global batch of 24 (4 steps per epoch). A run killed with SIGKILL
// mid-epoch after its checkpoint of step 2 resumes on another number of ranks with the same
// global batch (3 ranks of 8; 1 rank of 12 accumulating 2): the same weights as the uninterrupted
// run within float rounding, and every sample of the interrupted epoch trained exactly once.
BOOST_AUTO_TEST_CASE(
    a_run_killed_on_two_ranks_resumes_on_one_and_on_three_with_the_same_global_batch) {
  TempDir whole("distributed");
  BOOST_REQUIRE_EQUAL(
      run_torchrun_style(kWorker, {"out=" + whole.path.string(), "batch=12"}, 2, free_port())
          .exit_codes,
      (std::vector<int>{0, 0}));
  const auto expected = load_parameters(whole.path / "rank0.params");

  TempDir killed("distributed");
  const auto checkpoint = (killed.path / "step2.tbckpt").string();
  kill_ranks_mid_training({"out=" + killed.path.string(), "batch=12", "save_step=2",
                           "save=" + checkpoint, "mark_step=3", "slow_ms=200", "samples=1"},
                          2, killed.path);
  BOOST_TEST_REQUIRE(!fs::exists(killed.path / "rank0.txt"), "the run ended before the SIGKILL");
  std::vector<std::int64_t> before_checkpoint;  // epoch 0's samples of steps 0 and 1
  for (const auto& row : logged_samples(killed.path)) {
    if (row.epoch == 0 && row.step < 2) before_checkpoint.push_back(row.index);
  }
  BOOST_TEST(before_checkpoint.size() == 48u);

  struct Resume {
    int ranks;
    int batch;
    int accumulate;
  };
  for (const auto resume : {Resume{3, 8, 1}, Resume{1, 12, 2}}) {
    BOOST_TEST_CONTEXT("2 ranks -> " << resume.ranks << " of batch " << resume.batch << " x "
                                     << resume.accumulate) {
      TempDir resumed("distributed");
      const auto launch = run_torchrun_style(
          kWorker,
          {"out=" + resumed.path.string(), "batch=" + std::to_string(resume.batch),
           "accumulate=" + std::to_string(resume.accumulate), "resume=" + checkpoint, "samples=1"},
          resume.ranks, free_port());
      BOOST_REQUIRE_MESSAGE(
          launch.exit_codes == std::vector<int>(static_cast<std::size_t>(resume.ranks), 0),
          read_text(resumed.path / "rank0.error"));
      BOOST_TEST(all_close(load_parameters(resumed.path / "rank0.params"), expected, 1e-5));
      BOOST_TEST(read_results(resumed.path / "rank0.txt").at("step") == "8");
      auto epoch0 = before_checkpoint;
      for (const auto& row : logged_samples(resumed.path)) {
        if (row.epoch == 0) epoch0.push_back(row.index);
      }
      std::sort(epoch0.begin(), epoch0.end());
      std::vector<std::int64_t> every(96);
      std::iota(every.begin(), every.end(), 0);
      BOOST_TEST(epoch0 == every, boost::test_tools::per_element());
    }
  }

  // A global batch that cannot be kept is refused, naming the numbers: 3 ranks of 6 is 18.
  TempDir refused("distributed");
  const auto launch = run_torchrun_style(
      kWorker, {"out=" + refused.path.string(), "batch=6", "resume=" + checkpoint}, 3, free_port());
  BOOST_TEST(launch.exit_codes == (std::vector<int>{1, 1, 1}));
  const auto error = read_text(refused.path / "rank0.error");
  BOOST_TEST(error.find("a step here takes 18 samples (3 ranks x 6 per batch x 1 batches per "
                        "step), the checkpoint's run took 24") != std::string::npos,
             error);
}

// 96 samples at a global batch of 30: on 3 ranks of 10 an epoch is 4 steps (a last batch of 2 per
// rank), on 1 rank of 15 accumulating 2 it is 3.5. A checkpoint of step 4, the last of epoch 0,
// resumed on 1 rank places the epoch's continuation past its end (batch 8 of 7): the epoch ends,
// having counted 7 batches. A checkpoint taken there, at the resumed epoch's EpochStart, holds the
// 3 ranks' position, so that a resume from it on the 1 rank rescales it alike and ends as the
// resume it was taken in, and one on the 3 ranks ends as the run that wrote the first checkpoint.
BOOST_AUTO_TEST_CASE(
    a_checkpoint_taken_before_a_resumed_epoch_continued_resumes_on_the_same_ranks) {
  TempDir first("distributed");
  const auto checkpoint = (first.path / "step4.tbckpt").string();
  BOOST_REQUIRE_EQUAL(
      run_torchrun_style(
          kWorker, {"out=" + first.path.string(), "batch=10", "save_step=4", "save=" + checkpoint},
          3, free_port())
          .exit_codes,
      (std::vector<int>{0, 0, 0}));
  TempDir resumed("distributed");
  const auto at_epoch_start = (resumed.path / "epoch-start.tbckpt").string();
  auto launch = run_torchrun_style(
      kWorker,
      {"out=" + resumed.path.string(), "batch=15", "accumulate=2", "resume=" + checkpoint,
       "save_step=4", "save_event=EpochStart", "save=" + at_epoch_start},
      1, free_port());
  BOOST_REQUIRE_MESSAGE(launch.exit_codes == std::vector<int>{0},
                        read_text(resumed.path / "rank0.error"));
  BOOST_TEST(read_results(resumed.path / "rank0.txt").at("step") == "8");
  // 4 batches of the 3 ranks, 3 more of epoch 0 here, 7 of epoch 1.
  BOOST_TEST(read_results(resumed.path / "rank0.txt").at("global_batch") == "14");
  const auto position = read_checkpoint_position(at_epoch_start);
  BOOST_TEST(position.world_size == 3);
  BOOST_TEST(position.batch_in_epoch == 4);
  BOOST_TEST(position.accumulate_grad_batches == 1);

  TempDir again("distributed");
  launch = run_torchrun_style(
      kWorker,
      {"out=" + again.path.string(), "batch=15", "accumulate=2", "resume=" + at_epoch_start}, 1,
      free_port());
  BOOST_REQUIRE_MESSAGE(launch.exit_codes == std::vector<int>{0},
                        read_text(again.path / "rank0.error"));
  BOOST_TEST(read_results(again.path / "rank0.txt").at("step") == "8");
  BOOST_TEST(read_results(again.path / "rank0.txt").at("global_batch") == "14");
  BOOST_TEST(all_equal(load_parameters(again.path / "rank0.params"),
                       load_parameters(resumed.path / "rank0.params")));

  TempDir original_ranks("distributed");
  launch = run_torchrun_style(
      kWorker, {"out=" + original_ranks.path.string(), "batch=10", "resume=" + at_epoch_start}, 3,
      free_port());
  BOOST_REQUIRE_EQUAL(launch.exit_codes, (std::vector<int>{0, 0, 0}));
  BOOST_TEST(read_results(original_ranks.path / "rank0.txt").at("global_batch") ==
             read_results(first.path / "rank0.txt").at("global_batch"));
  BOOST_TEST(all_equal(load_parameters(original_ranks.path / "rank0.params"),
                       load_parameters(first.path / "rank0.params")));
}

// One rank's checkpoint resumes on two ranks of half the batch.
BOOST_AUTO_TEST_CASE(a_checkpoint_of_one_rank_resumes_on_two_with_the_same_global_batch) {
  TempDir whole("distributed");
  TempDir first("distributed");
  TempDir resumed("distributed");
  const auto checkpoint = (first.path / "step3.tbckpt").string();
  BOOST_REQUIRE_EQUAL(
      run_torchrun_style(kWorker, {"out=" + whole.path.string(), "batch=24"}, 1, free_port())
          .exit_codes,
      std::vector<int>{0});
  BOOST_REQUIRE_EQUAL(run_torchrun_style(kWorker,
                                         {"out=" + first.path.string(), "batch=24", "steps=3",
                                          "save_step=3", "save=" + checkpoint},
                                         1, free_port())
                          .exit_codes,
                      std::vector<int>{0});
  BOOST_REQUIRE_EQUAL(
      run_torchrun_style(kWorker,
                         {"out=" + resumed.path.string(), "batch=12", "resume=" + checkpoint}, 2,
                         free_port())
          .exit_codes,
      (std::vector<int>{0, 0}));
  const auto expected = load_parameters(whole.path / "rank0.params");
  BOOST_TEST(all_close(load_parameters(resumed.path / "rank0.params"), expected, 1e-5));
  BOOST_TEST(all_equal(load_parameters(resumed.path / "rank1.params"),
                       load_parameters(resumed.path / "rank0.params")));
}

BOOST_AUTO_TEST_CASE(world_size_without_rank_is_a_clear_error) {
  TempDir out("distributed");
  const auto start = std::chrono::steady_clock::now();
  const auto launch = wait_all({spawn({kWorker, "out=" + out.path.string()},
                                      {{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}})},
                               start);
  BOOST_TEST(launch.exit_codes == std::vector<int>{1});
  BOOST_TEST(read_text(out.path / "rank0.error").find("WORLD_SIZE is set but RANK is not") !=
             std::string::npos);
}

// A rank that waits at the rendezvous says so every wait_report_interval (here 0.5 s) with how long
// it has waited, and fails at the timeout naming what did not come: the store's host (rank 1
// alone), the ranks that did not arrive (rank 0 alone). Found by a fault campaign: a rank whose
// store host was killed waited out 300 s printing nothing.
BOOST_AUTO_TEST_CASE(an_unreachable_store_or_a_missing_rank_is_reported_while_waited_for) {
  TempDir out("distributed");
  const auto count = [](const std::string& text, const std::string& part) {
    std::size_t n = 0;
    for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
    return n;
  };
  const std::vector<std::string> command{kWorker, "out=" + out.path.string(), "timeout_ms=3000",
                                         "report_ms=500"};
  // Rank 1 alone: nobody hosts the store at MASTER_ADDR:MASTER_PORT.
  const auto port = free_port();
  auto start = std::chrono::steady_clock::now();
  auto launch =
      wait_all({spawn(command, torchrun_environment(1, 2, port), out.path / "r1.log")}, start);
  BOOST_TEST(launch.exit_codes == std::vector<int>{1});
  BOOST_TEST(launch.seconds < 15.0);
  const auto where = "127.0.0.1:" + std::to_string(port);
  BOOST_TEST(read_text(out.path / "rank1.error")
                 .find("rank 1 could not reach the rendezvous store at " + where) !=
             std::string::npos);
  const auto waiting = read_text(out.path / "r1.log");
  BOOST_TEST(count(waiting, "rank 1 of 2: the rendezvous store at " + where +
                                " (hosted by rank 0) is not up after ") >= 3u,
             waiting);
  BOOST_TEST(waiting.find("is not up after 1.") != std::string::npos, waiting);
  // Rank 0 alone: rank 1 never arrives.
  const auto other_port = free_port();
  start = std::chrono::steady_clock::now();
  launch = wait_all({spawn(command, torchrun_environment(0, 2, other_port), out.path / "r0.log")},
                    start);
  BOOST_TEST(launch.exit_codes == std::vector<int>{1});
  BOOST_TEST(launch.seconds < 15.0);
  BOOST_TEST(read_text(out.path / "rank0.error").find("rank(s) 1 of 2 did not arrive") !=
             std::string::npos);
  const auto waited = read_text(out.path / "r0.log");
  BOOST_TEST(count(waited, "rank 0 of 2: still waiting at the rendezvous at 127.0.0.1:" +
                               std::to_string(other_port) + " for rank(s) 1 after ") >= 2u,
             waited);
}

// Batches of named fields (features, labels, index) collated by the trainer from a dataset of
// Batch samples: a run killed with SIGKILL mid-epoch, after its checkpoint of step 2, resumes to
// the uninterrupted run's weights bit for bit, in one process and on two ranks.
BOOST_AUTO_TEST_CASE(a_structured_run_killed_mid_epoch_resumes_exactly_on_one_and_two_ranks) {
  std::map<std::string, std::string> one_process;  // the uninterrupted run's results on 1 rank
  for (const int ranks : {1, 2}) {
    BOOST_TEST_CONTEXT(ranks << " rank(s)") {
      const auto batch = "batch=" + std::to_string(24 / ranks);
      TempDir whole("distributed");
      BOOST_REQUIRE_EQUAL(
          run_torchrun_style(kWorker, {"out=" + whole.path.string(), batch, "structured=1"}, ranks,
                             free_port())
              .exit_codes,
          std::vector<int>(static_cast<std::size_t>(ranks), 0));
      TempDir killed("distributed");
      const auto checkpoint = (killed.path / "step2.tbckpt").string();
      kill_ranks_mid_training({"out=" + killed.path.string(), batch, "structured=1", "save_step=2",
                               "save=" + checkpoint, "mark_step=3", "slow_ms=200"},
                              ranks, killed.path);
      BOOST_TEST_REQUIRE(!fs::exists(killed.path / "rank0.txt"), "the run ended before the kill");
      TempDir resumed("distributed");
      const auto launch = run_torchrun_style(
          kWorker, {"out=" + resumed.path.string(), batch, "structured=1", "resume=" + checkpoint},
          ranks, free_port());
      BOOST_REQUIRE_MESSAGE(
          launch.exit_codes == std::vector<int>(static_cast<std::size_t>(ranks), 0),
          read_text(resumed.path / "rank0.error"));
      const auto expected = load_parameters(whole.path / "rank0.params");
      BOOST_TEST(all_equal(load_parameters(resumed.path / "rank0.params"), expected));
      BOOST_TEST(read_results(resumed.path / "rank0.txt").at("step") == "8");
      // RegressionMetrics merges the ranks' shards: two ranks report what one process does (the
      // same global batch: the weights within float rounding).
      const auto results = read_results(whole.path / "rank0.txt");
      if (ranks == 1) one_process = results;
      for (const char* metric : {"val_mse", "val_r2", "val_explained_variance"}) {
        BOOST_TEST(std::stod(results.at(metric)) == std::stod(one_process.at(metric)),
                   boost::test_tools::tolerance(1e-4));
      }
      BOOST_TEST(read_results(resumed.path / "rank0.txt").at("val_accuracy") ==
                 read_results(whole.path / "rank0.txt").at("val_accuracy"));
    }
  }
}

/// The rows of a predictions.csv: the header, then each row's cells.
std::vector<std::vector<std::string>> csv_rows(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cells;
    std::stringstream fields(line);
    for (std::string cell; std::getline(fields, cell, ',');) cells.push_back(cell);
    rows.push_back(std::move(cells));
  }
  return rows;
}

// The predict example on two ranks (each predicting its unshuffled shard of 95 samples, padded to
// 48 each) writes every sample once, in order: the same classes as one process, and probabilities
// within the float rounding of weights trained on two ranks instead of one.
BOOST_AUTO_TEST_CASE(predictions_written_on_two_ranks_are_complete_and_in_the_inputs_order) {
  if (!fs::exists(kPredictExample)) {  // a preset without the examples (clang-core)
    BOOST_TEST_MESSAGE("skipped: " << kPredictExample << " is not built");
    return;
  }
  TempDir one("distributed");
  TempDir two("distributed");
  BOOST_REQUIRE_EQUAL(
      run_torchrun_style(kPredictExample.string(), {one.path.string()}, 1, free_port()).exit_codes,
      std::vector<int>{0});
  BOOST_REQUIRE_EQUAL(
      run_torchrun_style(kPredictExample.string(), {two.path.string()}, 2, free_port()).exit_codes,
      (std::vector<int>{0, 0}));
  const auto single = csv_rows(one.path / "predictions.csv");
  const auto pair = csv_rows(two.path / "predictions.csv");
  BOOST_REQUIRE_EQUAL(pair.size(), 96u);
  BOOST_REQUIRE_EQUAL(single.size(), 96u);
  BOOST_TEST(
      pair[0] == (std::vector<std::string>{"index", "class", "probability_0", "probability_1",
                                           "probability_2", "probability_3"}),
      boost::test_tools::per_element());
  for (std::size_t row = 1; row < pair.size(); ++row) {
    BOOST_TEST_CONTEXT("row " << row) {
      BOOST_REQUIRE_EQUAL(pair[row].size(), 6u);
      BOOST_TEST(pair[row][0] == std::to_string(row - 1));
      BOOST_TEST(pair[row][0] == single[row][0]);
      BOOST_TEST(pair[row][1] == single[row][1]);
      for (std::size_t k = 2; k < 6; ++k) {
        BOOST_TEST(std::stod(pair[row][k]) == std::stod(single[row][k]),
                   boost::test_tools::tolerance(1e-4));
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
