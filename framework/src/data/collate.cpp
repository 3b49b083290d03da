#include <torch/torch.h>
#include <torchbus/collate.hpp>
#include <torchbus/error.hpp>

#include <algorithm>

namespace torchbus {

CollateOptions& CollateOptions::pad(std::string name, double value) {
  TORCHBUS_CHECK(listed_.count(name) == 0, ConfigError, "CollateOptions: '", name,
                 "' is kept as a list already; a field is padded or listed, not both");
  padded_[std::move(name)] = value;
  return *this;
}

CollateOptions& CollateOptions::as_list(std::string name) {
  TORCHBUS_CHECK(padded_.count(name) == 0, ConfigError, "CollateOptions: '", name,
                 "' is padded already; a field is padded or listed, not both");
  listed_.insert(std::move(name));
  return *this;
}

namespace {

/// The tensor fields of `sample`: "data" and "target" when defined, then its named tensors.
std::vector<std::string> tensor_fields(const Batch& sample) {
  std::vector<std::string> names;
  if (sample.data.defined()) names.emplace_back("data");
  if (sample.target.defined()) names.emplace_back("target");
  for (const auto& [name, tensor] : sample.tensors()) names.push_back(name);
  return names;
}

std::vector<std::string> list_fields(const Batch& sample) {
  std::vector<std::string> names;
  for (const auto& [name, list] : sample.lists()) names.push_back(name);
  return names;
}

/// Every sample has the fields of the first, and no other.
void check_same_fields(const std::vector<Batch>& samples) {
  const auto tensors = tensor_fields(samples.front());
  const auto lists = list_fields(samples.front());
  for (std::size_t i = 1; i < samples.size(); ++i) {
    TORCHBUS_CHECK(tensor_fields(samples[i]) == tensors && list_fields(samples[i]) == lists,
                   DataError, "collate: sample ", i, " has the fields ", samples[i].field_names(),
                   "; sample 0 has ", samples.front().field_names(),
                   " (every sample needs the same fields)");
  }
}

/// The tensor `name` of every sample, padded with `value` to the largest size of each dimension.
std::vector<at::Tensor> padded(const std::vector<at::Tensor>& tensors, const std::string& name,
                               double value) {
  const auto dims = tensors.front().dim();
  std::vector<std::int64_t> largest(tensors.front().sizes().begin(), tensors.front().sizes().end());
  for (std::size_t i = 1; i < tensors.size(); ++i) {
    TORCHBUS_CHECK(tensors[i].dim() == dims, DataError, "collate: field '", name, "' of sample ", i,
                   " has shape ", tensors[i].sizes(), ", sample 0's ", tensors.front().sizes(),
                   "; padding needs as many dimensions in every sample");
    for (std::int64_t d = 0; d < dims; ++d) largest[d] = std::max(largest[d], tensors[i].size(d));
  }
  std::vector<at::Tensor> out;
  out.reserve(tensors.size());
  for (const auto& tensor : tensors) {
    if (tensor.sizes().vec() == largest) {
      out.push_back(tensor);
      continue;
    }
    auto grown = torch::full(largest, value, tensor.options());
    auto view = grown;
    for (std::int64_t d = 0; d < dims; ++d) view = view.narrow(d, 0, tensor.size(d));
    view.copy_(tensor);
    out.push_back(std::move(grown));
  }
  return out;
}

/// The tensor `name` of every sample stacked, after checking that dtypes and shapes agree.
at::Tensor stacked(const std::vector<at::Tensor>& tensors, const std::string& name,
                   const CollateOptions& options) {
  for (std::size_t i = 1; i < tensors.size(); ++i) {
    TORCHBUS_CHECK(tensors[i].scalar_type() == tensors.front().scalar_type(), DataError,
                   "collate: field '", name, "' of sample ", i, " is ", tensors[i].scalar_type(),
                   ", sample 0's ", tensors.front().scalar_type(),
                   " (every sample's field needs one dtype)");
  }
  const auto pad = options.padded().find(name);
  if (pad != options.padded().end()) return torch::stack(padded(tensors, name, pad->second));
  for (std::size_t i = 1; i < tensors.size(); ++i) {
    TORCHBUS_CHECK(tensors[i].sizes() == tensors.front().sizes(), DataError, "collate: field '",
                   name, "' of sample ", i, " has shape ", tensors[i].sizes(), ", sample 0's ",
                   tensors.front().sizes(),
                   "; stacking needs equal shapes: pad it (CollateOptions().pad(\"", name,
                   "\", value)) or keep it as a list (CollateOptions().as_list(\"", name, "\"))");
  }
  return torch::stack(tensors);
}

}  // namespace

Batch collate(const std::vector<Batch>& samples, const CollateOptions& options) {
  TORCHBUS_CHECK(!samples.empty(), DataError, "collate: no samples (a batch needs one at least)");
  check_same_fields(samples);
  Batch batch;
  std::vector<at::Tensor> column;
  column.reserve(samples.size());
  for (const auto& name : tensor_fields(samples.front())) {
    column.clear();
    for (const auto& sample : samples) column.push_back(sample.get(name));
    if (options.listed().count(name) != 0) {
      TORCHBUS_CHECK(name != "data" && name != "target", DataError, "collate: '", name,
                     "' cannot be kept as a list: data and target are tensors of every batch");
      batch.set_list(name, column);
    } else {
      batch.set(name, stacked(column, name, options));
    }
  }
  for (const auto& name : list_fields(samples.front())) {
    std::vector<at::Tensor> entries;
    for (const auto& sample : samples) {
      const auto& list = sample.list(name);
      entries.insert(entries.end(), list.begin(), list.end());
    }
    batch.set_list(name, std::move(entries));
  }
  return batch;
}

}  // namespace torchbus
