#pragma once

/// \file
/// The rank prefix of the torchbus logger's lines (private to torchbus_framework).

#include <optional>

namespace torchbus::detail {

/// Prefixes the lines of the torchbus logger that torchbus created with `[rank N]` (none: back
/// to spdlog's default format). A `torchbus` logger the program registered itself keeps its own
/// format and sinks untouched; no other logger and no global pattern is changed.
void set_log_rank(std::optional<int> rank);

}  // namespace torchbus::detail
