// A library that does what Debian 13's LibTorch does through OpenMPI's UCX when it is loaded:
// installs a handler of its own for SIGHUP (UCX's debug handler). It also raises SIGHUP while
// loading, as a user's signal sent during the load would arrive.

#include <signal.h>

namespace {

volatile sig_atomic_t taken = 0;

extern "C" void take_sighup(int) {
  taken = 1;
}

__attribute__((constructor)) void install_on_load() {
  struct sigaction action {};
  action.sa_handler = take_sighup;
  sigemptyset(&action.sa_mask);
  sigaction(SIGHUP, &action, nullptr);
  raise(SIGHUP);
}

}  // namespace

/// Whether this library's SIGHUP handler ran.
extern "C" int sighup_taker_took_a_signal() {
  return taken;
}
