#pragma once

/// \file
/// read_value: one entry of a checkpoint archive, for a callback's `load_state`.

#include <ATen/core/ivalue.h>
#include <torchbus/checkpoint.hpp>

#include <cstdint>
#include <string>

namespace torch::serialize {
class InputArchive;
}  // namespace torch::serialize

namespace torchbus {

/// The value stored under `key` in `archive`; throws CheckpointError naming the key when the
/// archive has none (e.g. a checkpoint written by another version of the callback).
c10::IValue read_value(torch::serialize::InputArchive& archive, const std::string& key);

/// The integer stored under `key`, which must lie in [lowest, highest] (a count: from 0, or -1 for
/// "none"; up to kMaxCheckpointCount, so that counting on cannot overflow); throws CheckpointError
/// naming the key, the value and the range otherwise (a damaged or forged checkpoint).
std::int64_t read_integer(torch::serialize::InputArchive& archive, const std::string& key,
                          std::int64_t lowest, std::int64_t highest = kMaxCheckpointCount);

/// The largest duration (seconds) or rate a checkpoint may hold: 1e12, far beyond any run, so
/// that it converts to any integer type a report prints it as.
inline constexpr double kMaxCheckpointQuantity = 1e12;

/// The floating-point number stored under `key`, which must lie in 0..kMaxCheckpointQuantity (a
/// duration, a rate); throws CheckpointError naming the key and the value otherwise.
double read_non_negative(torch::serialize::InputArchive& archive, const std::string& key);

}  // namespace torchbus
