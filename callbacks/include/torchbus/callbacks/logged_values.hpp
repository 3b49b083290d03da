#pragma once

/// \file
/// What loggers read from State each time they log (the learning rate, tensors by name), and the
/// one warning a logger writes about a value it cannot read.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace at {
class Tensor;
}  // namespace at

namespace torchbus {

class Callback;
struct State;

/// Who writes a warning, shown as `<kind> '<name>'` (e.g. `CsvLogger 'csv_logger'`); the name is
/// read only when a warning is written.
struct WarningSource {
  std::string_view kind;     ///< the callback's class, e.g. "CsvLogger"
  const Callback& callback;  ///< whose name() follows the kind
};

/// The learning rate of the first parameter group of `state.optimizer`; nullopt when there is none
/// (no optimizer, no parameter group, options without a learning rate), after a warning the first
/// time (`warned` false; it is set): "<source>: cannot read the learning rate (<why>);
/// <consequence> (reported once)".
std::optional<double> learning_rate_or_warn_once(const State& state, bool& warned,
                                                 const WarningSource& source,
                                                 std::string_view consequence);

/// Whether `state` names the optimizer phase called `phase` (empty: the first; a trainer of one
/// optimizer has only that one): the phase whose train step or optimizer events run, the first
/// elsewhere (docs/trainer.md, "Several optimizers"). Built-ins that concern one optimizer act
/// only where it does.
bool names_optimizer_phase(const State& state, std::string_view phase) noexcept;

/// The learning rate a logger writes for the step `state.step` counts: `state.step_learning_rate()`
/// (the rate that step's update used, read by the trainer right before it), else, as when the
/// update was skipped, the optimizer's current rate (`learning_rate_or_warn_once`; once that
/// warned, nothing more is read).
class StepLearningRate {
 public:
  /// The rate of step `state.step`; nullopt, after one warning in all, when it cannot be read.
  std::optional<double> read(const State& state, const WarningSource& source,
                             std::string_view consequence);

 private:
  bool warned_ = false;
};

/// The tensor a built-in's option names, e.g. `TerminateOnNaNOptions::tensors`: the names of
/// tensor_names.hpp stand for the step's typed values (`kLoss`: `state.batch_loss()`,
/// `kStepLoss`: `state.step_loss()`, `kOutput`, `kTarget`: `state.batch_output()`,
/// `batch_target()`), any other name is a tensor of `state.tensors` (a named output among them),
/// else a tensor field of the current batch (`state.batch()`: "data", "labels", a mask). Null when
/// there is none or the typed value is undefined.
const at::Tensor* find_step_tensor(const State& state, std::string_view name) noexcept;

/// The names `find_step_tensor` finds now, for messages about a name it does not find.
std::vector<std::string> step_tensor_names(const State& state);

/// Warns that `source` cannot log tensor `name` at `state.step`, saying why: "<source>: no tensor
/// named 'x' at step 3 (present: a, b); <consequence> (reported once)" when `tensor` is null, else
/// that it is undefined, or its shape and whether it is complex, empty or not a scalar. Call it
/// once per name (the message says so).
void warn_tensor_not_logged(const State& state, const std::string& name, const at::Tensor* tensor,
                            const WarningSource& source, std::string_view consequence);

}  // namespace torchbus
