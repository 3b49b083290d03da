#include "support/named_optimizer_phase.hpp"

#include <torchbus/error.hpp>
#include <torchbus/state.hpp>
#include <torchbus/trainer.hpp>

#include <vector>

namespace torchbus::detail {

const OptimizerPhase& named_optimizer_phase(const State& state, const std::string& phase,
                                            const std::string& owner) {
  std::vector<std::string> names;
  for (const auto& candidate : state.trainer().optimizer_phases()) {
    if (candidate.name() == phase) return candidate;
    if (!candidate.name().empty()) names.push_back(candidate.name());
  }
  throw ConfigError(concat(owner, ": the trainer has no optimizer phase named '", phase,
                           "'; its phases are ", join_or_none(names)));
}

}  // namespace torchbus::detail
