#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <torchbus/cpu_allocation_cache.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define TORCHBUS_POISON(address, size) ASAN_POISON_MEMORY_REGION(address, size)
#define TORCHBUS_UNPOISON(address, size) ASAN_UNPOISON_MEMORY_REGION(address, size)
#else
#define TORCHBUS_POISON(address, size) static_cast<void>(0)
#define TORCHBUS_UNPOISON(address, size) static_cast<void>(0)
#endif

namespace torchbus {
namespace {

// A block is a header of kHeaderBytes followed by the tensor's memory, both 64-byte aligned as
// LibTorch's own CPU allocator aligns; its size is a power of two, 2^size_class bytes.
constexpr std::size_t kAlignment = 64;
constexpr std::size_t kHeaderBytes = 64;
constexpr int kMinClass = 7;   // 128 bytes: the header and up to 64 bytes of data
constexpr int kMaxClass = 21;  // kMaxBlockBytes of data and the header fit in 2 MiB
static_assert((std::size_t{1} << (kMaxClass - 1)) <
              CpuAllocationCache::kMaxBlockBytes + kHeaderBytes);
static_assert((std::size_t{1} << kMaxClass) >= CpuAllocationCache::kMaxBlockBytes + kHeaderBytes);

struct BlockHeader {
  int size_class;
  BlockHeader* next;  // in a thread's free list
};
static_assert(sizeof(BlockHeader) <= kHeaderBytes);

BlockHeader* header_of(void* data) {
  return reinterpret_cast<BlockHeader*>(static_cast<char*>(data) - kHeaderBytes);
}
void* data_of(BlockHeader* header) {
  return reinterpret_cast<char*>(header) + kHeaderBytes;
}
std::size_t block_bytes(int size_class) {
  return std::size_t{1} << size_class;
}
int size_class_of(std::size_t data_bytes) {
  int size_class = kMinClass;
  while (block_bytes(size_class) < data_bytes + kHeaderBytes) ++size_class;
  return size_class;
}

std::atomic<bool> g_installed{false};
// Set when the calling thread's cache was destroyed (thread exit): its blocks are freed directly.
thread_local bool t_cache_gone = false;

/// The freed blocks of one thread, by size class.
struct ThreadCache {
  std::array<BlockHeader*, kMaxClass + 1> lists{};
  std::size_t bytes = 0;

  ~ThreadCache() {
    release_all();
    t_cache_gone = true;
  }
  BlockHeader* pop(int size_class) {
    BlockHeader* header = lists[size_class];
    if (header == nullptr) return nullptr;
    TORCHBUS_UNPOISON(header, sizeof(BlockHeader));
    lists[size_class] = header->next;
    bytes -= block_bytes(size_class);
    TORCHBUS_UNPOISON(data_of(header), block_bytes(size_class) - kHeaderBytes);
    return header;
  }
  bool push(BlockHeader* header) {
    const auto size = block_bytes(header->size_class);
    if (bytes + size > CpuAllocationCache::kMaxCachedBytesPerThread) return false;
    header->next = lists[header->size_class];
    lists[header->size_class] = header;
    bytes += size;
    TORCHBUS_POISON(header, size);
    return true;
  }
  void release_all() {
    for (int size_class = kMinClass; size_class <= kMaxClass; ++size_class) {
      while (BlockHeader* header = pop(size_class)) std::free(header);
    }
  }
};

ThreadCache& thread_cache() {
  thread_local ThreadCache cache;
  return cache;
}

/// Returns a block to the calling thread's cache while the cache is installed, else to the system.
void release(void* data) {
  if (data == nullptr) return;
  BlockHeader* header = header_of(data);
  if (!g_installed.load(std::memory_order_relaxed) || t_cache_gone ||
      !thread_cache().push(header)) {
    std::free(header);
  }
}

/// LibTorch's CPU allocator while a CpuAllocationCache is alive. Immortal: tensors allocated
/// through it may be freed at any time, even during static destruction.
class CachingAllocator final : public c10::Allocator {
 public:
  c10::Allocator* previous = nullptr;

  c10::DataPtr allocate(std::size_t bytes) const override {
    if (bytes == 0 || bytes > CpuAllocationCache::kMaxBlockBytes) {
      return previous->allocate(bytes);
    }
    const int size_class = size_class_of(bytes);
    BlockHeader* header = t_cache_gone ? nullptr : thread_cache().pop(size_class);
    if (header == nullptr) {
      void* memory = nullptr;
      const int error = posix_memalign(&memory, kAlignment, block_bytes(size_class));
      TORCH_CHECK(error == 0 && memory != nullptr, "CpuAllocationCache: cannot allocate ",
                  block_bytes(size_class), " bytes for a CPU tensor of ", bytes,
                  " bytes (out of memory)");
      header = static_cast<BlockHeader*>(memory);
    }
    header->size_class = size_class;
    void* data = data_of(header);
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
};

CachingAllocator& caching_allocator() {
  static auto* allocator = new CachingAllocator();  // never destroyed, see above
  return *allocator;
}

std::mutex g_mutex;
int g_users = 0;  // CpuAllocationCache objects alive

}  // namespace

CpuAllocationCache::CpuAllocationCache() {
  const std::lock_guard<std::mutex> lock(g_mutex);
  if (g_users++ > 0) return;
  auto& allocator = caching_allocator();
  allocator.previous = c10::GetCPUAllocator();
  c10::SetCPUAllocator(&allocator);
  g_installed.store(c10::GetCPUAllocator() == &allocator, std::memory_order_relaxed);
}

CpuAllocationCache::~CpuAllocationCache() {
  const std::lock_guard<std::mutex> lock(g_mutex);
  if (--g_users > 0) return;
  if (g_installed.load(std::memory_order_relaxed)) {
    c10::SetCPUAllocator(caching_allocator().previous);
    g_installed.store(false, std::memory_order_relaxed);
  }
  // Blocks this thread cached go back now; other threads' go when they exit.
  if (!t_cache_gone) thread_cache().release_all();
}

bool CpuAllocationCache::installed() noexcept {
  return g_installed.load(std::memory_order_relaxed);
}

std::size_t CpuAllocationCache::cached_bytes() noexcept {
  return t_cache_gone ? 0 : thread_cache().bytes;
}

}  // namespace torchbus
