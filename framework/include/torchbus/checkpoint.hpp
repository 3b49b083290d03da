#pragma once

/// \file
/// Checkpoint: what class callbacks are told about a checkpoint the trainer writes or has read, and
/// how to read it from a file without a trainer.

#include <cstdint>
#include <filesystem>
#include <string>

namespace torchbus {

/// The largest count (steps, epochs, batches, a callback's counters) a checkpoint may hold: 2^62,
/// far beyond any run, so that counting on from it cannot overflow. A checkpoint holding a larger
/// or a negative count is refused as damaged or forged.
inline constexpr std::int64_t kMaxCheckpointCount = std::int64_t{1} << 62;

/// A checkpoint of the run, passed to `Callback::on_save_checkpoint` and
/// `Callback::on_load_checkpoint`: where it is and the position of the run it holds.
struct Checkpoint {
  /// The checkpoint file; empty when `Trainer::checkpoint_bytes` was not told where the bytes go.
  std::filesystem::path path;
  std::int64_t step = 0;            ///< optimizer steps the checkpoint holds
  std::int64_t epoch = 0;           ///< the epoch a run resumed from it continues in
  std::int64_t batch_in_epoch = 0;  ///< batches of that epoch it has already trained
  /// Why the run ended at this checkpoint (a StopKind::Finished stop); empty when a resume from
  /// it goes on training.
  std::string stop_reason;
  /// The number of ranks that wrote it (0: not recorded, a checkpoint of an older version).
  std::int64_t world_size = 0;
  /// Batches per optimizer step in its last epoch (0: not recorded).
  std::int64_t accumulate_grad_batches = 0;
};

/// The position and end of the run that the checkpoint file `path` holds, read and verified
/// (framing, CRC and the whole payload parsed); throws CheckpointError naming the file and what is
/// wrong with it.
Checkpoint read_checkpoint_position(const std::filesystem::path& path);

}  // namespace torchbus
