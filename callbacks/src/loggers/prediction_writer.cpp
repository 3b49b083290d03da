#include <spdlog/fmt/fmt.h>
#include <torch/torch.h>
#include <torchbus/atomic_file.hpp>
#include <torchbus/callbacks/logged_values.hpp>
#include <torchbus/callbacks/prediction_writer.hpp>
#include <torchbus/distributed.hpp>
#include <torchbus/error.hpp>
#include <torchbus/state.hpp>

#include "support/csv_field.hpp"

#include <algorithm>

namespace torchbus {
namespace {

namespace fs = std::filesystem;

/// How the writer's messages name it: "PredictionWriter '<name>'".
std::string who(const PredictionWriter& writer) {
  return "PredictionWriter '" + writer.name() + "'";
}

/// `tensor` of `rows` rows grown to `size` rows with zeros (the rows a rank lacks for a gather).
at::Tensor padded_to(const at::Tensor& tensor, std::int64_t size) {
  if (tensor.size(0) == size) return tensor;
  auto shape = tensor.sizes().vec();
  shape[0] = size - tensor.size(0);
  return torch::cat({tensor, torch::zeros(shape, tensor.options())});
}

/// Every rank's rows of `tensor` in rank order (`counts`: each rank's rows).
at::Tensor gathered(ProcessGroup& group, const at::Tensor& tensor,
                    const std::vector<std::int64_t>& counts) {
  const auto most = *std::max_element(counts.begin(), counts.end());
  const auto all = group.all_gather(padded_to(tensor.contiguous(), most));
  std::vector<at::Tensor> parts;
  for (std::size_t rank = 0; rank < counts.size(); ++rank) {
    parts.push_back(all.narrow(0, static_cast<std::int64_t>(rank) * most, counts[rank]));
  }
  return torch::cat(parts);
}

/// A column's values as [rows, width] contiguous on the CPU: int64 for integers and booleans,
/// float for tensors of 32 bits or fewer (written in float's shortest exact form), else double.
struct CsvColumn {
  at::Tensor values;
  std::int64_t width = 1;

  /// The value at `row`, `k` in the shortest text Python's float() (or int()) reads back exactly.
  std::string cell(std::int64_t row, std::int64_t k) const {
    const auto at = row * width + k;
    switch (values.scalar_type()) {
      case at::kLong:
        return std::to_string(values.data_ptr<std::int64_t>()[at]);
      case at::kFloat:
        return fmt::format("{}", values.data_ptr<float>()[at]);
      default:
        return fmt::format("{}", values.data_ptr<double>()[at]);
    }
  }
};

CsvColumn csv_column(const at::Tensor& tensor) {
  const auto type = tensor.scalar_type();
  const auto as = at::isIntegralType(type, /*includeBool=*/true) ? at::kLong
                  : at::elementSize(type) <= 4                   ? at::kFloat
                                                                 : at::kDouble;
  const auto values = tensor.to(as).reshape({tensor.size(0), -1}).contiguous();
  return {values, values.size(1)};
}

}  // namespace

void PredictionWriterOptions::validate() const {
  TORCHBUS_CHECK(!name().empty(), ConfigError, "PredictionWriter: name is empty");
  TORCHBUS_CHECK(!path().empty(), ConfigError,
                 "PredictionWriter: path is empty; give the file to write, e.g. "
                 "\"predictions.csv\" or \"predictions.pt\"");
  TORCHBUS_CHECK(
      !outputs().empty(), ConfigError,
      "PredictionWriter: outputs is empty; name the tensors to write, e.g. {\"output\"}");
  for (const auto& output : outputs()) {
    TORCHBUS_CHECK(!output.empty() && output != index(), ConfigError,
                   "PredictionWriter: outputs holds '", output,
                   "'; expected the names of tensors other than the index '", index(), "'");
  }
}

PredictionWriter::PredictionWriter(PredictionWriterOptions options)
    : Callback(options.name()), options_(std::move(options)) {
  set_role(Role::Logger);
  // The predictions are what a predict run is for: a writer that cannot write fails the run
  // rather than being disabled as a logger is.
  set_error_policy(ErrorPolicy::propagate());
  options_.validate();
}

PredictionWriter::~PredictionWriter() = default;

bool PredictionWriter::csv() const {
  return options_.path().extension() == ".csv";
}

void PredictionWriter::on_predict_start(State& state) {
  batches_.clear();
  written_.clear();
  file_.reset();
  batch_files_ = 0;
  TORCHBUS_CHECK(options_.write_interval() == PredictionWriteInterval::Run || state.world_size == 1,
                 ConfigError, who(*this),
                 ": writes per batch follow one rank's shard, and there are ", state.world_size,
                 " ranks; write once per run (PredictionWriteInterval::Run) to gather the "
                 "predictions in the input's order");
  // Per batch (one rank): the directory now, and the CSV file's rows from the first batch on;
  // per run, rank 0 creates it when it writes, after the ranks' last collective.
  if (options_.write_interval() == PredictionWriteInterval::Batch) {
    create_directory();
    if (csv()) file_ = std::make_unique<AtomicFile>(options_.path(), Durability::kProcessCrash);
  }
}

void PredictionWriter::create_directory() const {
  const auto directory = options_.path().parent_path();
  std::error_code error;
  if (!directory.empty()) fs::create_directories(directory, error);
  TORCHBUS_CHECK(!error, Error, who(*this), ": cannot create the directory ", directory.string(),
                 ": ", error.message());
}

NamedTensors PredictionWriter::take(const State& state) const {
  NamedTensors tensors;
  const auto* index = find_step_tensor(state, options_.index());
  TORCHBUS_CHECK(index != nullptr || state.world_size == 1, DataError, who(*this), ": on ",
                 state.world_size, " ranks each batch needs its samples' indices in the field '",
                 options_.index(), "' (present: ", detail::join_or_none(step_tensor_names(state)),
                 "), to write the predictions in the input's order; wrap the dataset in "
                 "torchbus::IndexedDataset");
  std::int64_t rows = -1;
  const auto add = [&](const std::string& name, const at::Tensor& tensor) {
    TORCHBUS_CHECK(tensor.dim() >= 1, DataError, who(*this), ": '", name,
                   "' is a scalar; expected a tensor of one row per sample [N, ...]");
    TORCHBUS_CHECK(!csv() || tensor.dim() <= 2, DataError, who(*this), ": '", name, "' has shape ",
                   tensor.sizes(),
                   "; a CSV file takes [N] or [N, K] (write a .pt file for other shapes)");
    TORCHBUS_CHECK(rows < 0 || tensor.size(0) == rows, DataError, who(*this), ": '", name, "' has ",
                   tensor.size(0), " rows (shape ", tensor.sizes(), "), '", tensors.front().first,
                   "' ", rows, "; expected one row per sample in each");
    rows = tensor.size(0);
    // A copy also of a CPU tensor: a step may return views of buffers it reuses.
    const auto host = tensor.is_cpu() ? tensor.detach().clone() : tensor.detach().cpu();
    tensors.emplace_back(name, host.contiguous());
  };
  if (index != nullptr) add(options_.index(), index->reshape({-1}).to(at::kLong));
  for (const auto& name : options_.outputs()) {
    const auto* tensor = find_step_tensor(state, name);
    TORCHBUS_CHECK(tensor != nullptr, DataError, who(*this), ": no tensor '", name,
                   "' at PredictBatchEnd (predict batch ", state.predict_batch,
                   "); present: ", detail::join_or_none(step_tensor_names(state)));
    add(name, *tensor);
  }
  return tensors;
}

void PredictionWriter::on_predict_batch_end(State& state) {
  if (state.cancelled || state.error) return;  // no predictions, or the run is failing
  auto tensors = take(state);
  if (options_.write_interval() == PredictionWriteInterval::Run) {
    batches_.push_back(std::move(tensors));
    return;
  }
  if (csv()) {
    write_csv_rows(tensors, /*header=*/batch_files_++ == 0);
    return;
  }
  const auto& path = options_.path();
  const auto batch_path =
      path.parent_path() /
      fmt::format("{}_{}{}", path.stem().string(), batch_files_++, path.extension().string());
  write_file_atomically(batch_path, state_dict_bytes(tensors), Durability::kProcessCrash);
  written_ = std::move(tensors);
}

void PredictionWriter::on_predict_end(State& state) {
  if (state.error) {
    file_.reset();  // nothing half-written: the path keeps what it had
    return;
  }
  if (options_.write_interval() == PredictionWriteInterval::Batch) {
    if (file_) file_->commit();
    file_.reset();
    return;
  }
  // Every batch's tensors, one per name, in batch order.
  NamedTensors columns;
  if (!batches_.empty()) {
    for (std::size_t i = 0; i < batches_.front().size(); ++i) {
      std::vector<at::Tensor> parts;
      for (const auto& batch : batches_) parts.push_back(batch[i].second);
      columns.emplace_back(batches_.front()[i].first, torch::cat(parts));
    }
  }
  batches_.clear();
  if (state.world_size > 1 && state.process_group != nullptr) {
    auto& group = *state.process_group;
    // Every rank learns every rank's rows first, so that all stop alike when one has none.
    const auto counts_tensor = group.all_gather(torch::tensor(
        {columns.empty() ? std::int64_t{0} : columns.front().second.size(0)}, at::kLong));
    std::vector<std::int64_t> counts(
        counts_tensor.data_ptr<std::int64_t>(),
        counts_tensor.data_ptr<std::int64_t>() + counts_tensor.numel());
    const auto empty = std::find(counts.begin(), counts.end(), 0);
    TORCHBUS_CHECK(empty == counts.end(), DataError, who(*this), ": rank ", empty - counts.begin(),
                   " predicted no sample (every batch cancelled, or no batch); every rank needs "
                   "a shard of the predict data");
    for (auto& [name, tensor] : columns) tensor = gathered(group, tensor, counts);
  }
  if (state.rank != 0) return;
  create_directory();
  const bool indexed = !columns.empty() && columns.front().first == options_.index();
  if (indexed) {
    // In the input's order; the first of repeated indices kept (a sampler's padding).
    const auto& index = columns.front().second;
    const auto order = std::get<1>(index.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
    const auto sorted = index.index_select(0, order);
    auto keep = torch::ones({sorted.size(0)}, at::kBool);
    if (sorted.size(0) > 1)
      keep.narrow(0, 1, sorted.size(0) - 1).copy_(sorted.slice(0, 1).ne(sorted.slice(0, 0, -1)));
    const auto rows = order.masked_select(keep);
    for (auto& [name, tensor] : columns) tensor = tensor.index_select(0, rows);
  }
  written_ = columns;
  if (csv()) {
    file_ = std::make_unique<AtomicFile>(options_.path(), Durability::kProcessCrash);
    write_csv_rows(columns, /*header=*/true);
    file_->commit();
    file_.reset();
  } else {
    write_file_atomically(options_.path(), state_dict_bytes(columns), Durability::kProcessCrash);
  }
}

void PredictionWriter::write_csv_rows(const NamedTensors& columns, bool header) {
  if (!file_) return;  // not rank 0
  std::string text;
  if (header) {
    std::string line;
    for (const auto& [name, tensor] : columns) {
      const auto add = [&line](const std::string& column) {
        line += (line.empty() ? "" : ",") + detail::csv_field(column);
      };
      if (tensor.dim() == 1) {
        add(name);
      } else {
        for (std::int64_t k = 0; k < tensor.size(1); ++k) add(fmt::format("{}_{}", name, k));
      }
    }
    text += line + '\n';
  }
  std::vector<CsvColumn> values;
  for (const auto& [name, tensor] : columns) values.push_back(csv_column(tensor));
  const auto rows = columns.empty() ? 0 : columns.front().second.size(0);
  for (std::int64_t row = 0; row < rows; ++row) {
    std::string line;
    for (const auto& column : values) {
      for (std::int64_t k = 0; k < column.width; ++k) {
        if (!line.empty()) line += ',';
        line += column.cell(row, k);
      }
    }
    text += line + '\n';
  }
  file_->write(text);
  written_ = columns;
}

}  // namespace torchbus
