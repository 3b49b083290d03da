#include "training_device.hpp"

#include "exit_status.hpp"

#include <torch/cuda.h>

#include <cctype>

namespace train {
namespace {

/// The devices a run could use here, e.g. "cpu, cuda:0, cuda:1".
std::string visible_devices() {
  std::string text = "cpu";
  const auto count = torch::cuda::device_count();
  for (std::size_t i = 0; i < count; ++i) text += ", cuda:" + std::to_string(i);
  return text;
}

/// Why there is no CUDA device to train on (LibTorch tells the two cases apart only in a CUDA
/// build).
constexpr const char* kNoCuda = "CUDA is not available: a LibTorch without CUDA, or no GPU visible";

}  // namespace

std::string check_device_text(const std::string& text) {
  if (text == "auto" || text == "cpu" || text == "cuda") return "";
  const std::string prefix = "cuda:";
  if (text.rfind(prefix, 0) == 0 && text.size() > prefix.size() &&
      text.size() <= prefix.size() + 4) {
    bool digits = true;
    for (std::size_t i = prefix.size(); i < text.size(); ++i) {
      digits = digits && std::isdigit(static_cast<unsigned char>(text[i])) != 0;
    }
    if (digits) return "";
  }
  return "expected auto, cpu, cuda or cuda:N (N a device index), got '" + text + "'";
}

TrainingDevice resolve_device(const std::string& text, int world_size) {
  const bool cuda = torch::cuda::is_available();
  if (text == "cpu") return {c10::Device(c10::kCPU), "--device"};
  if (text == "auto") {
    if (!cuda) return {c10::Device(c10::kCPU), std::string("auto: ") + kNoCuda};
    if (world_size > 1) {
      return {c10::Device(c10::kCPU),
              "auto: " + std::to_string(world_size) +
                  " ranks train on the CPU (their process group is Gloo's)"};
    }
    return {c10::Device(c10::kCUDA, 0), "auto: the first of " +
                                            std::to_string(torch::cuda::device_count()) +
                                            " visible CUDA device(s)"};
  }
  const int index = text == "cuda" ? 0 : std::stoi(text.substr(5));
  if (!cuda) {
    throw UsageError("--device " + text + ": " + kNoCuda + "; visible: " + visible_devices());
  }
  if (index >= static_cast<int>(torch::cuda::device_count())) {
    throw UsageError("--device " + text + ": there is no CUDA device " + std::to_string(index) +
                     "; visible: " + visible_devices());
  }
  if (world_size > 1) {
    throw UsageError("--device " + text + " with " + std::to_string(world_size) +
                     " ranks: data-parallel runs train on the CPU (their process group is "
                     "Gloo's; NCCL is not supported yet); use --device cpu");
  }
  return {c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index)), "--device"};
}

}  // namespace train
