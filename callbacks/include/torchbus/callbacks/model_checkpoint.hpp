#pragma once

/// \file
/// ModelCheckpoint: saves checkpoints every n steps or epochs, keeps the best k by a metric and a
/// `last` link, and can resume the next fit from its folder.

#include <torch/arg.h>
#include <torchbus/callback.hpp>
#include <torchbus/checkpoint_file.hpp>
#include <torchbus/metric_history.hpp>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace torchbus {

/// Options of ModelCheckpoint.
struct ModelCheckpointOptions {
  /// Where checkpoints go: created if missing.
  explicit ModelCheckpointOptions(std::filesystem::path directory)
      : directory_(std::move(directory)) {}
  /// The callback's name, unique in a trainer: its state's key in checkpoints (give each
  /// instance of a run its own).
  TORCH_ARG(std::string, name) = "model_checkpoint";
  /// The checkpoint folder.
  TORCH_ARG(std::filesystem::path, directory);
  /// Save after every n optimizer steps (0: not by steps).
  TORCH_ARG(std::int64_t, every_n_steps) = 0;
  /// Save after every n epochs (0: not by epochs).
  TORCH_ARG(std::int64_t, every_n_epochs) = 1;
  /// Metric ranking checkpoints for save_top_k (empty: keep the newest instead).
  TORCH_ARG(std::string, monitor) = "";
  /// Whether lower or higher values of `monitor` are better.
  TORCH_ARG(Mode, mode) = Mode::Min;
  /// Checkpoints kept (the best by `monitor`, else the newest); -1 keeps all.
  TORCH_ARG(std::int64_t, save_top_k) = 3;
  /// Keep `last.tbckpt`, a link to the newest checkpoint.
  TORCH_ARG(bool, save_last) = true;
  /// Also save when the run stops early (StopTraining, request_stop, Ctrl-C handlers).
  TORCH_ARG(bool, save_on_stop) = true;
  /// Write files on a background thread: the training thread copies the tensors; serializing,
  /// writing, fsync, moving `last` and pruning happen on the writer's thread, one checkpoint at a
  /// time, in order.
  TORCH_ARG(bool, background) = true;
  /// With `background`: checkpoints pending at once (being written, or copied and waiting for the
  /// one before). Each holds a copy of the checkpoint's tensors. A checkpoint due while this many
  /// are pending waits for the oldest to be written before it is copied; 1 waits for every write
  /// (the least memory), 2 (the default) copies the next while one is written.
  TORCH_ARG(std::int64_t, pending_writes) = 2;
  /// When the folder holds a valid checkpoint, resume the next fit from the newest one.
  TORCH_ARG(bool, resume) = false;
  /// Also write the model's weights as a state_dict file next to each checkpoint (its name with
  /// `.pt` for `.tbckpt`; `last.pt` links the newest), which Python's torch.load reads
  /// (docs/interop.md); removed with its checkpoint.
  TORCH_ARG(bool, export_state_dict) = false;

 public:
  /// Throws ConfigError naming the first option out of range.
  void validate() const;
};

/// Saves checkpoints of the trainer it is added to. Role::Checkpoint, after Role::Metrics (so it is
/// ranked by the value of its step), Role::Monitor, Role::Scheduler, Role::WeightAveraging and
/// Role::Logger (so a checkpoint holds their state as of its step and every logged row up to it);
/// rank 0 only. A step checkpoint whose step is followed by a validation is taken after it (at
/// EvalEnd), so that it is ranked by that validation; one taken before the epoch's validation is
/// taken again at EpochEnd. Ranks as Lightning's top k: a NaN value ranks worst, among equal values
/// the newer ranks first, but a new checkpoint must be strictly better than the worst of a full top
/// k to enter it. Before the monitored metric exists, checkpoints are kept unranked (newest first,
/// after every ranked one) with one warning.
class ModelCheckpoint : public Callback {
 public:
  explicit ModelCheckpoint(ModelCheckpointOptions options);
  ~ModelCheckpoint() override;

  void on_added(Trainer& trainer) override;
  void on_action_start(State& state) override;
  void on_step_end(State& state) override;
  void on_eval_end(State& state) override;
  void on_epoch_end(State& state) override;
  void on_action_end(State& state) override;
  void on_exception(State& state) override;
  void on_load_checkpoint(const Checkpoint& checkpoint) override;
  void save_state(torch::serialize::OutputArchive& archive) const override;
  /// Its state is copies: a background checkpoint serializes it off the training thread.
  bool state_is_snapshot() const override { return true; }
  void load_state(torch::serialize::InputArchive& archive) override;

  /// A checkpoint kept: its file, the monitored value that ranks it (none: no monitor, or taken
  /// before the metric existed) and its step.
  struct KeptCheckpoint {
    std::filesystem::path path;   ///< the file
    std::optional<double> value;  ///< the monitored value it was taken with
    std::int64_t step = 0;        ///< optimizer steps when it was taken
  };

  /// The checkpoints kept, best (or newest) first.
  std::vector<std::filesystem::path> kept() const;
  /// The checkpoints kept with their monitored values, best (or newest) first.
  std::vector<KeptCheckpoint> kept_checkpoints() const;
  /// Waits for a background write; rethrows its error.
  void flush();

 private:
  struct Kept {
    std::filesystem::path path;
    double score;  // lower is better; NaN: unranked (the monitored metric did not exist yet)
    std::int64_t step;
  };
  void save(State& state, bool at_epoch_end);
  std::optional<double> score_of(const State& state);  // nothing: the metric does not exist yet
  /// Drops from kept_ what save_top_k no longer keeps; returns their files, to remove.
  std::vector<std::filesystem::path> prune();
  /// The path of `last.tbckpt`.
  std::filesystem::path last_link() const;

  ModelCheckpointOptions options_;
  std::unique_ptr<CheckpointWriter> writer_;
  std::vector<Kept> kept_;
  std::int64_t last_saved_step_ = -1;
  std::int64_t resumed_step_ = -1;  // the step of the checkpoint this fit resumed from
  std::int64_t last_saved_epoch_ = -1;
  std::int64_t evaluations_ = 0;              // validations seen during fit
  std::int64_t last_saved_evaluations_ = -1;  // ... when the last checkpoint was taken
  bool last_saved_at_epoch_end_ = false;
  bool pending_ = false;  // a step checkpoint waits for the validation of its step
  bool warned_unranked_ = false;
};

}  // namespace torchbus
