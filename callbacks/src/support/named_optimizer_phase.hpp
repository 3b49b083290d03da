#pragma once

// The optimizer phase a built-in names by its `phase` option (docs/trainer.md, "Several
// optimizers"). Private to the callbacks library.

#include <string>

namespace torchbus {
struct OptimizerPhase;
struct State;
}  // namespace torchbus

namespace torchbus::detail {

/// The optimizer phase called `phase` of the trainer running `state`; throws ConfigError, naming
/// `owner` (e.g. "EMA 'ema'") and the phases there are, when it has none.
const OptimizerPhase& named_optimizer_phase(const State& state, const std::string& phase,
                                            const std::string& owner);

}  // namespace torchbus::detail
