// A custom event emitted from a custom train step (pytorch-accelerated's verify-batch example).

#include "toy_problem.hpp"

#include <torchbus/torchbus.hpp>

#include <iostream>

int main() {
  auto model = toy::model();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  torchbus::Trainer trainer(model, optimizer, toy::loss, torchbus::TrainerOptions());

  // Register the event once: the handle publishes it; anyone subscribes by id or by name.
  const torchbus::CustomEventPublisher bad_batch = trainer.bus().register_event("bad_batch");
  int bad_batches = 0;
  trainer.bus().on("bad_batch", [&](torchbus::State& state) {
    ++bad_batches;
    std::cout << "batch " << state.global_batch << " has non-finite inputs: skipped\n";
  });

  trainer.set_train_step([bad_batch](torchbus::Trainer& t, torchbus::Batch& batch) {
    if (!batch.data.isfinite().all().item<bool>()) {
      bad_batch.emit(t.state());
      throw torchbus::CancelBatch();  // no backward for this batch
    }
    return t.compute_loss(t.forward(batch.data), batch.target);
  });

  auto batches = toy::batches(8);
  batches[3].data[0][0] = std::numeric_limits<float>::quiet_NaN();
  trainer.fit(batches);
  std::cout << bad_batches << " bad batch, " << trainer.state().step << " steps\n";
  std::cout << "custom event example finished\n";
  return bad_batches == 1 ? 0 : 1;
}
