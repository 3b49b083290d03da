#pragma once

/// \file
/// Phase models (private to torchbus_framework): the one module a trainer of optimizer phases
/// trains when phases bring models of their own (docs/trainer.md, "A model per phase").

#include <torchbus/optimizer_phase.hpp>

#include <memory>
#include <vector>

namespace torch::nn {
class Module;
}

namespace torchbus {

/// Throws ConfigError naming the first phase whose model cannot be trained: a null model, one
/// given to two phases or equal to `model` (the trainer's, may be null), a phase name that cannot
/// name a module (a '.', or "model" beside the trainer's model), or, without `model`, a phase
/// with no model.
void check_phase_models(const torch::nn::Module* model, const std::vector<OptimizerPhase>& phases);

/// The module the trainer trains: `model` itself when no phase has a model of its own; otherwise
/// one module holding `model` (when not null) as "model" and each phase's model under the
/// phase's name, so that its state_dict keys are `model.*`, `<phase>.*`.
std::shared_ptr<torch::nn::Module> trained_module(std::shared_ptr<torch::nn::Module> model,
                                                  const std::vector<OptimizerPhase>& phases);

}  // namespace torchbus
