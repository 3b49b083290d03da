// Exact resume across processes: a worker killed with SIGKILL at chosen steps, also right as it
// starts writing a checkpoint, resumes and ends with the weights, optimizer state and batches of
// a run that was never interrupted.

#include "resume_setup.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <boost/test/unit_test.hpp>
#include <support/scratch.hpp>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

using namespace torchbus::testing;
namespace fs = std::filesystem;

namespace {

/// How a run of the worker ended.
struct WorkerEnd {
  bool finished = false;  ///< it printed "finished" and exited 0
  bool killed = false;    ///< SIGKILL ended it
};

/// Runs the worker on `directory`, logging to `log`. With `kill_at` set, it runs step by step
/// (after each "saving N" / "saved N" line it waits for this test) and gets SIGKILL at that line:
/// at "saved N" while it waits there (right after step N's checkpoint, before anything else), at
/// "saving N" as soon as it is let go on to write step N's checkpoint (during that write, or at
/// the latest while it waits after "saved N"). So the kill never comes after the run's end, or
/// past step N, however fast the machine.
WorkerEnd run_worker(const fs::path& directory, const fs::path& log,
                     const std::string& kill_at = "") {
  int output_fds[2], input_fds[2];
  BOOST_REQUIRE(pipe(output_fds) == 0);
  BOOST_REQUIRE(pipe(input_fds) == 0);
  // A worker that died unexpectedly must fail the test, not end it with SIGPIPE.
  const auto previous_sigpipe = std::signal(SIGPIPE, SIG_IGN);
  const pid_t pid = fork();
  BOOST_REQUIRE(pid >= 0);
  if (pid == 0) {
    std::signal(SIGPIPE, SIG_DFL);
    dup2(output_fds[1], STDOUT_FILENO);
    dup2(input_fds[0], STDIN_FILENO);
    for (const int fd : {output_fds[0], output_fds[1], input_fds[0], input_fds[1]}) close(fd);
    execl(TORCHBUS_RESUME_WORKER, TORCHBUS_RESUME_WORKER, directory.c_str(), log.c_str(),
          kill_at.empty() ? nullptr : "wait", nullptr);
    _exit(127);
  }
  close(output_fds[1]);
  close(input_fds[0]);
  const auto go_on = [&] { return write(input_fds[1], "\n", 1) == 1; };
  FILE* output = fdopen(output_fds[0], "r");
  char line[256];
  WorkerEnd end;
  while (std::fgets(line, sizeof line, output) != nullptr) {
    const std::string text(line);
    const bool waits =
        !kill_at.empty() && (text.rfind("saving ", 0) == 0 || text.rfind("saved ", 0) == 0);
    if (!kill_at.empty() && text == kill_at + "\n") {
      if (text.rfind("saving ", 0) == 0) go_on();
      kill(pid, SIGKILL);
      break;
    }
    end.finished = end.finished || text == "finished\n";
    if (waits) go_on();
  }
  close(input_fds[1]);
  std::fclose(output);
  int status = 0;
  waitpid(pid, &status, 0);
  std::signal(SIGPIPE, previous_sigpipe);
  end.finished = end.finished && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  end.killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  return end;
}

/// The rows of DIR/metrics.csv as "kind,step,epoch,loss,..." (without the wall time).
std::vector<std::string> csv_rows(const fs::path& directory) {
  std::vector<std::string> rows;
  const auto lines = read_lines(directory / "metrics.csv");
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const auto& line = lines[i];
    std::size_t wall_time = 0;
    for (int comma = 0; comma < 3; ++comma) wall_time = line.find(',', wall_time) + 1;
    rows.push_back(line.substr(0, wall_time) + line.substr(line.find(',', wall_time) + 1));
  }
  return rows;
}

struct Final {
  torch::nn::Sequential model = ResumeRun::make_model(0);
  torch::optim::Adam optimizer{model->parameters(), torch::optim::AdamOptions(1e-2)};
  explicit Final(const fs::path& directory) {
    torch::load(model, (directory / "final-model.pt").string());
    torch::load(optimizer, (directory / "final-optimizer.pt").string());
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(killed_process)

BOOST_AUTO_TEST_CASE(killed_at_chosen_steps_and_during_a_save_resumes_exactly) {
  const auto reference_dir = scratch("kill", "reference");
  BOOST_TEST_REQUIRE(run_worker(reference_dir, reference_dir / "batches.log").finished);
  const Final reference(reference_dir);
  const auto reference_batches = read_lines(reference_dir / "batches.log");
  BOOST_TEST_REQUIRE(reference_batches.size() == 24u);
  const auto reference_rows = csv_rows(reference_dir);
  BOOST_TEST_REQUIRE(reference_rows.size() == 12u + 3);

  // "saved N": killed after step N's checkpoint; "saving N": killed as step N's write begins, so
  // the run must resume from step N - 1 (or N if the write completed).
  for (const std::string kill_at : {"saved 1", "saving 6", "saved 8", "saving 11"}) {
    const auto dir = scratch(
        "kill", kill_at.substr(0, kill_at.find(' ')) + kill_at.substr(kill_at.find(' ') + 1));
    const auto killed = run_worker(dir, dir / "before.log", kill_at);
    BOOST_TEST_REQUIRE((killed.killed && !killed.finished),
                       kill_at << ": the SIGKILL did not end the worker");
    BOOST_TEST_REQUIRE(run_worker(dir, dir / "after.log").finished, kill_at);
    const Final resumed(dir);
    auto a = reference.model->parameters();
    auto b = resumed.model->parameters();
    for (std::size_t i = 0; i < a.size(); ++i) BOOST_TEST(torch::equal(a[i], b[i]), kill_at);
    auto& reference_optimizer = const_cast<torch::optim::Adam&>(reference.optimizer);
    auto& resumed_optimizer = const_cast<torch::optim::Adam&>(resumed.optimizer);
    const auto state_a = adam_state(reference_optimizer);
    const auto state_b = adam_state(resumed_optimizer);
    for (std::size_t i = 0; i < state_a.size(); ++i)
      BOOST_TEST(torch::equal(state_a[i], state_b[i]), kill_at);
    const auto stitched = stitch(read_lines(dir / "before.log"), read_lines(dir / "after.log"));
    BOOST_TEST(stitched == reference_batches, boost::test_tools::per_element());
    for (const auto& entry : fs::directory_iterator(dir)) {
      BOOST_TEST(entry.path().filename().string().find(".tmp-") == std::string::npos, kill_at);
    }
    // The CSV rows (buffered until each checkpoint) hold every step and epoch once, with the
    // uninterrupted run's values.
    BOOST_TEST(csv_rows(dir) == reference_rows, boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_SUITE_END()
