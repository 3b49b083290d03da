#pragma once

// A class callback with state of its own, which checkpoints keep.

#include <torchbus/torchbus.hpp>

namespace torchbus::testing {

/// Counts the steps it saw; its count is saved in checkpoints and survives a resume.
class StepCounter : public Callback {
 public:
  StepCounter() : Callback("step_counter") {}
  std::int64_t count = 0;
  void on_step_end(State&) override { ++count; }
  void save_state(torch::serialize::OutputArchive& archive) const override {
    archive.write("count", c10::IValue(count));
  }
  void load_state(torch::serialize::InputArchive& archive) override {
    c10::IValue value;
    archive.read("count", value);
    count = value.toInt();
  }
};

}  // namespace torchbus::testing
