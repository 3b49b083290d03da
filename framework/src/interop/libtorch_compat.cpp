#include "interop/libtorch_compat.hpp"

#include <ATen/autocast_mode.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/lbfgs.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/archive.h>
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "support/archive_bytes.hpp"

#include <string>

#define TORCHBUS_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||           \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace torchbus::detail {

void zero_gradients(torch::optim::Optimizer& optimizer) {
#if TORCHBUS_TORCH_AT_LEAST(2, 0)
  optimizer.zero_grad(/*set_to_none=*/false);
#else
  optimizer.zero_grad();
#endif
}

#if TORCHBUS_TORCH_AT_LEAST(2, 0)
namespace {

/// A TensorImpl's address as 1.13 names it ("0x55d1..."), in decimal as 2.x does; `text` itself
/// when it is not such a name.
std::string decimal_address(const std::string& text) {
  const bool hexadecimal = text.size() > 2 && text.compare(0, 2, "0x") == 0 &&
                           text.find_first_not_of("0123456789abcdef", 2) == std::string::npos;
  return hexadecimal ? std::to_string(std::stoull(text, nullptr, 16)) : text;
}

/// Copies `from` into `to`, with every key and string value that is a 1.13 address made decimal:
/// sections as sections, parameters and buffers as buffers, other entries as values.
void copy_with_decimal_addresses(torch::serialize::InputArchive& from,
                                 torch::serialize::OutputArchive& to) {
  for (const auto& key : from.keys()) {
    if (key == "training") continue;  // every archive's own module attribute
    const auto name = decimal_address(key);
    torch::serialize::InputArchive section;
    at::Tensor tensor;
    c10::IValue value;
    if (from.try_read(key, section)) {
      torch::serialize::OutputArchive copy(to.compilation_unit());
      copy_with_decimal_addresses(section, copy);
      to.write(name, copy);
    } else if (from.try_read(key, tensor)) {
      to.write(name, tensor, /*is_buffer=*/true);
    } else if (from.try_read(key, value)) {
      to.write(name, value.isString() ? c10::IValue(decimal_address(value.toStringRef())) : value);
    }
  }
}

/// Whether the optimizer archive `archive` names its states as 1.13 does.
bool names_states_in_hexadecimal(torch::serialize::InputArchive& archive) {
  torch::serialize::InputArchive state;
  if (!archive.try_read("state", state)) return false;
  for (const auto& key : state.keys()) {
    if (decimal_address(key) != key) return true;
  }
  return false;
}

}  // namespace
#endif

namespace {

/// Sets each parameter group's options (an optimizer's whose options are `Options`) to those
/// `archive` holds, as Optimizer::save wrote them: "param_groups/<i>/options".
template <typename Options>
void load_group_options_as(torch::optim::Optimizer& optimizer,
                           torch::serialize::InputArchive& archive) {
  torch::serialize::InputArchive groups;
  if (!archive.try_read("param_groups", groups)) return;
  auto& param_groups = optimizer.param_groups();
  for (std::size_t i = 0; i < param_groups.size(); ++i) {
    torch::serialize::InputArchive group;
    torch::serialize::InputArchive saved;
    if (!groups.try_read("param_groups/" + std::to_string(i), group) ||
        !group.try_read("options", saved)) {
      continue;
    }
    Options options(0.0);
    options.serialize(saved);
    static_cast<Options&>(param_groups[i].options()) = options;
  }
}

/// Sets the groups' options of a known optimizer (SGD, Adam, AdamW, Adagrad, RMSprop, LBFGS) to
/// those `archive` holds: LibTorch 1.13's Optimizer::load keeps the optimizer's own (2.6, like
/// Python's load_state_dict, takes the saved ones), so a learning rate or weight decay the run
/// changed itself would come back as the optimizer was made with. Done under every version, as
/// the versions in between are not all known.
void load_group_options(torch::optim::Optimizer& optimizer,
                        torch::serialize::InputArchive& archive) {
  using namespace torch::optim;
  if (dynamic_cast<SGD*>(&optimizer) != nullptr) {
    load_group_options_as<SGDOptions>(optimizer, archive);
  } else if (dynamic_cast<Adam*>(&optimizer) != nullptr) {
    load_group_options_as<AdamOptions>(optimizer, archive);
  } else if (dynamic_cast<AdamW*>(&optimizer) != nullptr) {
    load_group_options_as<AdamWOptions>(optimizer, archive);
  } else if (dynamic_cast<Adagrad*>(&optimizer) != nullptr) {
    load_group_options_as<AdagradOptions>(optimizer, archive);
  } else if (dynamic_cast<RMSprop*>(&optimizer) != nullptr) {
    load_group_options_as<RMSpropOptions>(optimizer, archive);
  } else if (dynamic_cast<LBFGS*>(&optimizer) != nullptr) {
    load_group_options_as<LBFGSOptions>(optimizer, archive);
  }
}

}  // namespace

void load_optimizer(torch::optim::Optimizer& optimizer, torch::serialize::InputArchive& archive) {
#if TORCHBUS_TORCH_AT_LEAST(2, 0)
  if (names_states_in_hexadecimal(archive)) {
    torch::serialize::OutputArchive copy;
    copy_with_decimal_addresses(archive, copy);
    auto translated = archive_of_bytes(archive_bytes(copy));
    load_optimizer(optimizer, translated);  // its names are decimal
    return;
  }
#endif
  optimizer.load(archive);
  load_group_options(optimizer, archive);  // 2.6 has set the same; 1.13 has not
}

void use_classic_store_loop([[maybe_unused]] c10d::TCPStoreOptions& options) {
#if TORCHBUS_TORCH_AT_LEAST(2, 4)
  options.useLibUV = false;
#endif
}

// 2.4 replaced the per-device functions (is_cpu_enabled, get_autocast_gpu_dtype, ...) by ones
// that take the device type, and deprecated the old ones.
bool autocast_enabled(c10::DeviceType device) {
#if TORCHBUS_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::DeviceType::CUDA ? at::autocast::is_enabled()
                                         : at::autocast::is_cpu_enabled();
#endif
}

c10::ScalarType autocast_dtype(c10::DeviceType device) {
#if TORCHBUS_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                         : at::autocast::get_autocast_cpu_dtype();
#endif
}

void set_autocast(c10::DeviceType device, bool enabled, c10::ScalarType dtype) {
#if TORCHBUS_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(device, enabled);
  at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
}

}  // namespace torchbus::detail
