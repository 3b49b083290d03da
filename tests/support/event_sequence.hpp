#pragma once

// Test support: the event sequences of docs/events.md spelled out, and a run that records them.

#include <support/fixtures.hpp>
#include <support/recorder.hpp>

#include <initializer_list>
#include <memory>
#include <string>

namespace torchbus::testing {

/// The events of one training batch with a backward.
inline std::string batch() {
  return "BatchStart BeforeBackward AfterBackward BatchEnd";
}

/// The events of a window's last training batch, whose optimizer step updates the weights
/// before its BatchEnd.
inline std::string updating_batch() {
  return "BatchStart BeforeBackward AfterBackward BeforeOptimizerStep AfterOptimizerStep BatchEnd";
}

/// The events of a step of `batches` training batches that updates the weights.
inline std::string step(int batches) {
  std::string out = "StepStart";
  for (int i = 0; i + 1 < batches; ++i) out += " " + batch();
  return out + " " + updating_batch() + " StepEnd";
}

/// The events of an evaluation of `batches` batches.
inline std::string evaluation(int batches) {
  std::string out = "EvalStart";
  for (int i = 0; i < batches; ++i) out += " EvalBatchStart EvalBatchEnd";
  return out + " EvalEnd";
}

/// Joins sequences with spaces, skipping empty ones.
inline std::string join(std::initializer_list<std::string> parts) {
  std::string out;
  for (const auto& part : parts) out += (out.empty() || part.empty() ? "" : " ") + part;
  return out;
}

/// A Run whose trainer records every event it publishes.
struct RecordedRun : Run {
  std::shared_ptr<RecordingCallback> recorder = std::make_shared<RecordingCallback>();

  explicit RecordedRun(TrainerOptions options) : Run(std::move(options)) { trainer.add(recorder); }
  /// The events recorded so far, joined by spaces.
  std::string events() const { return joined(recorder->events); }
};

}  // namespace torchbus::testing
