#pragma once

/// \file
/// PredictionWriter: a predict run's outputs in a CSV file or a `torch.load`-readable file, one row
/// per input sample, in the input's order across ranks.

#include <torch/arg.h>
#include <torchbus/callback.hpp>
#include <torchbus/state_dict.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace torchbus {

class AtomicFile;

/// When a PredictionWriter writes.
enum class PredictionWriteInterval {
  /// Once, at PredictEnd: every rank's predictions gathered, ordered by index, repeats dropped.
  Run,
  /// At every PredictBatchEnd, the batch's rows (one process only: a rank's rows follow its shard).
  Batch,
};

/// Where and what a PredictionWriter writes, e.g.
/// `PredictionWriterOptions("predictions.csv").outputs({"class", "probability"})`.
struct PredictionWriterOptions {
  /// Writes to `path`: a `.csv` file (one column per value of each output), else a file of
  /// `torch.save`'s format holding a dict of tensors (`torch.load(path)` in Python).
  PredictionWriterOptions(std::filesystem::path path)  // NOLINT: a path converts to options
      : path_(std::move(path)) {}

  /// The callback's name, unique in a trainer.
  TORCH_ARG(std::string, name) = "prediction_writer";
  /// The file (missing parent directories are created before it is written).
  TORCH_ARG(std::filesystem::path, path);
  /// The tensors written, each [N] or [N, K] per batch of N samples for a CSV file (any shape
  /// [N, ...] for a tensor file): names find_step_tensor resolves at PredictBatchEnd (the main
  /// output "output", a named output, a field of the batch).
  TORCH_ARG(std::vector<std::string>, outputs) = {"output"};
  /// The batch field holding each sample's index in the data ([N], integers; see IndexedDataset):
  /// written first, and what orders the rows and drops the repeats a DistributedSampler pads with.
  /// Needed on several ranks; optional on one (without it, rows follow the batches).
  TORCH_ARG(std::string, index) = "index";
  /// When to write. Run: at PredictEnd, atomically. Batch: a CSV file's rows as each batch ends
  /// (the file in place at PredictEnd, atomically); a tensor file per batch, `<stem>_<k><ext>` for
  /// the k-th batch (0-based).
  TORCH_ARG(PredictionWriteInterval, write_interval) = PredictionWriteInterval::Run;

 public:
  /// Throws ConfigError naming the first option that is out of range.
  void validate() const;
};

/// Writes the predictions of Trainer::predict: at each PredictBatchEnd it takes the batch's
/// `outputs` (and `index`) to the CPU; at PredictEnd (Run) rank 0 gathers every rank's, orders
/// the rows by index, keeps the first of repeated indices and writes the file atomically, or
/// (Batch) each batch's rows are appended as it ends. CSV columns: `index`, then `<name>` for an
/// output [N], `<name>_<k>` for each column k of an output [N, K]. Numbers are written so that
/// Python's float() reads them back exactly. Runs on every rank (the gather needs them all);
/// only rank 0 writes. See docs/builtin-callbacks-loggers.md. Role::Logger, but its failures
/// propagate (a predict run whose predictions cannot be written fails).
class PredictionWriter : public Callback {
 public:
  /// A writer named by its options; throws ConfigError for invalid options.
  explicit PredictionWriter(PredictionWriterOptions options);
  ~PredictionWriter() override;

  /// The options it was built with.
  const PredictionWriterOptions& options() const noexcept { return options_; }
  /// The last predict run's predictions as written (on rank 0 with the Run interval): the index
  /// first when the batches had one, then each output, on the CPU, in the rows' order.
  const NamedTensors& predictions() const noexcept { return written_; }

  /// Checks the interval against the ranks; per batch, creates the file's directory.
  void on_predict_start(State& state) override;
  /// Takes the batch's tensors (Batch: writes its rows).
  void on_predict_batch_end(State& state) override;
  /// Gathers, orders and writes (Run); closes the file (Batch).
  void on_predict_end(State& state) override;

 private:
  /// The tensors to write, the index first when present: named, each [rows, ...] on the CPU.
  NamedTensors take(const State& state) const;
  void write_csv_rows(const NamedTensors& columns, bool header);
  void create_directory() const;  // the file's, with its missing parents
  bool csv() const;

  PredictionWriterOptions options_;
  std::vector<NamedTensors> batches_;  // the batches' tensors since PredictStart
  NamedTensors written_;
  std::unique_ptr<AtomicFile> file_;  // Batch interval: the file being written
  std::int64_t batch_files_ = 0;      // Batch interval, tensor files: files written so far
};

}  // namespace torchbus
