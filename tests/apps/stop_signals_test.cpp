// torchbus-train's stop signals stay its own when the libraries it loads install handlers of their
// own (apps/torchbus-train/stop_signals.cpp): a library standing in for UCX, and LibTorch itself
// (on Debian 13 it loads OpenMPI's UCX, which takes SIGHUP).

#define BOOST_TEST_MODULE torchbus - stop signals
#include <boost/test/unit_test.hpp>
#include <torchbus-train/stop_signals.hpp>

#include <dlfcn.h>
#include <signal.h>

#include <string>

namespace {

/// The handler a signal has now.
void* handler_of(int signal) {
  struct sigaction current {};
  sigaction(signal, nullptr, &current);
  return reinterpret_cast<void*>(current.sa_handler);
}

/// Whether every stop signal has the handler install_stop_signals gave SIGINT.
bool stop_signals_are_ours() {
  for (const int signal : train::kStopSignals) {
    if (handler_of(signal) != handler_of(SIGINT)) return false;
  }
  return handler_of(SIGINT) != reinterpret_cast<void*>(SIG_DFL);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_library_taking_sighup_while_loading_gives_it_back_and_the_signal_stops) {
  train::install_stop_signals();
  BOOST_TEST(stop_signals_are_ours());
  void* taker = train::load_keeping_stop_signals(TORCHBUS_SIGHUP_TAKER, RTLD_NOW | RTLD_LOCAL);
  BOOST_TEST_REQUIRE(taker != nullptr, dlerror());
  BOOST_TEST(stop_signals_are_ours());
  BOOST_TEST(train::reclaimed_stop_signals() == "SIGHUP (from libsighup_taker.so)");
  // The SIGHUP raised while it loaded was held back, then reached torchbus-train's handler.
  BOOST_TEST(train::received_stop_signal() == SIGHUP);
  const auto took = reinterpret_cast<int (*)()>(dlsym(taker, "sighup_taker_took_a_signal"));
  BOOST_TEST_REQUIRE(took != nullptr);
  BOOST_TEST(took() == 0);
}

BOOST_AUTO_TEST_CASE(loading_libtorch_leaves_every_stop_signal_ours) {
  train::install_stop_signals();
  void* torch = train::load_keeping_stop_signals(TORCHBUS_LIBTORCH, RTLD_NOW | RTLD_LOCAL);
  BOOST_TEST_REQUIRE(torch != nullptr, dlerror());
  BOOST_TEST_MESSAGE(
      "stop signals taken back from LibTorch's libraries: "
      << (train::reclaimed_stop_signals().empty() ? "none" : train::reclaimed_stop_signals()));
  BOOST_TEST(stop_signals_are_ours());
}
