#include "weights_files.hpp"

#include "accuracy.hpp"
#include "exit_status.hpp"
#include "run_setup.hpp"
#include "sha256.hpp"

#include <spdlog/spdlog.h>

namespace train {

namespace fs = std::filesystem;

std::string initialize_from(const std::string& path, torch::nn::Module& model) {
  try {
    torchbus::load_state_dict(model, path);
  } catch (const torchbus::CheckpointError& error) {
    throw UsageError(std::string("--init-from: ") + error.what());
  }
  return file_sha256(path);
}

int validate_weights(torchbus::Trainer& trainer, const torch::nn::Module& model,
                     torchbus::BatchSource& validation, const std::string& weights,
                     const JsonObject& run_options, const std::string& identity, int world_size,
                     const std::optional<fs::path>& summary_file) {
  const double loss = trainer.evaluate_source(validation);
  const auto& state = trainer.state();
  const double accuracy = latest_or_nan(state.metrics, "val_accuracy");
  torchbus::logger()->info("validated {}: val loss {:.4f} accuracy {:.3f}", weights, loss,
                           accuracy);
  if (!summary_file) return 0;
  const JsonObject summary = {{"options", run_options},
                              {"identity", identity},
                              {"world_size", world_size},
                              {"validated", weights},
                              {"steps", state.step},
                              {"final_val_loss", loss},
                              {"final_val_accuracy", accuracy},
                              {"stop_reason", "validated"},
                              {"exit_code", 0},
                              {"params_sha256", parameters_sha256(model)}};
  const auto text = summary.dump(2, ' ', false, JsonObject::error_handler_t::replace);
  torchbus::write_file_atomically(*summary_file, text + "\n");
  torchbus::logger()->info("summary in {}", summary_file->string());
  return 0;
}

ValidationResult validate_final_weights(const Flags& flags, const torch::nn::Sequential& model,
                                        torchbus::BatchSource& validation,
                                        const std::shared_ptr<torchbus::ProcessGroup>& group,
                                        const c10::Device& device) {
  auto optimizer = make_optimizer(flags, model->parameters());  // a trainer needs one; unused
  torchbus::Trainer trainer(model, *optimizer, loss_of(flags),
                            trainer_options(flags, device).use_registered_subscriptions(false));
  trainer.set_process_group(group);
  add_task_metrics(trainer, flags);
  ValidationResult result;
  result.loss = trainer.evaluate_source(validation);
  result.accuracy = latest_or_nan(trainer.state().metrics, "val_accuracy");
  return result;
}

}  // namespace train
