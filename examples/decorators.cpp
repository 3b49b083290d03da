// Decorate free functions: registered at namespace scope, or turned into subscriptions by helpers.

#include "toy_problem.hpp"

#include <torchbus/torchbus.hpp>

#include <iostream>

namespace {

void announce_epoch(torchbus::State& state) {
  std::cout << "epoch " << state.epoch + 1 << " begins\n";
}

void report_loss(torchbus::State& state) {
  std::cout << "step " << state.step << " loss " << state.step_loss().item<double>() << "\n";
}

int lr_checks = 0;
void check_learning_rate(torchbus::State&) {
  ++lr_checks;
}

}  // namespace

// Like NeMo's @on_epoch_start: every Trainer of this program that opts in connects these.
TORCHBUS_SUBSCRIBE(torchbus::on_epoch_start(announce_epoch));
TORCHBUS_SUBSCRIBE(torchbus::on_step_end(torchbus::every(25), report_loss));

int main() {
  auto model = toy::model();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  torchbus::Trainer trainer(
      model, optimizer, toy::loss,
      torchbus::TrainerOptions().max_epochs(2).use_registered_subscriptions(true));

  // The same helpers without the macro: a value to add to one trainer.
  trainer.add(torchbus::on_after_optimizer_step(check_learning_rate));

  auto batches = toy::batches();
  trainer.fit(batches);
  std::cout << "check_learning_rate ran " << lr_checks << " times\n";
  std::cout << "decorators example finished\n";
}
