#pragma once

/// \file
/// CpuAllocationCache: reuses freed CPU tensor memory instead of returning it to malloc.

#include <cstddef>

namespace torchbus {

/// While one is alive, LibTorch's CPU tensors of up to `kMaxBlockBytes` take their memory from a
/// cache of blocks freed on the same thread (one per power-of-two size) instead of
/// `posix_memalign`/`free`; larger ones and empty ones go to the allocator it replaced, which is
/// restored when the last one is destroyed. Memory allocated meanwhile stays valid afterwards.
/// The Trainer keeps one for each `fit`/`evaluate` (`TrainerOptions::cache_cpu_allocations`).
class CpuAllocationCache {
 public:
  /// Largest tensor memory served from the cache.
  static constexpr std::size_t kMaxBlockBytes = std::size_t{1} << 20;
  /// Most bytes one thread keeps cached; blocks freed beyond that go back to the system.
  static constexpr std::size_t kMaxCachedBytesPerThread = std::size_t{64} << 20;

  /// Installs the cache as LibTorch's CPU allocator unless another CpuAllocationCache did.
  CpuAllocationCache();
  /// Restores the previous CPU allocator when this is the last one alive.
  ~CpuAllocationCache();
  CpuAllocationCache(const CpuAllocationCache&) = delete;
  CpuAllocationCache& operator=(const CpuAllocationCache&) = delete;

  /// Whether LibTorch's CPU allocator is the cache now.
  static bool installed() noexcept;
  /// Bytes of freed blocks the calling thread holds for reuse.
  static std::size_t cached_bytes() noexcept;
};

}  // namespace torchbus
