#pragma once

/// \file
/// LibTorch's process-wide debugging and reproducibility modes an action asks for (private to
/// torchbus_framework): set for the action, put back as they were when it ends, however it ends.

#include <torchbus/trainer_options.hpp>

namespace torchbus::detail {

/// Sets TrainerOptions::detect_anomaly and deterministic for its lifetime (LibTorch's anomaly
/// mode and deterministic algorithms, both global to the process), then restores them.
class ProcessModes {
 public:
  explicit ProcessModes(const TrainerOptions& options);
  ~ProcessModes();
  ProcessModes(const ProcessModes&) = delete;
  ProcessModes& operator=(const ProcessModes&) = delete;

 private:
  bool anomaly_set_ = false;
  bool anomaly_was_ = false;
  bool anomaly_checked_nan_ = true;
  bool determinism_set_ = false;
  bool deterministic_was_ = false;
  bool deterministic_warned_ = false;
  bool cudnn_deterministic_was_ = false;
  bool cudnn_benchmark_was_ = false;
};

}  // namespace torchbus::detail
