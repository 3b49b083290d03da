// A Trainer subclass that brings its own default callbacks (the fastai-style MomentumTrainer idea).

#include "toy_problem.hpp"

#include <torchbus/torchbus.hpp>

#include <iostream>

/// Raises SGD's momentum from `low` to `high` over the first `ramp_steps` steps, and records the
/// steps done at each epoch's end: callbacks every run of this trainer gets by default.
class MomentumTrainer : public torchbus::Trainer {
 public:
  MomentumTrainer(torch::nn::Sequential model, torch::optim::SGD& optimizer, double low,
                  double high, std::int64_t ramp_steps)
      : Trainer(model, optimizer, toy::loss, torchbus::TrainerOptions().max_epochs(3)) {
    on(torchbus::Event::StepStart, [&optimizer, low, high, ramp_steps](torchbus::State& state) {
      const double progress = std::min(1.0, static_cast<double>(state.step) / ramp_steps);
      auto& options = static_cast<torch::optim::SGDOptions&>(optimizer.param_groups()[0].options());
      options.momentum(low + (high - low) * progress);
    });
    on(torchbus::Event::EpochEnd, [](torchbus::State& state) {
      state.record_metric("steps_so_far", static_cast<double>(state.step));
    });
  }

 protected:
  // Overridden hook: runs before the AfterOptimizerStep callbacks.
  void optimizer_step() override {
    ++updates_;
    Trainer::optimizer_step();
  }

 public:
  std::int64_t updates_ = 0;
};

int main() {
  auto model = toy::model();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.5));
  MomentumTrainer trainer(model, optimizer, 0.5, 0.9, 20);
  auto batches = toy::batches();
  trainer.fit(batches);
  const auto& options =
      static_cast<torch::optim::SGDOptions&>(optimizer.param_groups()[0].options());
  std::cout << "updates " << trainer.updates_ << ", final momentum " << options.momentum() << "\n";
  std::cout << "epochs recorded " << trainer.state().metrics.series("steps_so_far").size() << "\n";
  std::cout << "trainer subclass example finished\n";
}
