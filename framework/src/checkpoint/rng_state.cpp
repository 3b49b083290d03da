#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <torch/cuda.h>
#include <torchbus/rng_state.hpp>

#include "interop/cuda_rng_layout.hpp"

#include <mutex>

namespace torchbus {
namespace {

at::Generator cuda_generator(std::size_t device) {
  return at::globalContext().defaultGenerator(
      at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device)));
}

std::size_t visible_cuda_devices() {
  return torch::cuda::is_available() ? torch::cuda::device_count() : 0;
}

}  // namespace

at::Tensor RngState::capture_cpu() {
  auto generator = at::detail::getDefaultCPUGenerator();
  const std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void RngState::restore_cpu(const at::Tensor& state) {
  auto generator = at::detail::getDefaultCPUGenerator();
  const std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state.cpu());  // a checkpoint read for a GPU run has it there
}

RngState RngState::capture() {
  std::vector<at::Tensor> cuda;
  for (std::size_t i = 0; i < visible_cuda_devices(); ++i) {
    auto generator = cuda_generator(i);
    const std::lock_guard<std::mutex> lock(generator.mutex());
    cuda.push_back(generator.get_state());
  }
  return RngState(capture_cpu(), std::move(cuda));
}

void RngState::restore() const {
  restore_cpu(cpu_);
  const auto devices = visible_cuda_devices();
  for (std::size_t i = 0; i < cuda_.size() && i < devices; ++i) {
    auto generator = cuda_generator(i);
    const std::lock_guard<std::mutex> lock(generator.mutex());
    const auto live_size = generator.get_state().numel();
    generator.set_state(detail::cuda_generator_state_in_layout(cuda_[i].cpu(), live_size));
  }
}

void RngState::check() const {
  at::detail::createCPUGenerator().set_state(cpu_.cpu());  // a scratch one takes it as the default
  const auto devices = visible_cuda_devices();
  for (std::size_t i = 0; i < cuda_.size() && i < devices; ++i) {
    // Tried on a copy: CUDA's set_state sets the seed before it checks the offset, and resets
    // the generator's cuDNN dropout bookkeeping.
    auto generator = cuda_generator(i);
    auto scratch = [&generator] {
      const std::lock_guard<std::mutex> lock(generator.mutex());
      return generator.clone();
    }();
    const auto live_size = scratch.get_state().numel();
    scratch.set_state(detail::cuda_generator_state_in_layout(cuda_[i].cpu(), live_size));
  }
}

}  // namespace torchbus
