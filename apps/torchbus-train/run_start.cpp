#include "run_start.hpp"

#include "exit_status.hpp"
#include "run_directory.hpp"

#include <spdlog/fmt/ranges.h>  // fmt::join (in fmt/format.h before fmt 11)
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>
#include <torchbus/atomic_file.hpp>
#include <torchbus/checkpoint.hpp>
#include <torchbus/checkpoint_file.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>

#include <fstream>
#include <functional>
#include <optional>
#include <vector>

namespace train {
namespace {

namespace fs = std::filesystem;

/// Why the run in `checkpoint` had ended there (empty: a resume from it trains on).
std::string finished_reason(const torchbus::Checkpoint& checkpoint,
                            const RunDirectoryRequest& request) {
  if (!checkpoint.stop_reason.empty()) return checkpoint.stop_reason;
  if (request.max_steps >= 0 && checkpoint.step >= request.max_steps) return "max_steps reached";
  if (checkpoint.epoch >= request.epochs) return "completed";
  return {};
}

/// Whether OUT/summary.json tells of this end: the run's `reason`, exit code 0. Not when the
/// summary is missing or unreadable, or tells of an interruption that came after the last step.
bool summary_tells(const fs::path& out, const std::string& reason) {
  std::ifstream in(out / "summary.json");
  const auto summary = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return summary.is_object() && summary.value("stop_reason", std::string()) == reason &&
         summary.value("exit_code", -1) == 0;
}

/// How OUT/summary.json says a run of an identity `ours` accepts had ended with exit code 0 (empty:
/// no such summary, or the run was interrupted, failed or only validated weights).
std::string ended_by_summary(const fs::path& out,
                             const std::function<bool(const std::string&)>& ours) {
  std::ifstream in(out / "summary.json");
  const auto summary = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!summary.is_object() || summary.value("exit_code", -1) != 0) return {};
  const auto reason = summary.value("stop_reason", std::string());
  if (reason == "validated" || !ours(summary.value("identity", std::string()))) return {};
  return reason;
}

/// A fresh start: refuses to replace a run unless --overwrite says so.
RunStart start_fresh(const RunDirectoryRequest& request, const std::vector<std::string>& present) {
  if (!present.empty() && !request.overwrite) {
    throw UsageError(fmt::format(
        "--out {} already holds a run ({}); pass --resume to continue it or --overwrite to "
        "replace it, or choose another --out",
        request.out.string(), fmt::join(present, ", ")));
  }
  remove_outputs(request.out, present);
  return {};
}

/// Refuses, before anything changes, a resume whose split of the global batch the trainer would
/// refuse: another --accumulate on the same number of ranks, or another --accumulate on other
/// ranks with --limit-train-batches counted in batches (it would cover other samples).
void check_split(const torchbus::Checkpoint& checkpoint, const RunDirectoryRequest::Split& now) {
  const auto ranks = checkpoint.world_size, k = checkpoint.accumulate_grad_batches;
  if (!now.by_global_batch || ranks == 0 || k == 0 || k == now.accumulate) return;
  TORCHBUS_CHECK(ranks != now.world_size, torchbus::CheckpointError, "cannot resume from ",
                 checkpoint.path.string(), ": it was written by ",
                 torchbus::detail::count_of(ranks, "rank"), " with --accumulate ", k,
                 "; on the same number of ranks a resume keeps --batch-size and --accumulate "
                 "(another split of the global batch is for another number of ranks)");
  TORCHBUS_CHECK(!now.limit_counts_batches, torchbus::CheckpointError, "cannot resume from ",
                 checkpoint.path.string(), ": it was written with --accumulate ", k, " on ",
                 torchbus::detail::count_of(ranks, "rank"), "; with --accumulate ", now.accumulate,
                 " on ", torchbus::detail::count_of(now.world_size, "rank"),
                 ", --limit-train-batches (batches per rank) would cover other samples; give "
                 "it as a fraction, or keep --accumulate");
}

}  // namespace

RunStart prepare_run_directory(const RunDirectoryRequest& request) {
  const auto& out = request.out;
  const auto present = present_outputs(out);
  auto log = torchbus::logger();
  if (request.resume || request.overwrite) {
    torchbus::remove_stale_temporaries(out);  // of a run killed while it replaced a file
  }
  if (!request.resume) return start_fresh(request, present);

  const auto checkpoints = out / "checkpoints";
  torchbus::remove_stale_temporaries(checkpoints);
  std::vector<std::string> unusable;  // every checkpoint file that cannot be resumed, and why
  std::string others;                 // valid checkpoints of another run
  std::optional<torchbus::Checkpoint> ours;
  std::string ours_identity;
  const auto ours_by_identity = [&](const std::string& identity) {
    return identity == request.identity ||
           (!request.split_identity.empty() && identity == request.split_identity);
  };
  for (const auto& candidate : torchbus::valid_checkpoints(checkpoints, &unusable)) {
    if (!ours_by_identity(candidate.header.identity)) {
      others += fmt::format(
          "\n  {}: {}", candidate.path.string(),
          candidate.header.identity.empty()
              ? std::string("written without a run identity")
              : torchbus::identity_differences(candidate.header.identity, request.identity));
      continue;
    }
    if (ours) continue;
    try {  // the whole payload must read back, not only its CRC
      ours = torchbus::read_checkpoint_position(candidate.path);
      ours_identity = candidate.header.identity;
    } catch (const torchbus::CheckpointError& error) {
      log->warn("skipping checkpoint: {}", error.what());
      unusable.push_back(error.what());
    }
  }
  if (ours) {
    check_split(*ours, request.split);
    if (!others.empty()) log->warn("--resume skips checkpoints of another run:{}", others);
    const auto reason = finished_reason(*ours, request);
    if (!reason.empty() && summary_tells(out, reason)) return {ours->path, reason, ours_identity};
    // A resume that fails must not look finished (model.pt goes with summary.json).
    if (!request.validate) remove_outputs(out, {"summary.json", "model.pt"});
    return {ours->path, {}, ours_identity};
  }
  if (!unusable.empty()) {
    throw torchbus::CheckpointError(fmt::format(
        "cannot resume: {} holds no usable checkpoint of this run; skipped:\n  {}\nNothing in {} "
        "was changed. Restore a checkpoint from a copy, or pass --overwrite to start the run "
        "again.",
        checkpoints.string(), fmt::join(unusable, "\n  "), out.string()));
  }
  if (!others.empty()) {
    throw torchbus::CheckpointError(fmt::format(
        "cannot resume: every checkpoint in {} belongs to another run (option: checkpoint -> "
        "now):{}\nUse the options of that run, another --out, or --overwrite to replace it.",
        checkpoints.string(), others));
  }
  const auto recorded = read_identity(out);
  if (recorded && !ours_by_identity(*recorded)) {
    throw torchbus::Error(fmt::format(
        "cannot resume: {} holds another run, which has no checkpoint ({}); use its options, "
        "another --out, or --overwrite",
        out.string(), torchbus::identity_differences(*recorded, request.identity)));
  }
  TORCHBUS_CHECK(!request.validate, torchbus::ConfigError, "--validate --resume: ", out.string(),
                 " holds no checkpoint of this run to validate");
  // A run without checkpoints (--no-checkpoints) that ended: its summary tells, and a resume
  // changes nothing, as for a run whose last checkpoint holds its end.
  if (recorded) {
    if (auto reason = ended_by_summary(out, ours_by_identity); !reason.empty()) {
      return {{}, std::move(reason), *recorded};
    }
  }
  log->warn("--resume: {} holds no checkpoint of this run yet; starting it from scratch",
            checkpoints.string());
  std::vector<std::string> partial;  // what an attempt killed before its first checkpoint left
  for (const auto& name : present) {
    if (name != "train.log") partial.push_back(name);
  }
  remove_outputs(out, partial);
  return {};
}

}  // namespace train
