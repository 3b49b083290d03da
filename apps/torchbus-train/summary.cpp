#include "summary.hpp"

#include "sha256.hpp"

#include <torchbus/atomic_file.hpp>
#include <torchbus/bus.hpp>

#include <cmath>

#include <sstream>

namespace train {

std::vector<std::pair<std::string, std::string>> text_members(const JsonObject& object) {
  std::vector<std::pair<std::string, std::string>> texts;
  for (const auto& [key, value] : object.items()) {
    texts.emplace_back(key, value.is_string() ? value.get<std::string>() : value.dump());
  }
  return texts;
}

std::string parameters_sha256(const torch::nn::Module& module) {
  Sha256 hash;
  auto add_tensor = [&](const std::string& name, const at::Tensor& tensor) {
    const auto contiguous = tensor.detach().to(torch::kCPU).contiguous();
    std::ostringstream header;
    header << name << ' ' << contiguous.sizes() << ' ' << contiguous.dtype() << '\n';
    const auto text = header.str();
    hash.update(text.data(), text.size());
    hash.update(contiguous.data_ptr(), contiguous.numel() * contiguous.element_size());
  };
  for (const auto& item : module.named_parameters()) add_tensor(item.key(), item.value());
  for (const auto& item : module.named_buffers()) add_tensor(item.key(), item.value());
  return hash.hex_digest();
}

double latest_or_nan(const torchbus::MetricHistory& metrics, const std::string& name) {
  return metrics.contains(name) ? metrics.latest(name).value : std::nan("");
}

void write_training_summary(const std::filesystem::path& path, const TrainingSummary& summary,
                            torchbus::Trainer& trainer, const torch::nn::Module& model) {
  const auto& state = trainer.state();
  const auto all_samples = static_cast<double>(summary.samples) * summary.world_size;
  const auto seconds = summary.wall_seconds;
  JsonObject json = {{"options", summary.options},
                     {"identity", summary.identity},
                     {"world_size", summary.world_size},
                     {"segments", summary.segments},
                     {"device", summary.device},
                     {"steps", state.step},
                     {"epochs", state.epoch},
                     {"final_train_loss", latest_or_nan(state.metrics, "train_loss_epoch")},
                     {"final_train_accuracy", latest_or_nan(state.metrics, "train_accuracy")},
                     {"final_val_loss", summary.final_val_loss},
                     {"final_val_accuracy", summary.final_val_accuracy},
                     {"wall_seconds", seconds},
                     {"samples_per_second", seconds > 0 ? all_samples / seconds : 0.0},
                     {"stop_reason", summary.stop_reason},
                     {"exit_code", summary.exit_code},
                     {"params_sha256", parameters_sha256(model)}};
  if (summary.lr_found) json["lr_found"] = *summary.lr_found;
  if (summary.test_loss) {
    json["test_loss"] = *summary.test_loss;
    json["test_accuracy"] = summary.test_accuracy.value_or(std::nan(""));
  }
  // A regression's figures (RegressionMetrics'), of the last validation and of the test.
  for (const char* name : {"val_mse", "val_mae", "val_r2"}) {
    if (state.metrics.contains(name)) {
      json[std::string("final_") + name] = state.metrics.latest(name).value;
    }
  }
  for (const char* name : {"test_mse", "test_mae", "test_r2"}) {
    if (summary.test_loss && state.metrics.contains(name)) {
      json[name] = state.metrics.latest(name).value;
    }
  }
  auto failures = JsonObject::array();
  for (const auto& failure : trainer.bus().subscriber_failures()) {
    failures.push_back({{"subscriber", failure.subscriber},
                        {"event", failure.event},
                        {"first_error", failure.first_error},
                        {"failures", failure.failures},
                        {"disabled", failure.disabled}});
  }
  json["subscriber_failures"] = std::move(failures);
  const auto text = json.dump(2, ' ', false, JsonObject::error_handler_t::replace);
  torchbus::write_file_atomically(path, text + "\n");
}

}  // namespace train
