#pragma once

// Starts distributed_worker ranks the ways users do: with torchrun's variables set by the test
// (as torchrun's agent would), or through OpenMPI's mpirun.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <support/scratch.hpp>

namespace torchbus::testing {

/// How a run of ranks ended.
struct Launch {
  std::vector<int> exit_codes;  ///< one per process started
  double seconds = 0;           ///< wall time until every process ended
};

/// A TCP port nobody listens on right now, for MASTER_PORT.
inline int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

/// Starts `program args...` with `environment` added to this process's environment; with `log`,
/// its standard output and error go to that file.
inline pid_t spawn(const std::vector<std::string>& command,
                   const std::map<std::string, std::string>& environment,
                   const std::filesystem::path& log = {}) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (!log.empty()) {
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0) _exit(126);
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      close(fd);
    }
    for (const auto& [name, value] : environment) setenv(name.c_str(), value.c_str(), 1);
    std::vector<char*> argv;
    for (const auto& part : command) argv.push_back(const_cast<char*>(part.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

inline Launch wait_all(const std::vector<pid_t>& pids,
                       std::chrono::steady_clock::time_point start) {
  Launch launch;
  for (const pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    launch.exit_codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  launch.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return launch;
}

/// The exit code of `pid` (128 + the signal if a signal ended it), or nothing if it is still
/// running after `limit`; it is killed then.
inline std::optional<int> wait_at_most(pid_t pid, std::chrono::duration<double> limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

/// torchrun's variables for rank `rank` of `world` on this machine.
inline std::map<std::string, std::string> torchrun_environment(int rank, int world, int port) {
  return {{"RANK", std::to_string(rank)},
          {"LOCAL_RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)}};
}

/// Runs `world` ranks of `program` with torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE,
/// MASTER_ADDR, MASTER_PORT); `ranks` limits which ranks are started (all by default).
inline Launch run_torchrun_style(const std::string& program, const std::vector<std::string>& args,
                                 int world, int port, std::vector<int> ranks = {},
                                 std::map<std::string, std::string> extra = {}) {
  if (ranks.empty()) {
    for (int rank = 0; rank < world; ++rank) ranks.push_back(rank);
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<pid_t> pids;
  for (const int rank : ranks) {
    auto environment = extra;
    for (const auto& [name, value] : torchrun_environment(rank, world, port)) {
      environment[name] = value;
    }
    std::vector<std::string> command{program};
    command.insert(command.end(), args.begin(), args.end());
    pids.push_back(spawn(command, environment));
  }
  return wait_all(pids, start);
}

/// Runs `world` ranks of `program` under `mpirun -np world`.
inline Launch run_mpirun(const std::string& program, const std::vector<std::string>& args,
                         int world, int port) {
  std::vector<std::string> command{"mpirun", "-np", std::to_string(world), "--oversubscribe"};
  if (geteuid() == 0) command.push_back("--allow-run-as-root");
  for (const std::string& variable :
       {std::string("MASTER_ADDR=127.0.0.1"), "MASTER_PORT=" + std::to_string(port)}) {
    command.push_back("-x");
    command.push_back(variable);
  }
  command.push_back(program);
  command.insert(command.end(), args.begin(), args.end());
  const auto start = std::chrono::steady_clock::now();
  return wait_all({spawn(command, {})}, start);
}

/// name=value lines of a worker's result file.
inline std::map<std::string, std::string> read_results(const std::filesystem::path& path) {
  std::map<std::string, std::string> results;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto equals = line.find('=');
    if (equals != std::string::npos) results[line.substr(0, equals)] = line.substr(equals + 1);
  }
  return results;
}

}  // namespace torchbus::testing
