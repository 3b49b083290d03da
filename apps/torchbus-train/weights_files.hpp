#pragma once

// The weights files of a run of torchbus-train: --init-from's state_dict, and the validations of
// given weights (--validate's summary) and of the weights the run ends with (SWA's average).

#include "flags.hpp"
#include "summary.hpp"

#include <torch/torch.h>
#include <torchbus/torchbus.hpp>

#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

namespace train {

/// A validation's mean loss and accuracy.
struct ValidationResult {
  double loss = std::nan("");
  double accuracy = std::nan("");
};

/// Loads the state_dict file `path` into `model` (strict); returns the file's SHA-256. A file that
/// does not fit the model is a usage error naming the file and the keys.
std::string initialize_from(const std::string& path, torch::nn::Module& model);
/// --validate: evaluates the model's weights (--init-from's, or the --resume checkpoint's) on the
/// validation data and writes what it found to `summary_file` (rank 0); trains nothing.
int validate_weights(torchbus::Trainer& trainer, const torch::nn::Module& model,
                     torchbus::BatchSource& validation, const std::string& weights,
                     const JsonObject& run_options, const std::string& identity, int world_size,
                     const std::optional<std::filesystem::path>& summary_file);
/// Validates the weights `model` holds (SWA's average, put in at the end of fit) as the run's
/// validations do, on a trainer of its own: the run's callbacks (its report, its segments, the
/// loggers) stay those of its training.
ValidationResult validate_final_weights(const Flags& flags, const torch::nn::Sequential& model,
                                        torchbus::BatchSource& validation,
                                        const std::shared_ptr<torchbus::ProcessGroup>& group,
                                        const c10::Device& device);

}  // namespace train
