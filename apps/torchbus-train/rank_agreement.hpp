#pragma once

// What the ranks of one run agree on outside the trainer: whether start-up went through on every
// rank (one rank's failure ends all of them with the same exit code), what rank 0 decided about
// the run directory, and how the run ended. In a world of one each is a no-op.

#include <torchbus/distributed.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

namespace train {

/// Runs `phase` (start-up work that may throw) on this rank, then learns from every rank of
/// `group` whether theirs went through (one all-gather). When a phase failed, every rank ends
/// with the exit code of the lowest failing rank: that rank rethrows its exception, the others
/// throw StartupExit naming it and its message (one more broadcast).
void run_agreed(torchbus::ProcessGroup& group, const std::function<void()>& phase);

/// Rank `root`'s `text`, on every rank of `group`.
std::string broadcast_text(torchbus::ProcessGroup& group, const std::string& text, int root = 0);

/// The lowest rank of `group` whose `value` is not 0, with that value; nothing when every rank's
/// is 0. One all-gather.
std::optional<std::pair<int, std::int64_t>> first_nonzero(torchbus::ProcessGroup& group,
                                                          std::int64_t value);

}  // namespace train
