#pragma once

/// \file
/// How torchbus-train's process uses glibc's malloc: it keeps the memory it frees for the next
/// step (a program may configure its own process; the torchbus library never does).

#include <string>

namespace train {

/// Unless the environment configures glibc's malloc already (GLIBC_TUNABLES naming a
/// glibc.malloc tunable, MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_), keeps freed memory in
/// the process: blocks up to 32 MiB come from the heap instead of mappings of their own, and the
/// heap goes back to the system only beyond 1 GiB free. Returns what the process uses, for the log
/// (also when another malloc, such as AddressSanitizer's, refuses glibc's settings).
std::string keep_freed_memory();

}  // namespace train
