#include <torch/nn/module.h>
#include <torchbus/error.hpp>

#include "trainer/phase_models.hpp"

#include <algorithm>
#include <unordered_map>

namespace torchbus {
namespace {

/// The container of the trainer's model and the phases' models.
class PhaseModels : public torch::nn::Module {
 public:
  PhaseModels() : torch::nn::Module("torchbus::PhaseModels") {}
  using torch::nn::Module::register_module;
};

/// The child name of the trainer's model beside the phases' models.
constexpr const char* kModelName = "model";

}  // namespace

void check_phase_models(const torch::nn::Module* model, const std::vector<OptimizerPhase>& phases) {
  std::unordered_map<const torch::nn::Module*, std::string> owner;  // model -> its phase
  for (const auto& phase : phases) {
    const auto& name = phase.name();
    if (!phase.has_model()) {
      TORCHBUS_CHECK(model != nullptr, ConfigError, "optimizer phase '", name,
                     "' has no model; a Trainer built from optimizer phases alone needs each "
                     "phase's model (OptimizerPhase::model), or a model of its own");
      continue;
    }
    const auto* phase_model = phase.model().get();
    TORCHBUS_CHECK(phase_model != nullptr, ConfigError, "optimizer phase '", name,
                   "' was given a null model; expected a module, or no model() call");
    TORCHBUS_CHECK(phase_model != model, ConfigError, "optimizer phase '", name,
                   "' was given the trainer's model as its own; give the phase its own module, "
                   "or no model() call to train parts of the trainer's model");
    const auto [found, inserted] = owner.emplace(phase_model, name);
    TORCHBUS_CHECK(inserted, ConfigError, "optimizer phases '", found->second, "' and '", name,
                   "' were given the same model; each phase model belongs to one phase");
    TORCHBUS_CHECK(name.find('.') == std::string::npos, ConfigError, "optimizer phase '", name,
                   "' has a model, which is kept under the phase's name: the name cannot "
                   "contain '.'");
    TORCHBUS_CHECK(model == nullptr || name != kModelName, ConfigError,
                   "optimizer phase 'model' has a model, which would be kept under the key of the "
                   "trainer's model ('model'); rename the phase");
  }
}

std::shared_ptr<torch::nn::Module> trained_module(std::shared_ptr<torch::nn::Module> model,
                                                  const std::vector<OptimizerPhase>& phases) {
  if (std::none_of(phases.begin(), phases.end(),
                   [](const OptimizerPhase& phase) { return phase.has_model(); })) {
    return model;
  }
  auto composed = std::make_shared<PhaseModels>();
  if (model != nullptr) composed->register_module(kModelName, std::move(model));
  for (const auto& phase : phases) {
    if (phase.has_model()) composed->register_module(phase.name(), phase.model());
  }
  return composed;
}

}  // namespace torchbus
