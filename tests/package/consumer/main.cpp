// Trains one step through the installed package and prints the events it saw.
#include <torch/torch.h>
#include <torchbus/torchbus.hpp>

#include <iostream>

int main() {
  auto model = torch::nn::Linear(3, 2);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  torchbus::Trainer trainer(model, optimizer,
                            [](const at::Tensor& output, const at::Tensor& target) {
                              return torch::nn::functional::cross_entropy(output, target);
                            });
  std::string events;
  for (auto event :
       {torchbus::Event::ActionStart, torchbus::Event::StepEnd, torchbus::Event::ActionEnd}) {
    trainer.on(event, [&events, event](torchbus::State&) {
      events += std::string(torchbus::to_string(event)) + " ";
    });
  }
  std::vector<torchbus::Batch> batches{
      torchbus::Batch(torch::randn({4, 3}), torch::randint(2, {4}))};
  trainer.fit(batches);
  std::cout << "consumer saw: " << events << "\n";
  return events == "ActionStart StepEnd ActionEnd " ? 0 : 1;
}
