#include "startup_signals.hpp"

#include "exit_status.hpp"
#include "stop_signals.hpp"

#include <spdlog/spdlog.h>
#include <torchbus/logging.hpp>

#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <iostream>
#include <thread>

namespace train {
namespace {

/// How often the main thread looks for a stop signal while another thread joins the group.
constexpr std::chrono::milliseconds kSignalPoll{50};

void log_startup_signal(int signal) {
  torchbus::logger()->warn("{} during start-up: exiting before training, nothing written",
                           signal_name(signal));
}

}  // namespace

void exit_if_signalled_during_startup() {
  if (const int signal = received_stop_signal()) {
    log_startup_signal(signal);
    throw StartupExit(kExitSignalBase + signal, "");
  }
}

std::shared_ptr<torchbus::ProcessGroup> join_process_group() {
  exit_if_signalled_during_startup();
  std::packaged_task<std::shared_ptr<torchbus::ProcessGroup>()> join(
      [] { return torchbus::ProcessGroup::from_environment(); });
  auto joined = join.get_future();
  // The joining thread, and the store's and Gloo's threads it starts, inherit the blocked stop
  // signals: they all reach this thread, and no c10d call fails with EINTR.
  sigset_t stop_signals, previous;
  sigemptyset(&stop_signals);
  for (const int signal : kStopSignals) sigaddset(&stop_signals, signal);
  pthread_sigmask(SIG_BLOCK, &stop_signals, &previous);
  std::thread joiner(std::move(join));
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  while (joined.wait_for(kSignalPoll) != std::future_status::ready) {
    if (const int signal = received_stop_signal()) {
      log_startup_signal(signal);
      torchbus::logger()->flush();
      std::cout.flush();
      std::fflush(nullptr);
      std::_Exit(kExitSignalBase + signal);  // the joining thread cannot be stopped or joined
    }
  }
  joiner.join();
  // A signal from here on ends the first start-up phase, on every rank alike (run_agreed).
  return joined.get();
}

}  // namespace train
