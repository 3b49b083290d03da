#pragma once

/// \file
/// ModelSummary: each layer of the model with its type and parameters, logged when fit() starts
/// (Lightning's ModelSummary); `summarize_model` gives the same table to code of your own.

#include <torch/arg.h>
#include <torchbus/callback.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace torch::nn {
class Module;
}

namespace torchbus {

/// One module of a model summary.
struct ModelSummaryRow {
  std::string name;  ///< its path from the model, e.g. "encoder.0"
  /// Its type: LibTorch's Module::name() without a trailing "Impl", e.g. "torch::nn::Linear"
  std::string type;
  int depth = 1;  ///< 1 for a child of the model, 2 for a grandchild, ...
  /// Elements of its parameters, its submodules' included (a parameter it shares with another
  /// module counts in both rows, once in the totals).
  std::int64_t parameters = 0;
  std::int64_t trainable_parameters = 0;  ///< of those, the ones that require a gradient
  bool training = true;                   ///< whether it is in training mode (else eval)
};

/// A model's layers down to a depth, and its totals.
struct ModelSummaryTable {
  std::vector<ModelSummaryRow> rows;      ///< in the model's order, each module before its children
  std::int64_t total_parameters = 0;      ///< elements of every distinct parameter
  std::int64_t trainable_parameters = 0;  ///< of those, the ones that require a gradient
  std::int64_t parameter_bytes = 0;       ///< what they take, each at its own element size
  std::int64_t buffer_bytes = 0;          ///< what the model's buffers take (batch norm statistics)
};

/// The modules of `model` down to `max_depth` (1: its children, as Lightning's default; -1: every
/// module; 0: the totals only), with the totals of the whole model.
ModelSummaryTable summarize_model(const torch::nn::Module& model, int max_depth = 1);

/// `table` as aligned text: a header, a line per row (name indented by depth, type, parameters,
/// trainable ones, mode), then the totals, e.g. "Total parameters: 67 (268 B)".
std::string format_model_summary(const ModelSummaryTable& table);

/// What ModelSummary shows, e.g. `ModelSummaryOptions().max_depth(2)`.
struct ModelSummaryOptions {
  /// The callback's name, unique in a trainer.
  TORCH_ARG(std::string, name) = "model_summary";
  /// The deepest modules shown (see summarize_model); >= -1.
  TORCH_ARG(int, max_depth) = 1;

 public:
  /// Throws ConfigError naming the first option that is out of range.
  void validate() const;
};

/// At the ActionStart of every fit() on rank 0 (a resume included), summarizes state.model and
/// logs the table at info level; `summary()` keeps the last one. Role::Report, in fast_dev_run
/// too (it writes no file).
class ModelSummary : public Callback {
 public:
  /// A ModelSummary named by its options; throws ConfigError for invalid options.
  explicit ModelSummary(ModelSummaryOptions options = {});

  /// The options it was built with.
  const ModelSummaryOptions& options() const noexcept { return options_; }
  /// The summary of the last fit() it saw start (empty before).
  const ModelSummaryTable& summary() const noexcept { return summary_; }

  /// Summarizes and logs the model at the start of a fit.
  void on_action_start(State& state) override;

 private:
  ModelSummaryOptions options_;
  ModelSummaryTable summary_;
};

}  // namespace torchbus
