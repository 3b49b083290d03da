#pragma once

// summary.json: what a run did, written atomically at its end.

#include <torch/torch.h>
#include <nlohmann/json.hpp>
#include <torchbus/metric_history.hpp>
#include <torchbus/trainer.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace train {

/// A JSON object that keeps its members in insertion order, as summary.json lists them.
using JsonObject = nlohmann::ordered_json;

/// Each member of `object` with its value as plain text (strings without quotes), e.g. for a
/// report.
std::vector<std::pair<std::string, std::string>> text_members(const JsonObject& object);

/// SHA-256 over every parameter and buffer of `module` (names, shapes, dtypes and bytes), in
/// registration order: equal for two runs exactly when their final weights are bitwise equal.
std::string parameters_sha256(const torch::nn::Module& module);

/// The latest value of the metric `name`, NaN when none was recorded.
double latest_or_nan(const torchbus::MetricHistory& metrics, const std::string& name);

/// What summary.json says of a run that trained, beside what its trainer and model tell.
struct TrainingSummary {
  JsonObject options;         ///< the run's options (describe_run)
  std::string identity;       ///< the identity it trained under
  int world_size = 1;         ///< its ranks
  JsonObject segments;        ///< how its segments were split (RunSegments::to_json)
  std::string device;         ///< where it trained
  double final_val_loss = 0;  ///< of the weights model.pt holds
  double final_val_accuracy = 0;
  double wall_seconds = 0;              ///< of its training
  std::int64_t samples = 0;             ///< trained by this rank (every rank trains as many)
  std::string stop_reason;              ///< why it ended
  int exit_code = 0;                    ///< the process's exit code
  std::optional<double> lr_found;       ///< --find-lr's learning rate
  std::optional<double> test_loss;      ///< --test's, of the weights model.pt holds
  std::optional<double> test_accuracy;  ///< with test_loss
};

/// Writes `path` (summary.json) atomically: `summary`, the trainer's steps, epochs and final
/// training metrics, the SHA-256 of `model`'s parameters and the subscribers that failed.
/// Non-finite numbers (a diverged loss, a metric never computed) are written as null, bytes that
/// are not UTF-8 (in a data path) as U+FFFD.
void write_training_summary(const std::filesystem::path& path, const TrainingSummary& summary,
                            torchbus::Trainer& trainer, const torch::nn::Module& model);

}  // namespace train
