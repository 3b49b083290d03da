// A regression of two targets from two sensors, with an auxiliary loss: the forward reads the
// batch's `vibration` and `temperature`, returns the prediction and a penalty on its hidden layer
// as named outputs, and the loss reads them and the batch's `targets`. No custom step; the
// held-out set is scored with trainer.test(). docs/any-model.md.
//
//   example_two_input_regression    exits 1 unless the test loss is a tenth of the first epoch's

#include <torch/torch.h>
#include <torchbus/torchbus.hpp>

#include <iostream>
#include <vector>

namespace {

/// Two encoders joined into one hidden layer, a head of two outputs.
struct TwoSensorsImpl : torch::nn::Module {
  TwoSensorsImpl() {
    vibration = register_module("vibration", torch::nn::Linear(6, 16));
    temperature = register_module("temperature", torch::nn::Linear(3, 16));
    head = register_module("head", torch::nn::Linear(16, 2));
  }
  torch::nn::Linear vibration{nullptr}, temperature{nullptr}, head{nullptr};
};
TORCH_MODULE(TwoSensors);

/// `count` samples in batches of `batch`: targets are smooth functions of both sensors.
std::vector<torchbus::Batch> readings(int count, int batch, std::uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<torchbus::Batch> batches;
  for (int first = 0; first < count; first += batch) {
    const auto vibration = torch::randn({batch, 6});
    const auto temperature = torch::randn({batch, 3});
    const auto targets =
        torch::stack({torch::tanh(vibration.narrow(1, 0, 3).sum(1) - temperature.select(1, 0)),
                      0.5 * vibration.select(1, 5) * temperature.select(1, 2)},
                     1);
    torchbus::Batch readings;
    readings.set("vibration", vibration).set("temperature", temperature).set("targets", targets);
    batches.push_back(std::move(readings));
  }
  return batches;
}

}  // namespace

int main() {
  torch::manual_seed(0);
  TwoSensors model;
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-2));
  torchbus::Trainer trainer(
      model.ptr(), torchbus::Trainer::BatchForward([&](const torchbus::Batch& batch) {
        const auto hidden = torch::tanh(model->vibration(batch.get("vibration")) +
                                        model->temperature(batch.get("temperature")));
        return torchbus::Output{{"prediction", model->head(hidden)},
                                {"aux_loss", hidden.pow(2).mean()}};
      }),
      optimizer,
      [](const torchbus::Output& output, const torchbus::Batch& batch) {
        return torch::mse_loss(output.get("prediction"), batch.get("targets")) +
               1e-3 * output.get("aux_loss");
      },
      torchbus::TrainerOptions().max_epochs(20).seed(1));
  double first_epoch = 0;
  trainer.on(torchbus::Event::EpochEnd, [&](torchbus::State& state) {
    if (state.epoch == 0) first_epoch = state.metrics.latest("train_loss_epoch").value;
  });
  trainer.fit(readings(1024, 64, 1), readings(256, 64, 2));
  const double test_loss = trainer.test(readings(256, 64, 3));
  std::cout << "first epoch's loss " << first_epoch << ", test loss " << test_loss << "\n";
  return test_loss < 0.1 * first_epoch ? 0 : 1;
}
