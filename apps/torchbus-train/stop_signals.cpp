#include "stop_signals.hpp"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <csignal>

namespace train {
namespace {

std::atomic<int> first_signal{0};
std::string reclaimed;  // by the last load_keeping_stop_signals
static_assert(std::atomic<int>::is_always_lock_free, "the handler needs a lock-free atomic");

extern "C" void on_stop_signal(int signal) {
  int none = 0;
  if (first_signal.compare_exchange_strong(none, signal)) return;
  // The second stop signal: end now, with the status of that signal.
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

}  // namespace

void install_stop_signals() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (const int signal : kStopSignals) sigaction(signal, &action, nullptr);
}

void* load_keeping_stop_signals(const char* path, int flags) {
  sigset_t stop_signals, previous;
  sigemptyset(&stop_signals);
  for (const int signal : kStopSignals) sigaddset(&stop_signals, signal);
  // Threads the libraries start while loading inherit the mask and never take a stop signal.
  pthread_sigmask(SIG_BLOCK, &stop_signals, &previous);
  void* loaded = dlopen(path, flags);
  std::string taken;
  for (const int signal : kStopSignals) {
    struct sigaction current {};
    sigaction(signal, nullptr, &current);
    if (current.sa_handler == on_stop_signal) continue;
    // The handler's address names its library (sa_sigaction shares the union with sa_handler).
    Dl_info owner{};
    const bool known = dladdr(reinterpret_cast<void*>(current.sa_handler), &owner) != 0 &&
                       owner.dli_fname != nullptr;
    const std::string library = known ? owner.dli_fname : "an unknown library";
    taken += (taken.empty() ? "" : ", ") + signal_name(signal) + " (from " +
             library.substr(library.rfind('/') + 1) + ")";
  }
  if (!taken.empty()) install_stop_signals();
  reclaimed = std::move(taken);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  return loaded;
}

std::string reclaimed_stop_signals() {
  return reclaimed;
}

int received_stop_signal() noexcept {
  return first_signal.load(std::memory_order_relaxed);
}

std::string signal_name(int signal) {
  switch (signal) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    case SIGUSR1:
      return "SIGUSR1";
    default:
      return "signal " + std::to_string(signal);
  }
}

std::string interrupted_reason(int signal) {
  return "interrupted (" + signal_name(signal) + ")";
}

}  // namespace train
