#pragma once

// --device: where torchbus-train trains (auto | cpu | cuda | cuda:N), resolved on this machine
// before anything is written.

#include <c10/core/Device.h>

#include <string>

namespace train {

/// The device a run trains on, and why it is that one.
struct TrainingDevice {
  c10::Device device{c10::kCPU};  ///< cpu or cuda:N
  std::string how;                ///< e.g. "--device", "auto: this LibTorch has no CUDA"
};

/// Whether `text` is a --device value (auto, cpu, cuda or cuda:N); "" if so, else the problem.
std::string check_device_text(const std::string& text);

/// The device `text` (a checked --device value) names on this machine for a world of
/// `world_size` ranks. A device that is not there, CUDA without a CUDA LibTorch or CUDA with
/// several ranks (their process group is Gloo's, on the CPU) is a UsageError naming what is
/// visible; auto takes the first CUDA device when there is one and the run is one process.
TrainingDevice resolve_device(const std::string& text, int world_size);

}  // namespace train
