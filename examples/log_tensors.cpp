// Log tensors by name: the train step stores a tensor, a logger reads it by name.

#include "toy_problem.hpp"

#include <torchbus/torchbus.hpp>

#include <iostream>

/// Logs the named tensors every `every` steps: scalars as numbers, others as shape and mean.
class NamedTensorLogger : public torchbus::Callback {
 public:
  NamedTensorLogger(std::vector<std::string> names, std::int64_t every)
      : Callback("named_tensor_logger"), names_(std::move(names)), every_(every) {}

  void on_step_end(torchbus::State& state) override {
    if (state.step % every_ != 0) return;
    std::cout << "step " << state.step;
    for (const auto& name : names_) {
      const auto* tensor = state.tensors.find(name);
      if (tensor == nullptr) continue;
      if (tensor->numel() == 1) {
        std::cout << " " << name << "=" << tensor->item<double>();
      } else {
        std::cout << " " << name << "=" << tensor->sizes() << " mean "
                  << tensor->mean().item<double>();
      }
    }
    std::cout << "\n";
  }

 private:
  std::vector<std::string> names_;
  std::int64_t every_;
};

int main() {
  auto model = toy::model();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  torchbus::Trainer trainer(model, optimizer, toy::loss, torchbus::TrainerOptions().max_epochs(2));

  // A custom train step that also stores the batch's confidence and logits, kept for the step.
  trainer.set_train_step([](torchbus::Trainer& t, torchbus::Batch& batch) {
    auto logits = t.forward(batch.data);
    auto& tensors = t.state().tensors;
    tensors.set("confidence", torch::softmax(logits, 1).amax(1).mean().detach(),
                torchbus::Scope::Step);
    tensors.set("logits", logits.detach(), torchbus::Scope::Step);
    return t.compute_loss(logits, batch.target);
  });
  trainer.add(std::make_shared<NamedTensorLogger>(
      std::vector<std::string>{"step_loss", "confidence", "logits"}, 16));

  auto batches = toy::batches();
  trainer.fit(batches);
  std::cout << "log tensors example finished\n";
}
