#pragma once

// The framing of checkpoint files: magic, format version, step, run identity, payload size and a
// CRC-32C over all of them and the payload. Private to the framework: users read checkpoints
// through checkpoint_file.hpp.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace torchbus {

/// Version of the checkpoint format this torchbus writes (it also reads version 1, whose CRC
/// covered the payload only and which had no run identity).
inline constexpr std::uint32_t kCheckpointFormatVersion = 2;

/// Wraps `payload` in the checkpoint framing of kCheckpointFormatVersion.
std::string frame_checkpoint(const std::string& payload, std::int64_t step,
                             const std::string& identity = {});

/// Writes framed checkpoint `bytes` to `path` atomically; a failure is a CheckpointError.
void write_checkpoint_file(const std::filesystem::path& path, std::string_view bytes);

}  // namespace torchbus
