#pragma once

/// \file
/// ModeGuard (private to torchbus_framework): a module's training mode, restored on scope exit.

#include <torch/nn/module.h>

namespace torchbus {

/// Puts the module back in training or evaluation mode when an evaluation or prediction ends,
/// even by an error.
class ModeGuard {
 public:
  explicit ModeGuard(torch::nn::Module& module)
      : module_(module), was_training_(module.is_training()) {}
  ~ModeGuard() { module_.train(was_training_); }
  ModeGuard(const ModeGuard&) = delete;
  ModeGuard& operator=(const ModeGuard&) = delete;

 private:
  torch::nn::Module& module_;
  bool was_training_;
};

}  // namespace torchbus
