#include <torch/serialize/archive.h>
#include <torchbus/callbacks/archive_value.hpp>
#include <torchbus/error.hpp>

namespace torchbus {

c10::IValue read_value(torch::serialize::InputArchive& archive, const std::string& key) {
  c10::IValue value;
  TORCHBUS_CHECK(archive.try_read(key, value), CheckpointError, "the checkpoint has no entry '",
                 key, "'; it was written by a different version or configuration of the callback");
  return value;
}

}  // namespace torchbus
