// Connect lambdas to events, with filters and priorities.

#include "toy_problem.hpp"

#include <torchbus/torchbus.hpp>

#include <iostream>

int main() {
  auto model = toy::model();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  torchbus::Trainer trainer(model, optimizer, toy::loss, torchbus::TrainerOptions().max_epochs(3));

  // Every 10th step: the step's mean loss (State::step_loss()).
  trainer.on(torchbus::Event::StepEnd, torchbus::every(10), [](torchbus::State& state) {
    std::cout << "step " << state.step << " loss " << state.step_loss().item<double>() << "\n";
  });
  // Once, at the first epoch's end; priority -1 runs before the default 0.
  trainer.on(
      torchbus::Event::EpochEnd, torchbus::once(1),
      [](torchbus::State& state) {
        std::cout << "first epoch done after " << state.step << " steps\n";
      },
      -1);
  // Only when a condition on the state holds.
  trainer.on(torchbus::Event::EpochEnd,
             torchbus::when([](const torchbus::State& state) { return state.epoch == 2; }),
             [](torchbus::State& state) {
               std::cout << "last epoch, mean train loss "
                         << state.metrics.latest("train_loss_epoch").value << "\n";
             });
  // A scoped connection disconnects when it goes out of scope.
  {
    torchbus::ScopedConnection temporary =
        trainer.on(torchbus::Event::ActionStart, [](torchbus::State&) { std::cout << "never\n"; });
  }

  auto batches = toy::batches();
  trainer.fit(batches);
  std::cout << "lambdas example finished: " << trainer.state().step << " steps\n";
}
