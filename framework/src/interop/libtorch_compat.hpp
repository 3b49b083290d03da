#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

namespace c10d {
struct TCPStoreOptions;
}
namespace torch::optim {
class Optimizer;
class OptimizerParamState;
}  // namespace torch::optim
namespace at {
class Tensor;
}
namespace torch::serialize {
class InputArchive;
}

/// The differences between the LibTorch versions torchbus builds against (Debian 12's 1.13, Debian
/// 13's 2.6, the official 2.x), each behind one version check, so that the rest of the framework
/// sees one API and one behaviour (docs/getting-started.md#libtorch-versions).
namespace torchbus::detail {

/// Fills every gradient of `optimizer`'s parameters with zeros, keeping its storage, as 1.13's
/// `zero_grad()` does (2.x's `zero_grad()` releases them instead: `set_to_none` defaults to true).
void zero_gradients(torch::optim::Optimizer& optimizer);

/// Loads `archive`, as `Optimizer::save` wrote it under any LibTorch version, into `optimizer`.
/// 1.13 names each parameter's state by its TensorImpl's address in hexadecimal ("0x55d1..."), 2.x
/// in decimal, and 2.x reads a hexadecimal name as 0: every parameter would get one parameter's
/// state, or none. Under 2.x such names are made decimal first. The groups' options (lr, betas,
/// weight decay...) are the archive's, as Python's load_state_dict makes them: 1.13's load keeps
/// the optimizer's own (for SGD, Adam, AdamW, Adagrad, RMSprop and LBFGS).
void load_optimizer(torch::optim::Optimizer& optimizer, torch::serialize::InputArchive& archive);

/// Makes a TCPStore of `options` use its classic socket loop: LibTorch 2.4+ asks for libuv by
/// default, which Debian's LibTorch is built without; 1.13 has only the classic one.
void use_classic_store_loop(c10d::TCPStoreOptions& options);

/// Whether autocast is on for `device` on this thread.
bool autocast_enabled(c10::DeviceType device);
/// The dtype autocast casts to on `device` on this thread.
c10::ScalarType autocast_dtype(c10::DeviceType device);
/// Turns autocast on or off for `device` on this thread, casting to `dtype`.
void set_autocast(c10::DeviceType device, bool enabled, c10::ScalarType dtype);

}  // namespace torchbus::detail
