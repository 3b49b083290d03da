#pragma once

/// \file
/// Names of the metrics the trainer records in `State::metrics` (docs/trainer.md: when each is
/// recorded and at which step number).

#include <string_view>

namespace torchbus::metric_names {

/// The step's loss (`State::step_loss()`), once per step that made an update, as a tensor.
inline constexpr std::string_view kTrainLoss = "train_loss";
/// The mean of an epoch's `kTrainLoss` points, at the end of every epoch that made an update.
inline constexpr std::string_view kTrainLossEpoch = "train_loss_epoch";
/// The mean loss per sample of an evaluation, at its end (unless every batch was cancelled).
inline constexpr std::string_view kValLoss = "val_loss";

}  // namespace torchbus::metric_names
