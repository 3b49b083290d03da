#pragma once

// Counts fsync calls: a program that compiles tests/support/fsync_count.cpp defines fsync itself,
// counting each call before it calls the C library's (the durability checks of atomic writes).

#include <cstdint>

namespace torchbus::testing {

/// Calls of fsync in this process since it started.
std::uint64_t fsyncs() noexcept;

}  // namespace torchbus::testing
