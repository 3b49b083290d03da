// Stop signals before training: while torchbus-train loads (LibTorch's loading and static
// constructors), while a rank connects to the rendezvous store or waits there for the others; and
// ranks that die at the rendezvous. Each ends within seconds, with 128+N (or 1 naming the dead
// rank), and nothing written into OUT.

#include "run_train.hpp"

#include <boost/test/unit_test.hpp>
#include <distributed/launch.hpp>
#include <support/errors.hpp>
#include <support/scratch.hpp>
#include <torchbus-train/stop_signals.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using torchbus::testing::contains;
using torchbus::testing::has;
using torchbus::testing::kTrain;
using torchbus::testing::read_text;
using torchbus::testing::TempDir;
using torchbus::testing::wait_until_written;
using Clock = std::chrono::steady_clock;

namespace {

/// How one torchbus-train process ended.
struct Ending {
  int exit_code = -1;  ///< -1 when a signal killed it or it outlived its limit
  int killed_by = 0;   ///< the signal that killed it, 0 if none
  double seconds = 0;  ///< from `since` to its end
  std::string output;  ///< standard output and error
};

/// Waits up to `limit` seconds for `pid` (started with its output in `log`), killing it then.
Ending wait_for_ending(pid_t pid, const fs::path& log, double limit, Clock::time_point since) {
  Ending ending;
  const auto deadline = Clock::now() + std::chrono::duration<double>(limit);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) != pid) {
    if (Clock::now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ending.output = read_text(log);
      return ending;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ending.seconds = std::chrono::duration<double>(Clock::now() - since).count();
  if (WIFEXITED(status)) ending.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) ending.killed_by = WTERMSIG(status);
  ending.output = read_text(log);
  return ending;
}

/// Waits until `pid` runs torchbus-train (past the exec of spawn()'s fork), and returns when.
Clock::time_point wait_until_exec(pid_t pid) {
  const auto executable = fs::canonical(kTrain);
  const auto link = "/proc/" + std::to_string(pid) + "/exe";
  std::error_code error;
  while (fs::read_symlink(link, error) != executable && !error) {
  }
  return Clock::now();
}

/// The processor time `pid` has used so far, in seconds (utime + stime of /proc/PID/stat).
double processor_seconds(pid_t pid) {
  const auto stat = read_text("/proc/" + std::to_string(pid) + "/stat");
  const auto command_end = stat.rfind(')');
  if (command_end == std::string::npos) return -1;
  std::istringstream fields(stat.substr(command_end + 2));  // from field 3, the state
  std::string field;
  for (int skipped = 3; skipped < 14; ++skipped) fields >> field;
  double user = 0, system = 0;
  fields >> user >> system;
  return (user + system) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

/// Waits until `pid` has a handler for `signal` (the SigCgt mask of /proc/PID/status); returns
/// the processor time it had used then, or -1 if it ended first.
double wait_until_caught(pid_t pid, int signal) {
  const auto status = "/proc/" + std::to_string(pid) + "/status";
  for (;;) {
    const auto text = read_text(status);
    const auto at = text.find("SigCgt:");
    if (at == std::string::npos) return -1;
    if ((std::stoull(text.substr(at + 7), nullptr, 16) >> (signal - 1)) & 1) {
      return processor_seconds(pid);
    }
  }
}

/// A short run into `out`.
std::vector<std::string> short_run_command(const fs::path& out) {
  return {kTrain, "--max-steps", "5", "--threads", "1", "--no-progress", "--out", out.string()};
}

/// A process whose standard output and error go into a pipe that this test filled before it
/// started: the first thing it writes waits until drain_held() reads the pipe. torchbus-train
/// writes its first line during its start-up (at the latest "training: ...", which comes before
/// its last check for a stop signal), so it cannot leave its start-up until then, however fast
/// the machine, and a signal sent before drain_held() lands in the start-up by construction.
struct Held {
  pid_t pid = -1;
  int output = -1;         ///< the read end of the pipe
  std::size_t filler = 0;  ///< the bytes this test wrote into it first
};

Held spawn_held(const std::vector<std::string>& command) {
  int pipe_ends[2];
  BOOST_REQUIRE(pipe2(pipe_ends, O_CLOEXEC) == 0);
  Held held;
  held.output = pipe_ends[0];
  // Fill it without blocking: whole pages, then single bytes (none fit, as a rule).
  BOOST_REQUIRE(fcntl(pipe_ends[1], F_SETFL, O_NONBLOCK) == 0);
  const std::string page(4096, '#');
  while (write(pipe_ends[1], page.data(), page.size()) == static_cast<ssize_t>(page.size())) {
    held.filler += page.size();
  }
  while (write(pipe_ends[1], "#", 1) == 1) ++held.filler;
  BOOST_REQUIRE(held.filler > 0);
  BOOST_REQUIRE(fcntl(pipe_ends[1], F_SETFL, 0) == 0);  // the process's writes wait
  held.pid = fork();
  BOOST_REQUIRE(held.pid >= 0);
  if (held.pid == 0) {
    dup2(pipe_ends[1], STDOUT_FILENO);  // (dup2 clears O_CLOEXEC on the copies)
    dup2(pipe_ends[1], STDERR_FILENO);
    std::vector<char*> argv;
    for (const auto& part : command) argv.push_back(const_cast<char*>(part.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(pipe_ends[1]);
  return held;
}

/// Reads the pipe of `held` to its end (what the process wrote, without the filler), then waits
/// for the process; at most `limit` seconds in all, killing it then.
Ending drain_held(const Held& held, double limit, Clock::time_point since) {
  Ending ending;
  const auto deadline = Clock::now() + std::chrono::duration<double>(limit);
  std::string text;
  char buffer[65536];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    pollfd readable{held.output, POLLIN, 0};
    if (poll(&readable, 1, static_cast<int>(left.count())) <= 0) continue;
    const auto got = read(held.output, buffer, sizeof buffer);
    if (got > 0) {
      text.append(buffer, static_cast<std::size_t>(got));
    } else if (got == 0 || errno != EINTR) {
      break;  // the end: every writer closed it
    }
  }
  close(held.output);
  ending.output = text.size() > held.filler ? text.substr(held.filler) : std::string();
  int status = 0;
  while (waitpid(held.pid, &status, WNOHANG) != held.pid) {
    if (Clock::now() >= deadline) {
      kill(held.pid, SIGKILL);
      waitpid(held.pid, &status, 0);
      return ending;  // exit_code -1: it outlived its limit
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ending.seconds = std::chrono::duration<double>(Clock::now() - since).count();
  if (WIFEXITED(status)) ending.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) ending.killed_by = WTERMSIG(status);
  return ending;
}

/// What a process stopped by `signal` before training shows: exit 128+N after the start-up line.
void check_stopped_before_training(const Ending& ending, int signal, const fs::path& out) {
  BOOST_TEST_INFO("output: " << ending.output);
  BOOST_TEST(ending.killed_by == 0);  // not killed by the signal: its handler was installed
  BOOST_TEST(ending.exit_code == 128 + signal);
  BOOST_TEST(has(ending.output, train::signal_name(signal) +
                                    " during start-up: exiting before training, nothing written"));
  BOOST_TEST(!contains(ending.output, "run failed"));
  BOOST_TEST(!fs::exists(out));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(startup_signals)

// Before this was fixed the handlers were installed at the start of main(), after the dynamic
// loader had mapped LibTorch and run its static constructors (0.1-0.6 s): a signal then killed
// the process.
BOOST_AUTO_TEST_CASE(a_stop_signal_while_the_program_loads_exits_128_plus_n_with_nothing_written) {
  TempDir work("startup_signals");
  struct Shot {
    int signal;
    int after_ms;  ///< after the process started running torchbus-train
  };
  // after_ms -1: as soon as its handler is installed. Each shot waits for the handler: on a
  // loaded machine a process may not run at all in its first milliseconds. Each process is held
  // at its first line of output (spawn_held) until every shot is sent, so that a shot after its
  // loading (which takes 0.1-0.6 s, depending on the machine) still finds it starting up.
  const std::vector<Shot> shots{{SIGTERM, -1},  {SIGINT, 5},   {SIGTERM, 20}, {SIGUSR1, 50},
                                {SIGTERM, 100}, {SIGHUP, 150}, {SIGTERM, 300}};
  std::vector<Held> held;
  std::vector<pid_t> pids;
  std::vector<Clock::time_point> started;
  for (std::size_t i = 0; i < shots.size(); ++i) {
    const auto tag = std::to_string(i);
    held.push_back(spawn_held(short_run_command(work.path / ("out" + tag))));
    pids.push_back(held.back().pid);
    started.push_back(wait_until_exec(pids.back()));
    std::this_thread::sleep_until(started.back() +
                                  std::chrono::milliseconds(std::max(0, shots[i].after_ms)));
    const double used = wait_until_caught(pids.back(), shots[i].signal);
    if (shots[i].after_ms < 0) {
      // What precedes the handlers is the loading of a small executable, not of LibTorch (whose
      // loading and static constructors take 0.5 s of processor time here).
      BOOST_TEST(used < 0.05, "the handler came after " << used << " s of processor time");
    }
    kill(pids.back(), shots[i].signal);
  }
  for (std::size_t i = 0; i < shots.size(); ++i) {
    const auto tag = std::to_string(i);
    BOOST_TEST_CONTEXT(train::signal_name(shots[i].signal)
                       << " " << shots[i].after_ms << " ms after exec") {
      const auto ending = drain_held(held[i], 60, started[i]);
      check_stopped_before_training(ending, shots[i].signal, work.path / ("out" + tag));
    }
  }
}

// A rank waiting at the rendezvous for an absent rank (rank 0, which hosts the store), or
// connecting to a store not there yet (rank 1): before this was fixed the first ignored the
// signal until the 300 s timeout, the second failed with exit 1, "Interrupted system call".
BOOST_AUTO_TEST_CASE(a_stop_signal_at_the_rendezvous_exits_128_plus_n_within_seconds) {
  TempDir work("startup_signals");
  struct Lone {
    int rank;
    int signal;
    const char* waiting;  ///< the log line that shows it is waiting
  };
  const std::vector<Lone> lones{{0, SIGINT, "is at the rendezvous"},
                                {0, SIGUSR1, "is at the rendezvous"},
                                {1, SIGTERM, "is joining the process group"},
                                {1, SIGHUP, "is joining the process group"}};
  std::vector<pid_t> pids;
  for (std::size_t i = 0; i < lones.size(); ++i) {
    const auto tag = std::to_string(i);
    pids.push_back(torchbus::testing::spawn(
        short_run_command(work.path / ("out" + tag)),
        torchbus::testing::torchrun_environment(lones[i].rank, 2, torchbus::testing::free_port()),
        work.path / (tag + ".log")));
  }
  for (std::size_t i = 0; i < lones.size(); ++i) {
    const auto tag = std::to_string(i);
    BOOST_TEST_CONTEXT("rank " << lones[i].rank << " alone, "
                               << train::signal_name(lones[i].signal)) {
      const auto log = work.path / (tag + ".log");
      const bool waiting = wait_until_written(log, lones[i].waiting);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // well inside the wait
      const auto sent = Clock::now();
      kill(pids[i], lones[i].signal);
      const auto ending = wait_for_ending(pids[i], log, 10, sent);
      BOOST_TEST_REQUIRE(waiting, read_text(log));
      check_stopped_before_training(ending, lones[i].signal, work.path / ("out" + tag));
      BOOST_TEST(ending.seconds < 3.0);
      BOOST_TEST(!contains(ending.output, "Interrupted system call"));
    }
  }
}

// Ranks 0 and 1 of three wait at the rendezvous for rank 2; one of them is killed. The survivor
// exits 1 naming it, long before the 300 s timeout: rank 0 when rank 1's heartbeat stops, rank 1
// at once when the store that rank 0 hosted goes away.
BOOST_AUTO_TEST_CASE(a_rank_killed_at_the_rendezvous_makes_the_other_exit_1_naming_it) {
  TempDir work("startup_signals");
  struct Pair {
    std::vector<pid_t> pids;
    fs::path folder;
    fs::path log(int rank) const { return folder / ("rank" + std::to_string(rank) + ".log"); }
  };
  std::vector<Pair> pairs;
  for (const int victim : {1, 0}) {
    Pair pair{{}, work.path / ("victim" + std::to_string(victim))};
    fs::create_directories(pair.folder);
    const auto port = torchbus::testing::free_port();
    for (int rank = 0; rank < 2; ++rank) {
      pair.pids.push_back(torchbus::testing::spawn(
          short_run_command(pair.folder / "out"),
          torchbus::testing::torchrun_environment(rank, 3, port), pair.log(rank)));
    }
    pairs.push_back(pair);
  }
  const std::vector<std::string> expected{
      "rank 1 arrived, then fell silent for 1",  // 10.0 s or a little more
      "rank 1 lost the rendezvous store at 127.0.0.1:"};
  std::vector<Clock::time_point> killed;
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const int victim = 1 - static_cast<int>(i);
    BOOST_TEST_REQUIRE(wait_until_written(pairs[i].log(0), "is at the rendezvous"),
                       read_text(pairs[i].log(0)));
    BOOST_TEST_REQUIRE(wait_until_written(pairs[i].log(1), "is at the rendezvous"),
                       read_text(pairs[i].log(1)));
    killed.push_back(Clock::now());
    kill(pairs[i].pids[static_cast<std::size_t>(victim)], SIGKILL);
  }
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const int victim = 1 - static_cast<int>(i), survivor = static_cast<int>(i);
    BOOST_TEST_CONTEXT("rank " << victim << " killed") {
      const auto ending = wait_for_ending(pairs[i].pids[static_cast<std::size_t>(survivor)],
                                          pairs[i].log(survivor), 30, killed[i]);
      waitpid(pairs[i].pids[static_cast<std::size_t>(victim)], nullptr, 0);
      BOOST_TEST_INFO("survivor's output: " << ending.output);
      BOOST_TEST(ending.exit_code == 1);  // -1: still waiting after 30 s
      BOOST_TEST(has(ending.output, expected[i]));
      BOOST_TEST(has(ending.output, victim == 1 ? "while waiting for rank(s) 2 of 3"
                                                : "rank 0, which hosted it, has exited"));
      BOOST_TEST(!contains(ending.output, "timed out"));
      BOOST_TEST(!fs::exists(pairs[i].folder / "out"));
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
