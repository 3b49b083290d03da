#pragma once

// The weights of a model as one list, for callbacks that keep or swap copies of them (EMA,
// EarlyStopping's restore_best_weights). Private to the callbacks library.

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <torchbus/placement.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace torch::nn {
class Module;
}

namespace torchbus {
struct State;
}

namespace torchbus::detail {

/// The model's parameters, then (with_buffers) its buffers, in `parameters()`/`buffers()` order.
std::vector<at::Tensor> model_weights(torch::nn::Module& model, bool with_buffers);

/// What a weight-averaging callback with the option `phase` averages: without a phase, the
/// trainer's model (state.model) as model_weights; with one, that optimizer phase's model as
/// model_weights, or, when the phase has no model of its own, the parameters its optimizer trains.
/// Throws ConfigError naming `owner` (e.g. "EMA 'ema'") for a phase the trainer does not have.
std::vector<at::Tensor> averaged_weights(const State& state, const std::string& phase,
                                         bool with_buffers, const std::string& owner);

/// Why `kept` cannot be copied into `weights` (their counts, a shape or a dtype differ), or "" when
/// it can; `kept_name` says what `kept` is, e.g. "the checkpoint's averages".
std::string weights_mismatch(const std::vector<at::Tensor>& kept,
                             const std::vector<at::Tensor>& weights, const std::string& kept_name);

/// Where a callback that changes the weights when fit() ends subscribes at ActionEnd: after every
/// checkpoint and the report, so that the run's last checkpoint holds the weights a resume needs.
/// Named "<owner>:<what>" for describe().
Placement after_final_save(const std::string& owner, std::string_view what);

/// Copies of `weights`, as a checkpoint holds them: what later steps change in place stays as it
/// was saved (see Callback::state_is_snapshot).
c10::List<at::Tensor> copies_of(const std::vector<at::Tensor>& weights);

/// Copies `from[i]` into `to[i]` without recording gradients (same counts and shapes).
void copy_weights(const std::vector<at::Tensor>& from, const std::vector<at::Tensor>& to);

}  // namespace torchbus::detail
