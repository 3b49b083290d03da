#include <torch/serialize/archive.h>
#include <torchbus/callbacks/archive_value.hpp>
#include <torchbus/error.hpp>

#include <cmath>

namespace torchbus {

c10::IValue read_value(torch::serialize::InputArchive& archive, const std::string& key) {
  c10::IValue value;
  TORCHBUS_CHECK(archive.try_read(key, value), CheckpointError, "the checkpoint has no entry '",
                 key, "'; it was written by a different version or configuration of the callback");
  return value;
}

std::int64_t read_integer(torch::serialize::InputArchive& archive, const std::string& key,
                          std::int64_t lowest, std::int64_t highest) {
  const auto value = read_value(archive, key);
  TORCHBUS_CHECK(value.isInt(), CheckpointError, "the checkpoint's entry '", key, "' is a ",
                 value.tagKind(), "; expected an integer");
  const auto number = value.toInt();
  TORCHBUS_CHECK(number >= lowest && number <= highest, CheckpointError, "the checkpoint's entry '",
                 key, "' is ", number, "; expected ", lowest, " to ", highest,
                 " (damaged or forged)");
  return number;
}

double read_non_negative(torch::serialize::InputArchive& archive, const std::string& key) {
  const auto value = read_value(archive, key);
  TORCHBUS_CHECK(value.isDouble(), CheckpointError, "the checkpoint's entry '", key, "' is a ",
                 value.tagKind(), "; expected a floating-point number");
  const auto number = value.toDouble();
  TORCHBUS_CHECK(number >= 0.0 && number <= kMaxCheckpointQuantity, CheckpointError,
                 "the checkpoint's entry '", key, "' is ", number, "; expected 0 to ",
                 kMaxCheckpointQuantity, " (damaged or forged)");
  return number;
}

}  // namespace torchbus
