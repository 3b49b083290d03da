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
/// The mean loss per sample of a test (Trainer::test), at its end.
inline constexpr std::string_view kTestLoss = "test_loss";
/// The prefix of the metrics of a validation (fit's, evaluate()'s).
inline constexpr std::string_view kValPrefix = "val_";
/// The prefix of the metrics of a test.
inline constexpr std::string_view kTestPrefix = "test_";

// Recorded by built-in callbacks, and read by others (RunReport charts them, or samples its own).

/// The learning rate of parameter group 0 at each step (LearningRateScheduler's default metric).
inline constexpr std::string_view kLearningRate = "lr";
/// The seconds from StepStart to StepEnd of a step (Timer's, after its prefix).
inline constexpr std::string_view kStepTime = "step_time";

}  // namespace torchbus::metric_names
