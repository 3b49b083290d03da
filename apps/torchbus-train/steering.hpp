#pragma once

// The callbacks that change what a run of torchbus-train does (a time limit, early stopping, the
// EMA or SWA average, the learning-rate schedule), as its flags ask.

#include "flags.hpp"

#include <c10/core/Device.h>
#include <torchbus/callback.hpp>

#include <cstdint>
#include <memory>
#include <vector>

namespace train {

/// The steering callbacks, built before OUT is touched with the trainer's options checked: what
/// the library refuses in them is a usage error, and nothing is written. The schedule spans the
/// run's planned optimizer steps over `batches_per_epoch` training batches per epoch.
std::vector<std::shared_ptr<torchbus::Callback>> configured_steering(
    const Flags& flags, const c10::Device& device, std::int64_t batches_per_epoch);

}  // namespace train
