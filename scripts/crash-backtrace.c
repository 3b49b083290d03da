// A preload that prints the backtrace of a crash (SIGSEGV, SIGBUS, SIGABRT) to stderr, then lets
// the signal end the process as before. A call through a null pointer leaves nothing to unwind, so
// it also prints the return address on top of the stack (the caller) as "caller: FILE +0xOFFSET",
// which `addr2line -f -C -e FILE OFFSET` turns into a function and line. scripts/device-check runs
// the CPU suites under it, with BOOST_TEST_CATCH_SYSTEM_ERRORS=no so that Boost.Test does not take
// the signal first:
//   gcc -shared -fPIC -o crash-backtrace.so crash-backtrace.c -ldl
//   LD_PRELOAD=$PWD/crash-backtrace.so BOOST_TEST_CATCH_SYSTEM_ERRORS=no ./framework_tests
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <ucontext.h>
#include <unistd.h>

static void print_place(const char* what, void* address) {
  Dl_info info;
  if (dladdr(address, &info) != 0 && info.dli_fname != NULL) {
    fprintf(stderr, "%s: %s +0x%lx (%s)\n", what, info.dli_fname,
            (unsigned long)((uintptr_t)address - (uintptr_t)info.dli_fbase),
            info.dli_sname != NULL ? info.dli_sname : "?");
  } else {
    fprintf(stderr, "%s: %p (in no loaded file)\n", what, address);
  }
}

static void on_fault(int sig, siginfo_t* info, void* context) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  fprintf(stderr, "signal %d at %p; backtrace:\n", sig, info->si_addr);
  backtrace_symbols_fd(frames, n, 2);
#if defined(__x86_64__)
  const ucontext_t* machine = (const ucontext_t*)context;
  void* pc = (void*)machine->uc_mcontext.gregs[REG_RIP];
  print_place("pc", pc);
  print_place("caller", *(void**)machine->uc_mcontext.gregs[REG_RSP]);
#else
  (void)context;
#endif
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
