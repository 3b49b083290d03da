#include <torch/nn/module.h>
#include <torchbus/callbacks/model_summary.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/state.hpp>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <iomanip>
#include <sstream>
#include <string_view>
#include <unordered_set>
#include <utility>

namespace torchbus {
namespace {

/// Elements of the distinct tensors among `tensors` (a shared one counted once): all, those that
/// require a gradient, and their bytes.
struct Count {
  std::int64_t elements = 0;
  std::int64_t trainable = 0;
  std::int64_t bytes = 0;
};

Count count_of(const std::vector<at::Tensor>& tensors) {
  Count count;
  std::unordered_set<const void*> seen;
  for (const auto& tensor : tensors) {
    if (!tensor.defined() || !seen.insert(tensor.unsafeGetTensorImpl()).second) continue;
    count.elements += tensor.numel();
    if (tensor.requires_grad()) count.trainable += tensor.numel();
    count.bytes += tensor.numel() * static_cast<std::int64_t>(tensor.element_size());
  }
  return count;
}

/// `module`'s type as users write it: LibTorch's name of it (its class, by RTTI) without the
/// "Impl" of a ModuleHolder's implementation, e.g. "torch::nn::Linear".
std::string type_of(const torch::nn::Module& module) {
  constexpr std::string_view kImpl = "Impl";
  const auto& name = module.name();
  if (name.size() > kImpl.size() &&
      name.compare(name.size() - kImpl.size(), kImpl.size(), kImpl) == 0) {
    return name.substr(0, name.size() - kImpl.size());
  }
  return name;
}

void add_rows(const torch::nn::Module& module, const std::string& path, int depth, int max_depth,
              std::vector<ModelSummaryRow>& rows) {
  if (max_depth >= 0 && depth > max_depth) return;
  for (const auto& child : module.named_children()) {
    const auto& submodule = *child.value();
    const auto count = count_of(submodule.parameters());
    ModelSummaryRow row;
    row.name = path.empty() ? child.key() : path + "." + child.key();
    row.type = type_of(submodule);
    row.depth = depth;
    row.parameters = count.elements;
    row.trainable_parameters = count.trainable;
    row.training = submodule.is_training();
    rows.push_back(row);
    add_rows(submodule, row.name, depth + 1, max_depth, rows);
  }
}

}  // namespace

ModelSummaryTable summarize_model(const torch::nn::Module& model, int max_depth) {
  TORCHBUS_CHECK(max_depth >= -1, ConfigError,
                 "summarize_model: max_depth must be >= -1 (-1: every "
                 "module, 0: the totals only), got ",
                 max_depth);
  ModelSummaryTable table;
  add_rows(model, "", 1, max_depth, table.rows);
  const auto parameters = count_of(model.parameters());
  table.total_parameters = parameters.elements;
  table.trainable_parameters = parameters.trainable;
  table.parameter_bytes = parameters.bytes;
  table.buffer_bytes = count_of(model.buffers()).bytes;
  return table;
}

std::string format_model_summary(const ModelSummaryTable& table) {
  // Column widths: the widest cell of each, the header's included.
  std::size_t name_width = 4;  // "Name"
  std::size_t type_width = 4;  // "Type"
  for (const auto& row : table.rows) {
    name_width =
        std::max(name_width, row.name.size() + 2 * static_cast<std::size_t>(row.depth - 1));
    type_width = std::max(type_width, row.type.size());
  }
  std::ostringstream text;
  text << std::left << std::setw(static_cast<int>(name_width)) << "Name"
       << "  " << std::setw(static_cast<int>(type_width)) << "Type"
       << "  " << std::right << std::setw(12) << "Parameters"
       << "  " << std::setw(12) << "Trainable"
       << "  Mode\n";
  for (const auto& row : table.rows) {
    text << std::left << std::setw(static_cast<int>(name_width))
         << std::string(2 * static_cast<std::size_t>(row.depth - 1), ' ') + row.name << "  "
         << std::setw(static_cast<int>(type_width)) << row.type << "  " << std::right
         << std::setw(12) << row.parameters << "  " << std::setw(12) << row.trainable_parameters
         << "  " << (row.training ? "train" : "eval") << '\n';
  }
  text << "Trainable parameters: " << table.trainable_parameters << '\n'
       << "Non-trainable parameters: " << table.total_parameters - table.trainable_parameters
       << '\n'
       << "Total parameters: " << table.total_parameters << " (" << table.parameter_bytes << " B)\n"
       << "Buffers: " << table.buffer_bytes << " B";
  return text.str();
}

void ModelSummaryOptions::validate() const {
  TORCHBUS_CHECK(!name().empty(), ConfigError, "ModelSummary: name is empty");
  TORCHBUS_CHECK(max_depth() >= -1, ConfigError,
                 "ModelSummary: max_depth must be >= -1 (-1: every module, 0: the totals only), "
                 "got ",
                 max_depth());
}

ModelSummary::ModelSummary(ModelSummaryOptions options)
    : Callback(options.name()), options_(std::move(options)) {
  set_role(Role::Report).run_during(RunStage::FastDevRun);
  options_.validate();
}

void ModelSummary::on_action_start(State& state) {
  if (state.action != Action::Fit || state.rank != 0 || state.model == nullptr) return;
  summary_ = summarize_model(*state.model, options_.max_depth());
  logger()->info("model summary:\n{}", format_model_summary(summary_));
}

}  // namespace torchbus
