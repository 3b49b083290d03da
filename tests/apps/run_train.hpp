#pragma once

// Running torchbus-train as a user does, through sh, and collecting what it printed.

#include <boost/test/unit_test.hpp>
#include <support/scratch.hpp>

#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

namespace torchbus::testing {

/// The torchbus-train executable under test.
inline const std::string kTrain = TORCHBUS_TRAIN_PATH;

/// What a run of torchbus-train gave back.
struct TrainResult {
  int status = -1;     ///< the exit code; -1 when a signal ended it (the time limit included)
  std::string output;  ///< stdout and stderr
};

/// Runs torchbus-train with `arguments` (shell words) through sh, after the shell commands `setup`
/// (e.g. limits), killed after `time_limit_seconds` when that is not 0.
inline TrainResult run_train(const std::string& arguments, const std::string& setup = "",
                             int time_limit_seconds = 0) {
  const std::string limit = time_limit_seconds > 0
                                ? "timeout -s KILL " + std::to_string(time_limit_seconds) + " "
                                : std::string();
  const std::string command =
      setup + " exec " + limit + std::string(TORCHBUS_TRAIN_PATH) + " " + arguments + " 2>&1";
  TrainResult result;
  FILE* pipe = popen(command.c_str(), "r");
  BOOST_REQUIRE(pipe != nullptr);
  std::array<char, 4096> buffer{};
  while (fgets(buffer.data(), buffer.size(), pipe) != nullptr) result.output += buffer.data();
  const int status = pclose(pipe);
  // timeout's SIGKILL of its child shows as the exit code 128 + 9.
  const bool killed = time_limit_seconds > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 128 + 9;
  result.status = WIFEXITED(status) && !killed ? WEXITSTATUS(status) : -1;
  return result;
}

/// Waits up to a minute until the file at `path` contains `text`; false if it never did.
inline bool wait_until_written(const std::filesystem::path& path, const std::string& text) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (read_text(path).find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

/// Waits, a minute at most, until `path` exists (a symbolic link counts, whatever it names);
/// false when it did not.
inline bool wait_until_exists(const std::filesystem::path& path) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (!std::filesystem::exists(std::filesystem::symlink_status(path))) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace torchbus::testing
