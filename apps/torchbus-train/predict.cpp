#include "predict.hpp"

#include "exit_status.hpp"
#include "run_setup.hpp"
#include "shuffled_batches.hpp"
#include "stop_signals.hpp"

#include <spdlog/spdlog.h>
#include <torchbus/callbacks/prediction_writer.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/torchbus.hpp>

#include <filesystem>
#include <string>
#include <vector>

namespace train {

int predict(const Flags& flags, const torch::nn::Sequential& model, const HeldOut& data,
            const std::shared_ptr<torchbus::ProcessGroup>& group, const c10::Device& device) {
  namespace fs = std::filesystem;
  auto optimizer = make_optimizer(flags, model->parameters());  // a trainer needs one; unused
  torchbus::Trainer trainer(model, *optimizer, loss_of(flags),
                            trainer_options(flags, device).use_registered_subscriptions(false));
  trainer.set_process_group(group);
  const bool regression = flags.task == "regression";
  trainer.set_predict_step([regression](torchbus::Trainer& self, torchbus::Batch& batch) {
    const auto predicted = self.forward(batch.data);
    torchbus::Output output;
    if (regression) {  // the value, and the true one
      output.set("prediction", predicted.squeeze(1));
      if (batch.target.defined()) output.set("label", batch.target.squeeze(1));
      return output;
    }
    output.set("class", predicted.argmax(1)).set("probability", predicted.softmax(1));
    if (batch.target.defined()) output.set("label", batch.target);
    return output;
  });
  // A stop signal ends the prediction before its next batch, and nothing is written.
  trainer.on(torchbus::Event::PredictBatchStart, [](torchbus::State&) {
    if (const int signal = received_stop_signal()) {
      throw StartupExit(kExitSignalBase + signal,
                        signal_name(signal) + " during the prediction: stopped, nothing written");
    }
  });
  const bool labelled = data.targets.defined();
  std::vector<std::string> outputs = regression ? std::vector<std::string>{"prediction"}
                                                : std::vector<std::string>{"class", "probability"};
  if (labelled) outputs.emplace_back("label");
  const auto path = fs::path(flags.out) / "predictions.csv";
  trainer.add(std::make_shared<torchbus::PredictionWriter>(
      torchbus::PredictionWriterOptions(path).outputs(outputs)));
  // Each rank its rows r, r + W, ...: as many on every rank, the last ones repeating the first,
  // which the writer drops by their index.
  ShuffledBatches batches(data.inputs, data.targets, flags.batch_size, /*shuffle=*/false,
                          flags.seed, {group->rank(), group->world_size(), /*equal_sizes=*/true},
                          /*pin_memory=*/device.is_cuda(), /*indexed=*/true);
  torchbus::logger()->info("predicting {} samples of {} on {} rank(s)", data.inputs.size(0),
                           data.description, group->world_size());
  trainer.predict_source(batches, /*keep=*/false);
  if (group->rank() == 0) {
    torchbus::logger()->info("predictions of {} samples in {}", data.inputs.size(0), path.string());
  }
  return 0;
}

}  // namespace train
