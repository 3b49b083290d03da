#pragma once

// --find-lr: the learning-rate range test before training, read back on --resume, and what it
// leaves in the run directory (lr_finder.csv, a chart in the report).

#include "dataset.hpp"
#include "flags.hpp"
#include "run_identity.hpp"

#include <torch/torch.h>
#include <torchbus/callbacks/callbacks.hpp>

#include <filesystem>
#include <optional>

namespace train {

/// --find-lr: the learning-rate range test on the training data, on a trainer and optimizer of
/// its own without callbacks (nothing is written, no checkpoint of the sweep). The model and the
/// random generator are as before it, so the run trains as one given --lr with the lr found.
torchbus::LRFinderResult find_lr(const Flags& flags, const Dataset& data,
                                 const torch::nn::Sequential& model, int world_size,
                                 const c10::Device& device);
/// --find-lr --resume: the range test of the run in OUT, read back from OUT/lr_finder.csv, when
/// OUT/identity.txt is this run's with the lr that test found; none otherwise (the test runs
/// again). So a resume trains with the lr its run trained with, and spends no steps on a sweep.
std::optional<torchbus::LRFinderResult> recorded_lr_sweep(const Flags& flags, int world_size,
                                                          const IdentitiesOf& identities_of);
/// Writes OUT/lr_finder.csv (unless `recorded`: read back from there), logs the lr found and adds
/// the loss against the lr to the report.
void report_lr_found(const torchbus::LRFinderResult& found, bool recorded,
                     const std::filesystem::path& out, torchbus::RunReport* report);

}  // namespace train
