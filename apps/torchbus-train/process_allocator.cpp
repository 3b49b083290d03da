#include "process_allocator.hpp"

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace train {
namespace {

/// glibc's largest mmap threshold on 64-bit systems (HEAP_MAX_SIZE / 2): the MNIST CNN's largest
/// activation (19 MB at batch 128) stays below it.
constexpr int kMmapThreshold = 32 * 1024 * 1024;
/// The free memory at the top of the heap that is kept rather than returned.
constexpr int kTrimThreshold = 1024 * 1024 * 1024;

/// Whether the environment sets glibc's malloc parameters (then they are the user's choice).
bool environment_configures_malloc() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  return (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) ||
         std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr ||
         std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr;
}

}  // namespace

std::string keep_freed_memory() {
  if (environment_configures_malloc()) return "glibc's malloc as the environment configures it";
#if defined(__GLIBC__)
  if (mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1 &&
      mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1) {
    return "glibc's malloc keeps freed memory (blocks up to 32 MiB from the heap, trimmed beyond "
           "1 GiB free; GLIBC_TUNABLES or MALLOC_*_ in the environment choose otherwise)";
  }
#endif
  // mallopt refused: another malloc replaces glibc's (AddressSanitizer's, jemalloc, ...).
  return "malloc refused glibc's settings (another allocator replaces it, e.g. a sanitizer's); "
         "its defaults apply";
}

}  // namespace train
