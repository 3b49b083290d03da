#pragma once

/// \file
/// read_value: one entry of a checkpoint archive, for a callback's `load_state`.

#include <ATen/core/ivalue.h>

#include <string>

namespace torch::serialize {
class InputArchive;
}  // namespace torch::serialize

namespace torchbus {

/// The value stored under `key` in `archive`; throws CheckpointError naming the key when the
/// archive has none (e.g. a checkpoint written by another version of the callback).
c10::IValue read_value(torch::serialize::InputArchive& archive, const std::string& key);

}  // namespace torchbus
