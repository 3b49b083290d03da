#pragma once

// Counts heap allocations: a program that compiles tests/support/allocation_count.cpp replaces the
// global operator new with one that counts (the benchmarks' and tests' no-allocation checks).

#include <cstdint>

namespace torchbus::testing {

/// Calls of the global operator new (any form) since the program started.
std::uint64_t allocations() noexcept;

}  // namespace torchbus::testing
