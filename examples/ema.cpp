// Weight averaging: an EMA of the weights evaluated in every validation and kept at the end, and
// EarlyStopping keeping the weights of the best validation. docs/builtin-callbacks-techniques.md.

#include <torch/torch.h>
#include <torchbus/callbacks/callbacks.hpp>

#include <iostream>
#include <vector>

int main() {
  torch::manual_seed(0);
  const auto inputs = torch::randn({512, 10});
  const auto targets = inputs.narrow(1, 0, 3).argmax(1);
  std::vector<torchbus::Batch> train, validation;
  for (int i = 0; i < 14; ++i) {
    train.emplace_back(inputs.narrow(0, 32 * i, 32), targets.narrow(0, 32 * i, 32));
  }
  validation.emplace_back(inputs.narrow(0, 448, 64), targets.narrow(0, 448, 64));

  torch::nn::Sequential model(torch::nn::Linear(10, 32), torch::nn::ReLU(),
                              torch::nn::Linear(32, 3));
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torchbus::Trainer trainer(
      model, optimizer,
      [](const at::Tensor& output, const at::Tensor& target) {
        return torch::nn::functional::cross_entropy(output, target);
      },
      torchbus::TrainerOptions().max_epochs(15));
  // Validations run with the averaged weights; after fit() the model holds them.
  auto ema = std::make_shared<torchbus::EMA>(torchbus::EMAOptions().decay(0.95));
  trainer.add(ema);
  // Stops when val_loss (of the averaged weights) stops improving.
  trainer.add(std::make_shared<torchbus::EarlyStopping>(
      torchbus::EarlyStoppingOptions().monitor("val_loss").patience(3)));
  trainer.fit(train, validation);

  bool holds_average = true;
  const auto parameters = model->parameters();
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    holds_average = holds_average && torch::equal(parameters[i], ema->average()[i]);
  }
  std::cout << "EMA: " << ema->updates() << " updates over " << trainer.state().step
            << " steps; the model holds the average: " << (holds_average ? "yes" : "no")
            << "\nval_loss with the averaged weights: " << trainer.evaluate(validation) << "\n";
  return holds_average ? 0 : 1;
}
