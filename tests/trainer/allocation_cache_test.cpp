// CpuAllocationCache: freed CPU tensor memory is reused on the same thread while a cache is alive,
// LibTorch's allocator is restored after the last one, and training gives the same weights.

#include <boost/test/unit_test.hpp>
#include <support/fixtures.hpp>

#include <c10/core/CPUAllocator.h>

#include <cstdint>
#include <thread>

using namespace torchbus;
using namespace torchbus::testing;

BOOST_AUTO_TEST_SUITE(allocation_cache)

BOOST_AUTO_TEST_CASE(freed_memory_is_reused_while_a_cache_is_alive) {
  c10::Allocator* const before = c10::GetCPUAllocator();
  {
    const CpuAllocationCache cache;
    BOOST_TEST(CpuAllocationCache::installed());
    BOOST_TEST(c10::GetCPUAllocator() != before);
    void* first = nullptr;
    {
      auto tensor = torch::ones({32, 64});
      first = tensor.data_ptr();
      BOOST_TEST(reinterpret_cast<std::uintptr_t>(first) % 64 == 0);
    }
    BOOST_TEST(CpuAllocationCache::cached_bytes() >= 32 * 64 * sizeof(float));
    auto again = torch::empty({64, 32});  // same size class
    BOOST_TEST(again.data_ptr() == first);
    again.fill_(2.0);
    BOOST_TEST(again.sum().item<double>() == 2.0 * 64 * 32);
    again = at::Tensor();
    const auto cached = CpuAllocationCache::cached_bytes();
    {
      const CpuAllocationCache nested;  // the first one stays in charge
      BOOST_TEST(CpuAllocationCache::cached_bytes() == cached);
    }
    BOOST_TEST(CpuAllocationCache::installed());
    BOOST_TEST(CpuAllocationCache::cached_bytes() == cached);
  }
  BOOST_TEST(!CpuAllocationCache::installed());
  BOOST_TEST(c10::GetCPUAllocator() == before);
  BOOST_TEST(CpuAllocationCache::cached_bytes() == 0U);
}

BOOST_AUTO_TEST_CASE(memory_allocated_through_the_cache_outlives_it) {
  at::Tensor survivor;
  {
    const CpuAllocationCache cache;
    survivor = torch::full({100}, 3.0);
  }
  BOOST_TEST(survivor.sum().item<double>() == 300.0);
  survivor = at::Tensor();  // freed with free(), not cached
  BOOST_TEST(CpuAllocationCache::cached_bytes() == 0U);
}

BOOST_AUTO_TEST_CASE(large_tensors_and_memory_beyond_the_limit_are_not_cached) {
  const CpuAllocationCache cache;
  constexpr auto kLargest = static_cast<std::int64_t>(CpuAllocationCache::kMaxBlockBytes);
  // One byte more than kMaxBlockBytes goes back to the previous allocator...
  const auto before_larger = CpuAllocationCache::cached_bytes();
  { auto larger = torch::zeros({kLargest + 1}, torch::kUInt8); }
  BOOST_TEST(CpuAllocationCache::cached_bytes() == before_larger);
  // ... a tensor of kMaxBlockBytes is cached.
  {
    auto large = torch::zeros({kLargest}, torch::kUInt8);
    large.add_(1);
    BOOST_TEST(large.sum().item<std::int64_t>() == kLargest);
  }
  const auto after_large = CpuAllocationCache::cached_bytes();
  BOOST_TEST(after_large >= before_larger + CpuAllocationCache::kMaxBlockBytes);
  // 100 tensors of 1 MiB held at once, then freed: only up to the per-thread limit is kept.
  std::vector<at::Tensor> many;
  for (int i = 0; i < 100; ++i) many.push_back(torch::empty({1 << 18}));  // 1 MiB each
  many.clear();
  BOOST_TEST(CpuAllocationCache::cached_bytes() > after_large);
  BOOST_TEST(CpuAllocationCache::cached_bytes() <= CpuAllocationCache::kMaxCachedBytesPerThread);
}

BOOST_AUTO_TEST_CASE(a_tensor_freed_on_another_thread_is_cached_there) {
  const CpuAllocationCache cache;
  auto tensor = torch::arange(1000, torch::kFloat);
  double sum_on_worker = 0.0;
  std::size_t cached_on_worker = 0;
  std::thread worker([&] {
    sum_on_worker = tensor.sum().item<double>();
    tensor = at::Tensor();
    cached_on_worker = CpuAllocationCache::cached_bytes();
  });
  worker.join();  // the worker's cache is freed when it exits
  BOOST_TEST(sum_on_worker == 999.0 * 1000.0 / 2.0);
  BOOST_TEST(cached_on_worker >= 1000 * sizeof(float));
}

// The trainer keeps a cache for each fit (cache_cpu_allocations, on by default); training with it
// gives the weights training without it gives, bit for bit.
BOOST_AUTO_TEST_CASE(training_with_the_cache_gives_the_same_weights) {
  auto batches = make_batches(6, 8);
  std::vector<std::vector<at::Tensor>> weights;
  for (const bool cached : {true, false}) {
    auto model = make_model();
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    Trainer trainer(
        model, sgd, cross_entropy,
        TrainerOptions().max_epochs(3).cache_cpu_allocations(cached).use_registered_subscriptions(
            false));
    std::vector<bool> installed;
    trainer.on(Event::StepEnd,
               [&](State&) { installed.push_back(CpuAllocationCache::installed()); });
    trainer.fit(batches);
    BOOST_TEST(installed == std::vector<bool>(18, cached), boost::test_tools::per_element());
    BOOST_TEST(!CpuAllocationCache::installed());
    weights.push_back(model->parameters());
  }
  for (std::size_t i = 0; i < weights[0].size(); ++i) {
    BOOST_TEST(torch::equal(weights[0][i], weights[1][i]));
  }
}

BOOST_AUTO_TEST_SUITE_END()
