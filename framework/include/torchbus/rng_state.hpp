#pragma once

/// \file
/// RngState: the states of LibTorch's default random generators, taken and put back under each
/// generator's lock (checkpoints, the sanity check and the LR finder use it).

#include <ATen/core/Tensor.h>

#include <vector>

namespace torchbus {

/// The states of the default CPU generator and of every visible CUDA device's generator.
class RngState {
 public:
  /// The generators' states now.
  static RngState capture();
  /// A state made of saved parts: the CPU generator's and one per CUDA device.
  RngState(at::Tensor cpu, std::vector<at::Tensor> cuda)
      : cpu_(std::move(cpu)), cuda_(std::move(cuda)) {}

  /// Puts every generator back in this state (CUDA devices not visible now are left out). A CUDA
  /// state saved by LibTorch up to 2.0 (816 bytes) is taken by 2.1 and later, and the reverse.
  void restore() const;
  /// Throws LibTorch's error when restore() would: a state its generator does not take (another
  /// dtype or size, an invalid Mersenne Twister state, a Philox offset not a multiple of 4). Tries
  /// each state on a copy of its generator: changes no generator.
  void check() const;
  /// The CPU generator's state.
  const at::Tensor& cpu() const noexcept { return cpu_; }
  /// The CUDA generators' states, by device index (empty without CUDA).
  const std::vector<at::Tensor>& cuda() const noexcept { return cuda_; }

  /// The CPU generator's state now.
  static at::Tensor capture_cpu();
  /// Puts the CPU generator in `state`.
  static void restore_cpu(const at::Tensor& state);

 private:
  at::Tensor cpu_;
  std::vector<at::Tensor> cuda_;
};

}  // namespace torchbus
