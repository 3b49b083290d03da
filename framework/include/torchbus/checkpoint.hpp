#pragma once

/// \file
/// Checkpoint: what class callbacks are told about a checkpoint the trainer writes or has read.

#include <cstdint>
#include <filesystem>

namespace torchbus {

/// A checkpoint of the run, passed to `Callback::on_save_checkpoint` and
/// `Callback::on_load_checkpoint`: where it is and the position of the run it holds.
struct Checkpoint {
  /// The checkpoint file; empty when `Trainer::checkpoint_bytes` was not told where the bytes go.
  std::filesystem::path path;
  std::int64_t step = 0;            ///< optimizer steps the checkpoint holds
  std::int64_t epoch = 0;           ///< the epoch a run resumed from it continues in
  std::int64_t batch_in_epoch = 0;  ///< batches of that epoch it has already trained
};

}  // namespace torchbus
