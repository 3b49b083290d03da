#include <torch/cuda.h>
#include <torchbus/error.hpp>
#include <torchbus/precision.hpp>

#include <ostream>

namespace torchbus {
namespace {

/// oneDNN's bfloat16 kernels need AVX-512 (BW, VL, DQ), as PyTorch's own check for them; without
/// it bfloat16 runs on slow reference kernels.
bool cpu_has_bf16_kernels() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

}  // namespace

std::string_view to_string(Precision precision) noexcept {
  switch (precision) {
    case Precision::BF16Mixed:
      return "bf16-mixed";
    case Precision::FP16Mixed:
      return "16-mixed";
    case Precision::Float32:
      break;
  }
  return "32";
}

std::ostream& operator<<(std::ostream& out, Precision precision) {
  return out << to_string(precision);
}

Precision parse_precision(std::string_view name) {
  for (const auto precision : {Precision::Float32, Precision::BF16Mixed, Precision::FP16Mixed}) {
    if (name == to_string(precision)) return precision;
  }
  throw ConfigError(detail::concat("unknown precision '", name,
                                   "'; expected 32, bf16-mixed or 16-mixed (CUDA only)"));
}

void check_precision_supported(Precision precision, const c10::Device& device) {
  switch (precision) {
    case Precision::Float32:
      return;
    case Precision::FP16Mixed:
      TORCHBUS_CHECK(device.is_cuda(), ConfigError,
                     "precision 16-mixed (float16 autocast with loss scaling) needs a CUDA device, "
                     "got ",
                     device, "; on a CPU use bf16-mixed or 32");
      return;
    case Precision::BF16Mixed:
      TORCHBUS_CHECK(!device.is_cpu() || cpu_has_bf16_kernels(), ConfigError,
                     "precision bf16-mixed on the CPU needs AVX-512 (avx512bw, avx512vl, "
                     "avx512dq) for oneDNN's bfloat16 kernels, which this CPU lacks; use 32");
      return;
  }
}

}  // namespace torchbus
