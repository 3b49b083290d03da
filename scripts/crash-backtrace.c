// A preload that prints the backtrace of a crash (SIGSEGV, SIGBUS, SIGABRT) to stderr, then lets
// the signal end the process as before. scripts/device-check runs the CPU suites under it, with
// BOOST_TEST_CATCH_SYSTEM_ERRORS=no so that Boost.Test does not take the signal first:
//   gcc -shared -fPIC -o crash-backtrace.so crash-backtrace.c
//   LD_PRELOAD=$PWD/crash-backtrace.so BOOST_TEST_CATCH_SYSTEM_ERRORS=no ./framework_tests
#define _GNU_SOURCE
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
static void on_fault(int sig, siginfo_t* info, void* context) {
  (void)context;
  void* frames[64];
  int n = backtrace(frames, 64);
  fprintf(stderr, "signal %d at %p; backtrace:\n", sig, info->si_addr);
  backtrace_symbols_fd(frames, n, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}
__attribute__((constructor)) static void install(void) {
  struct sigaction action = {0};
  action.sa_sigaction = on_fault;
  action.sa_flags = SA_SIGINFO;
  sigaction(SIGSEGV, &action, 0);
  sigaction(SIGBUS, &action, 0);
  sigaction(SIGABRT, &action, 0);
}
