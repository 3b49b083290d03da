#pragma once

/// \file
/// CheckpointSnapshot: a checkpoint captured at a step boundary, serialized later on any thread
/// (ModelCheckpoint's background writes; see docs/checkpointing.md, "Background writes").

#include <filesystem>
#include <functional>
#include <string>

namespace torchbus {

/// A checkpoint of the run as it was when `Trainer::capture_checkpoint` returned: it holds copies
/// of everything that training changes later, so its bytes can be made afterwards, on another
/// thread, while training goes on.
class CheckpointSnapshot {
 public:
  /// A snapshot for the file `path` whose bytes `serialize` makes (once, on any thread).
  CheckpointSnapshot(std::filesystem::path path, std::function<std::string()> serialize);

  /// The file the checkpoint was captured for (what `on_save_checkpoint` was told).
  const std::filesystem::path& path() const noexcept { return path_; }
  /// The framed bytes of the checkpoint file; the snapshot is empty afterwards (call it once).
  std::string bytes();

 private:
  std::filesystem::path path_;
  std::function<std::string()> serialize_;
};

}  // namespace torchbus
