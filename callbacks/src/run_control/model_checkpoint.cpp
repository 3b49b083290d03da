#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <torchbus/atomic_file.hpp>
#include <torchbus/callbacks/model_checkpoint.hpp>
#include <torchbus/checkpoint.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/state.hpp>
#include <torchbus/state_dict.hpp>
#include <torchbus/trainer.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <sstream>

namespace torchbus {

namespace fs = std::filesystem;

namespace {
/// The state_dict file exported next to `checkpoint`: its name with `.pt` for `.tbckpt`.
fs::path state_dict_path(fs::path checkpoint) {
  return checkpoint.replace_extension(".pt");
}
}  // namespace

void ModelCheckpointOptions::validate() const {
  TORCHBUS_CHECK(!directory_.empty(), ConfigError, "ModelCheckpoint needs a directory");
  TORCHBUS_CHECK(every_n_steps_ >= 0, ConfigError,
                 "ModelCheckpoint every_n_steps must be >= 0 (0: off), got ", every_n_steps_);
  TORCHBUS_CHECK(every_n_epochs_ >= 0, ConfigError,
                 "ModelCheckpoint every_n_epochs must be >= 0 (0: off), got ", every_n_epochs_);
  TORCHBUS_CHECK(save_top_k_ >= -1, ConfigError,
                 "ModelCheckpoint save_top_k must be >= 0, or -1 to keep all, got ", save_top_k_);
  TORCHBUS_CHECK(pending_writes_ >= 1, ConfigError,
                 "ModelCheckpoint pending_writes must be >= 1, got ", pending_writes_);
}

ModelCheckpoint::ModelCheckpoint(ModelCheckpointOptions options)
    : Callback(options.name()), options_(std::move(options)) {
  set_role(Role::Checkpoint)
      .after(Role::Metrics)
      .after(Role::Monitor)
      .after(Role::Scheduler)
      .after(Role::WeightAveraging)
      .after(Role::Logger);
  options_.validate();
  run_on_rank(0);
  if (options_.background()) {
    writer_ =
        std::make_unique<CheckpointWriter>(static_cast<std::size_t>(options_.pending_writes()));
  }
}

ModelCheckpoint::~ModelCheckpoint() = default;

void ModelCheckpoint::on_added(Trainer& trainer) {
  const auto& directory = options_.directory();
  if (options_.resume() && fs::is_directory(directory)) {
    remove_stale_temporaries(directory);
    if (newest_valid_checkpoint(directory)) trainer.resume_by_default_from(directory);
  }
}

void ModelCheckpoint::on_action_start(State& /*state*/) {
  const auto& directory = options_.directory();
  TORCHBUS_CHECK(!fs::exists(directory) || fs::is_directory(directory), ConfigError,
                 "ModelCheckpoint folder ", directory.string(),
                 " exists and is not a directory; expected a folder (or a path to create)");
  std::error_code error;
  fs::create_directories(directory, error);
  TORCHBUS_CHECK(!error, ConfigError, "ModelCheckpoint cannot create its folder ",
                 directory.string(), ": ", error.message());
  const int stale = remove_stale_temporaries(directory);
  if (stale > 0) {
    logger()->info("removed {} temporary file(s) an interrupted write left in {}", stale,
                   directory.string());
  }
}

void ModelCheckpoint::on_step_end(State& state) {
  if (writer_) writer_->rethrow_if_failed();  // a failed background write ends the run here
  const auto every = options_.every_n_steps();
  // While an exception escapes, StepEnd and EpochEnd only close what was open: mid-step, no save.
  if (state.error || every <= 0 || state.update_skipped || state.step % every != 0) return;
  // A validation belongs to this step: the checkpoint waits for it, so its score is current.
  if (state.validation_follows) {
    pending_ = true;
  } else {
    save(state, /*at_epoch_end=*/false);
  }
}

void ModelCheckpoint::on_eval_end(State& state) {
  if (state.action != Action::Fit) return;  // evaluate(): not a validation of fit()
  ++evaluations_;
  if (pending_) save(state, /*at_epoch_end=*/false);
}

void ModelCheckpoint::on_epoch_end(State& state) {
  if (state.error) return;
  const auto every = options_.every_n_epochs();
  const bool due = every > 0 && (state.epoch + 1) % every == 0;
  // This step's checkpoint, taken before the epoch's validation, is taken again with its score.
  const bool rescore = state.step == last_saved_step_ && evaluations_ != last_saved_evaluations_;
  if (due || pending_ || rescore) save(state, /*at_epoch_end=*/true);
}

void ModelCheckpoint::on_action_end(State& state) {
  const bool failed = static_cast<bool>(state.error);
  // A resumed run that made no step (it had finished) holds nothing its checkpoint does not.
  const bool stopped_since_saved =
      state.stop_requested() && state.step != last_saved_step_ && state.step != resumed_step_;
  if (!failed && state.action == Action::Fit &&
      (pending_ || (stopped_since_saved && options_.save_on_stop()))) {
    save(state, /*at_epoch_end=*/false);
  }
  pending_ = false;
  resumed_step_ = -1;
  flush();
}

void ModelCheckpoint::on_load_checkpoint(const Checkpoint& checkpoint) {
  resumed_step_ = checkpoint.step;
}

void ModelCheckpoint::on_exception(State&) {
  try {
    flush();
  } catch (const std::exception& error) {
    logger()->error("ModelCheckpoint: a background write failed: {}", error.what());
  }
}

void ModelCheckpoint::flush() {
  if (writer_) writer_->flush();
}

std::optional<double> ModelCheckpoint::score_of(const State& state) {
  const auto& monitor = options_.monitor();
  if (monitor.empty()) return -static_cast<double>(state.step);  // newest first
  if (!state.metrics.contains(monitor)) {
    if (!warned_unranked_) {
      logger()->warn(
          "ModelCheckpoint monitors '{}', which is not in the metric history yet (recorded: {}); "
          "checkpoints taken before it exists are kept unranked, newest first",
          monitor, detail::join_or_none(state.metrics.names()));
      warned_unranked_ = true;
    }
    return std::nullopt;
  }
  const double value = state.metrics.latest(monitor).value;
  // A NaN ranks worst, as Lightning stores it (callbacks/model_checkpoint.py,
  // _update_best_and_save: "do not save nan, replace with +/- inf").
  if (std::isnan(value)) return std::numeric_limits<double>::infinity();
  return options_.mode() == Mode::Min ? value : -value;
}

void ModelCheckpoint::save(State& state, bool at_epoch_end) {
  pending_ = false;
  if (state.step == last_saved_step_ && state.epoch == last_saved_epoch_ &&
      evaluations_ == last_saved_evaluations_ && (!at_epoch_end || last_saved_at_epoch_end_)) {
    return;
  }
  const auto score = score_of(state);
  char name[64];
  std::snprintf(name, sizeof name, "epoch-%03lld-step-%06lld%s",
                static_cast<long long>(state.epoch), static_cast<long long>(state.step),
                kCheckpointExtension);
  const auto path = options_.directory() / name;
  // Kept before the checkpoint is serialized, so that its own state lists it: a run resumed from
  // it goes on pruning it.
  kept_.erase(
      std::remove_if(kept_.begin(), kept_.end(), [&](const Kept& k) { return k.path == path; }),
      kept_.end());
  kept_.push_back(Kept{path, score.value_or(std::numeric_limits<double>::quiet_NaN()), state.step});
  // Captured before pruning: the checkpoint's own state lists what is pruned now (dropped by
  // load_state, as the files are gone by then). In the background, the oldest pending write
  // finishes first when `pending_writes` are pending, then the checkpoint is captured as copies
  // and serialized on the writer's thread.
  std::optional<CheckpointSnapshot> snapshot;
  if (writer_) {
    writer_->wait_for_room();
    snapshot = state.trainer().capture_checkpoint(path);
  } else {
    state.trainer().save_checkpoint(path);
  }
  // The weights as a state_dict file Python reads, when exported: copies taken now, written after
  // the checkpoint.
  NamedTensors weights;
  if (options_.export_state_dict()) {
    for (auto& [name, tensor] : state_dict_of(state.trainer().module())) {
      weights.emplace_back(name, writer_ ? tensor.detach().clone() : tensor.detach());
    }
  }
  // Once the file is durable (never before: the link must not point at a file being written, and
  // older checkpoints go only when a newer one can replace them): export the weights, move the
  // links, remove the pruned checkpoints and their weights.
  auto after_durable = [last = options_.save_last() ? last_link() : fs::path(), path,
                        pruned = prune(), export_weights = options_.export_state_dict(),
                        weights = std::move(weights)] {
    if (export_weights) write_file_atomically(state_dict_path(path), state_dict_bytes(weights));
    if (!last.empty()) {
      replace_with_symlink(last, path.filename());
      if (export_weights) {
        replace_with_symlink(state_dict_path(last), state_dict_path(path).filename());
      }
    }
    for (const auto& file : pruned) {
      std::error_code error;
      fs::remove(file, error);
      fs::remove(state_dict_path(file), error);
    }
  };
  if (writer_) {
    writer_->write(std::move(*snapshot), std::move(after_durable));
  } else {
    after_durable();
  }
  last_saved_step_ = state.step;
  last_saved_epoch_ = state.epoch;
  last_saved_evaluations_ = evaluations_;
  last_saved_at_epoch_end_ = at_epoch_end;
}

std::vector<fs::path> ModelCheckpoint::prune() {
  // Ranked by score (lower is better), then the unranked ones newest first. Equal scores as in
  // Lightning (callbacks/model_checkpoint.py): the newer ranks first, since the top k evicts the
  // oldest of its worst (`max(self.best_k_models, key=...)` returns the first inserted), but the
  // checkpoint just saved ranks after the older ones it ties with, since it enters a full top k
  // only if strictly better than its worst (check_monitor_top_k: torch.lt / torch.gt).
  const fs::path just_saved = kept_.back().path;
  const auto tie_rank = [&just_saved](const Kept& k) {
    return k.path == just_saved ? std::numeric_limits<std::int64_t>::min() : k.step;
  };
  std::sort(kept_.begin(), kept_.end(), [&](const Kept& a, const Kept& b) {
    const bool a_ranked = !std::isnan(a.score), b_ranked = !std::isnan(b.score);
    if (a_ranked != b_ranked) return a_ranked;
    if (!a_ranked) return a.step > b.step;
    if (a.score != b.score) return a.score < b.score;
    return tie_rank(a) > tie_rank(b);
  });
  const auto keep = options_.save_top_k();
  if (keep < 0 || static_cast<std::int64_t>(kept_.size()) <= keep) return {};
  std::int64_t newest_step = -1;
  for (const auto& k : kept_) newest_step = std::max(newest_step, k.step);
  std::vector<Kept> remaining;
  std::vector<fs::path> pruned;
  for (std::size_t i = 0; i < kept_.size(); ++i) {
    const bool among_best = static_cast<std::int64_t>(i) < keep;
    const bool is_last = options_.save_last() && kept_[i].step == newest_step;
    if (among_best || is_last) {
      remaining.push_back(kept_[i]);
    } else {
      pruned.push_back(kept_[i].path);
    }
  }
  kept_ = std::move(remaining);
  return pruned;
}

fs::path ModelCheckpoint::last_link() const {
  return options_.directory() / (std::string("last") + kCheckpointExtension);
}

std::vector<fs::path> ModelCheckpoint::kept() const {
  std::vector<fs::path> paths;
  for (const auto& k : kept_) paths.push_back(k.path);
  return paths;
}

std::vector<ModelCheckpoint::KeptCheckpoint> ModelCheckpoint::kept_checkpoints() const {
  std::vector<KeptCheckpoint> out;
  for (const auto& k : kept_) {
    std::optional<double> value;
    if (!options_.monitor().empty() && !std::isnan(k.score)) {
      value = options_.mode() == Mode::Min ? k.score : -k.score;
    }
    out.push_back(KeptCheckpoint{k.path, value, k.step});
  }
  return out;
}

void ModelCheckpoint::save_state(torch::serialize::OutputArchive& archive) const {
  std::string paths;
  std::vector<double> scores;
  std::vector<std::int64_t> steps;
  // File names only: the kept files are this checkpoint's neighbours, wherever the run
  // directory is moved or copied to (a copy resumed must never prune the original's files).
  for (const auto& k : kept_) {
    paths += k.path.filename().string() + "\n";
    scores.push_back(k.score);
    steps.push_back(k.step);
  }
  archive.write("kept_paths", c10::IValue(paths));
  archive.write("kept_scores", c10::IValue(scores));
  archive.write("kept_steps", c10::IValue(steps));
}

void ModelCheckpoint::load_state(torch::serialize::InputArchive& archive) {
  c10::IValue paths, scores, steps;
  archive.read("kept_paths", paths);
  archive.read("kept_scores", scores);
  archive.read("kept_steps", steps);
  const auto score_list = scores.toDoubleVector();
  const auto step_list = steps.toIntVector();
  std::vector<std::string> lines;
  std::istringstream in(paths.toStringRef());
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  TORCHBUS_CHECK(lines.size() == score_list.size() && lines.size() == step_list.size(),
                 CheckpointError, "ModelCheckpoint '", name(), "': the checkpoint keeps ",
                 detail::count_of(static_cast<long long>(lines.size()), "path"), ", ",
                 detail::count_of(static_cast<long long>(score_list.size()), "score"), " and ",
                 detail::count_of(static_cast<long long>(step_list.size()), "step"),
                 " (damaged or forged)");
  kept_.clear();
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto& line = lines[i];
    // Earlier releases stored full paths: only the file name counts, in this run's folder.
    const auto path = options_.directory() / fs::path(line).filename();
    if (fs::exists(path)) kept_.push_back(Kept{path, score_list[i], step_list[i]});
  }
}

}  // namespace torchbus
