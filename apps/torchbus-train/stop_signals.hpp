#pragma once

// Graceful stops: SIGINT, SIGTERM, SIGHUP and SIGUSR1 ask torchbus-train to stop at the next step
// boundary (with a checkpoint and a summary); a second one ends the process at once.

#include <csignal>
#include <string>

namespace train {

/// The stop signals.
inline constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1};

/// Installs the handlers of the four stop signals (the main job only: a library must not).
void install_stop_signals();

/// dlopen(path, flags) with the stop signals held back, then the handler of every stop signal a
/// loaded library took over installed again (Debian 13's LibTorch loads OpenMPI's UCX, whose
/// debug handler takes SIGHUP); a stop signal sent meanwhile is delivered after that.
void* load_keeping_stop_signals(const char* path, int flags);

/// The stop signals the libraries of the last load_keeping_stop_signals had taken over, with the
/// library that had, e.g. "SIGHUP (from libucs.so.0)"; empty when none was.
std::string reclaimed_stop_signals();

/// The first stop signal received since start-up, or 0.
int received_stop_signal() noexcept;

/// The signal's name, e.g. "SIGTERM".
std::string signal_name(int signal);

/// The stop reason a run ended by `signal` records, e.g. "interrupted (SIGTERM)".
std::string interrupted_reason(int signal);

}  // namespace train
