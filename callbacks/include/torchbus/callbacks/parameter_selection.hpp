#pragma once

/// \file
/// Parameters chosen by name: glob patterns over a module's dotted parameter names, to freeze and
/// unfreeze parts of a model or to give them learning rates of their own.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace torch::nn {
class Module;
}

namespace torchbus {

/// The parameters of `module` whose names (`named_parameters()`, e.g. "encoder.0.weight") match
/// `pattern`, a glob (fnmatch: `*` and `?` match any characters, dots included; "encoder.*");
/// throws ConfigError naming the pattern and some of the names when none matches.
std::vector<at::Tensor> parameters_matching(const torch::nn::Module& module,
                                            const std::string& pattern);

/// The parameters of `module` split by `patterns`: one list per pattern, a parameter in the first
/// whose pattern it matches, then one list of the rest (possibly empty), for optimizer parameter
/// groups of their own (docs/builtin-callbacks-techniques.md, "Fine-tuning"). Throws ConfigError
/// for a pattern that matches no parameter left to it.
std::vector<std::vector<at::Tensor>> split_parameters(const torch::nn::Module& module,
                                                      const std::vector<std::string>& patterns);

/// Sets `requires_grad` of the parameters `pattern` matches (see parameters_matching) to
/// `trainable`: false freezes them (no gradient, no update), true unfreezes them. Returns how many
/// parameters it set. Call it between actions, not during a fit: the trainer takes the parameters
/// that train (for clipping, loss scaling and the ranks' gradient sync) when fit() starts.
std::int64_t set_trainable(torch::nn::Module& module, const std::string& pattern, bool trainable);

}  // namespace torchbus
