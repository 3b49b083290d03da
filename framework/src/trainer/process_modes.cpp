#include <ATen/Context.h>
#include <torch/csrc/autograd/anomaly_mode.h>

#include "trainer/process_modes.hpp"

namespace torchbus::detail {

using torch::autograd::AnomalyMode;

ProcessModes::ProcessModes(const TrainerOptions& options) {
  if (options.detect_anomaly()) {
    anomaly_set_ = true;
    anomaly_was_ = AnomalyMode::is_enabled();
    anomaly_checked_nan_ = AnomalyMode::should_check_nan();
    AnomalyMode::set_enabled(true, /*check_nan=*/true);
  }
  if (options.deterministic() != Determinism::Unchanged) {
    auto& context = at::globalContext();
    determinism_set_ = true;
    deterministic_was_ = context.deterministicAlgorithms();
    deterministic_warned_ = context.deterministicAlgorithmsWarnOnly();
    cudnn_deterministic_was_ = context.deterministicCuDNN();
    cudnn_benchmark_was_ = context.benchmarkCuDNN();
    const bool on = options.deterministic() != Determinism::Off;
    context.setDeterministicAlgorithms(on, options.deterministic() == Determinism::WarnOnly);
    // As Lightning's `deterministic=True` (torch.backends.cudnn.deterministic, no benchmark).
    context.setDeterministicCuDNN(on);
    if (on) context.setBenchmarkCuDNN(false);
  }
}

ProcessModes::~ProcessModes() {
  if (determinism_set_) {
    auto& context = at::globalContext();
    context.setDeterministicAlgorithms(deterministic_was_, deterministic_warned_);
    context.setDeterministicCuDNN(cudnn_deterministic_was_);
    context.setBenchmarkCuDNN(cudnn_benchmark_was_);
  }
  if (anomaly_set_) AnomalyMode::set_enabled(anomaly_was_, anomaly_checked_nan_);
}

}  // namespace torchbus::detail
