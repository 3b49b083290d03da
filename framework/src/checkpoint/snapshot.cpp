#include <torchbus/checkpoint_snapshot.hpp>
#include <torchbus/error.hpp>

#include <utility>

namespace torchbus {

CheckpointSnapshot::CheckpointSnapshot(std::filesystem::path path,
                                       std::function<std::string()> serialize)
    : path_(std::move(path)), serialize_(std::move(serialize)) {}

std::string CheckpointSnapshot::bytes() {
  TORCHBUS_CHECK(static_cast<bool>(serialize_), ConfigError, "the checkpoint snapshot for ",
                 path_.string(),
                 " was already serialized (CheckpointSnapshot::bytes is called once)");
  auto serialize = std::exchange(serialize_, {});
  return serialize();
}

}  // namespace torchbus
