#pragma once

// Test support: whether this CPU runs bf16-mixed, and the refusal a CPU that cannot gives. Tests
// of bf16-mixed run it where the CPU can and check the refusal where it cannot.

#include <torchbus/error.hpp>
#include <torchbus/precision.hpp>

#include <string>

namespace torchbus::testing {

/// Whether this CPU runs bf16-mixed, as check_precision_supported decides (AVX-512 BW, VL, DQ).
inline bool bf16_supported() {
  try {
    check_precision_supported(Precision::BF16Mixed, c10::Device(c10::kCPU));
    return true;
  } catch (const ConfigError&) {
    return false;
  }
}

/// The ConfigError's message refusing bf16-mixed on a CPU without AVX-512 (docs/trainer.md).
inline const std::string kBf16Refusal =
    "precision bf16-mixed on the CPU needs AVX-512 (avx512bw, avx512vl, avx512dq) for oneDNN's "
    "bfloat16 kernels, which this CPU lacks; use 32";

}  // namespace torchbus::testing
