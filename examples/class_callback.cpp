// Subclass Callback: a step time tracker (NeMo's StepTimeTracker), with state for checkpoints.

#include "toy_problem.hpp"

#include <torchbus/torchbus.hpp>

#include <chrono>
#include <iostream>

/// Measures each step's wall time and keeps an exponential moving average.
class StepTimeTracker : public torchbus::Callback {
 public:
  explicit StepTimeTracker(double smoothing = 0.9) : Callback("step_time"), smoothing_(smoothing) {}

  // Only these two hooks are overridden, so only StepStart and StepEnd get a subscriber.
  void on_step_start(torchbus::State&) override { start_ = Clock::now(); }
  void on_step_end(torchbus::State& state) override {
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start_).count();
    average_ms_ = state.step == 1 ? ms : smoothing_ * average_ms_ + (1 - smoothing_) * ms;
    state.record_metric("step_ms", average_ms_);
  }

  double average_ms() const { return average_ms_; }

 private:
  using Clock = std::chrono::steady_clock;
  double smoothing_;
  double average_ms_ = 0.0;
  Clock::time_point start_;
};

int main() {
  auto model = toy::model();
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-2));
  torchbus::Trainer trainer(model, optimizer, toy::loss, torchbus::TrainerOptions().max_epochs(2));
  auto tracker = std::make_shared<StepTimeTracker>();
  trainer.add(tracker);

  auto batches = toy::batches();
  trainer.fit(batches);
  std::cout << "hooks connected: StepEnd "
            << trainer.bus().subscriber_count(torchbus::Event::StepEnd) << ", BatchEnd "
            << trainer.bus().subscriber_count(torchbus::Event::BatchEnd) << "\n";
  std::cout << "recorded " << trainer.state().metrics.series("step_ms").size()
            << " step times, average " << tracker->average_ms() << " ms\n";
  std::cout << "class callback example finished\n";
}
