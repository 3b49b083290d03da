// The torchbus-train executable: installs the stop-signal handlers before anything else, then
// loads the training program (torchbus-train.so: LibTorch, Gloo, all of torchbus) and runs it.
// Loading LibTorch (the dynamic loader and LibTorch's static constructors) takes 0.1-0.6 s; a
// stop signal then is held back until it is loaded, then is a stop request like any other, and
// the program exits with 128+N before writing anything, instead of being killed while still
// loading. A library that installs a handler of its own for a stop signal while it loads (UCX's
// for SIGHUP) is overruled.

#include "exit_status.hpp"
#include "stop_signals.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <string>

namespace {

/// The folder of this executable, from /proc/self/exe ("." if it cannot be read).
std::string executable_folder() {
  char path[PATH_MAX];
  const auto length = readlink("/proc/self/exe", path, sizeof path - 1);
  if (length <= 0) return ".";
  const std::string executable(path, static_cast<std::size_t>(length));
  return executable.substr(0, executable.rfind('/'));
}

}  // namespace

int main(int argc, char** argv) {
  train::install_stop_signals();
  // Where the build and the installation put the program, relative to this executable.
  const auto program = executable_folder() + "/" TORCHBUS_TRAIN_PROGRAM;
  void* loaded = train::load_keeping_stop_signals(program.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (loaded == nullptr) {
    std::fprintf(stderr, "torchbus-train: cannot load the training program: %s\n", dlerror());
    return train::kExitFailed;
  }
  using Entry = int (*)(int, char**);
  const auto run = reinterpret_cast<Entry>(dlsym(loaded, "torchbus_train_main"));
  if (run == nullptr) {
    std::fprintf(stderr, "torchbus-train: %s is not the training program: %s\n", program.c_str(),
                 dlerror());
    return train::kExitFailed;
  }
  return run(argc, argv);
}
