// The counting fsync (see fsync_count.hpp): the program's own definition, which its statically
// linked torchbus libraries call, forwarding to the C library's.

#include "fsync_count.hpp"

#include <dlfcn.h>

#include <atomic>

namespace {
std::atomic<std::uint64_t> g_fsyncs{0};
}  // namespace

std::uint64_t torchbus::testing::fsyncs() noexcept {
  return g_fsyncs.load(std::memory_order_relaxed);
}

extern "C" int fsync(int fd) {
  g_fsyncs.fetch_add(1, std::memory_order_relaxed);
  static const auto libc_fsync = reinterpret_cast<int (*)(int)>(dlsym(RTLD_NEXT, "fsync"));
  return libc_fsync(fd);
}
