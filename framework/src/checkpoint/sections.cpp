// The checkpoint sections of the model, the optimizers, the run's options, the metric history, the
// filters' counts and the callbacks' states.

#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <torchbus/logging.hpp>
#include <torchbus/rng_state.hpp>

#include "bus/plumbing.hpp"
#include "checkpoint/optimizer_param_state.hpp"
#include "checkpoint/optimizer_state_copies.hpp"
#include "checkpoint/sections.hpp"
#include "interop/libtorch_compat.hpp"
#include "support/archive_bytes.hpp"
#include "support/type_name.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

namespace torchbus {

using detail::CheckpointReader;
using torch::serialize::InputArchive;
using torch::serialize::OutputArchive;

void write_nested(OutputArchive& archive, const std::string& key, OutputArchive& nested,
                  SectionBytes when) {
  if (when == SectionBytes::Deferred) {
    archive.write(key, nested);
    return;
  }
  std::string bytes;
  nested.save_to([&bytes](const void* data, std::size_t size) {
    bytes.append(static_cast<const char*>(data), size);
    return size;
  });
  auto tensor = torch::empty({static_cast<std::int64_t>(bytes.size())}, torch::kUInt8);
  std::memcpy(tensor.data_ptr(), bytes.data(), bytes.size());
  archive.write(key + "_bytes", tensor);
}

namespace {

// ---- the model's tensors ------------------------------------------------------------------------

/// Named tensors of one kind (parameters or buffers) as stored in a checkpoint.
struct NamedTensors {
  std::vector<std::string> names;
  std::vector<at::Tensor> tensors;
};

/// The tensors of `items`: themselves, or copies from `copies` when given.
NamedTensors collect(const torch::OrderedDict<std::string, at::Tensor>& items,
                     detail::TensorCopyPool* copies = nullptr) {
  NamedTensors out;
  for (const auto& item : items) {
    out.names.push_back(item.key());
    auto tensor = item.value().detach();
    out.tensors.push_back(copies != nullptr ? copies->copy_of(tensor) : std::move(tensor));
  }
  return out;
}

NamedTensors read_named_tensors(CheckpointReader& reader, const std::string& key) {
  NamedTensors out;
  out.names = detail::split_lines(reader.value(key + "_names").toStringRef());
  out.tensors = reader.value(key).toTensorVector();
  if (out.names.size() != out.tensors.size()) reader.fail("has a malformed '", key, "' entry");
  return out;
}

std::string describe(const at::Tensor& tensor) {
  return detail::concat(tensor.sizes(), " ", tensor.dtype());
}

/// Checks that `stored` holds exactly the tensors of `current`, with the same shapes and dtypes.
void validate_tensors(const CheckpointReader& reader, const char* kind, const NamedTensors& stored,
                      const NamedTensors& current) {
  for (std::size_t i = 0; i < current.names.size(); ++i) {
    const auto& name = current.names[i];
    const auto found = std::find(stored.names.begin(), stored.names.end(), name);
    if (found == stored.names.end()) {
      reader.fail("has no ", kind, " '", name, "' (the model's is ", describe(current.tensors[i]),
                  "); was it written for another model?");
    }
    const auto& tensor = stored.tensors[static_cast<std::size_t>(found - stored.names.begin())];
    if (tensor.sizes() != current.tensors[i].sizes() ||
        tensor.dtype() != current.tensors[i].dtype()) {
      reader.fail("holds ", kind, " '", name, "' as ", describe(tensor), "; the model's is ",
                  describe(current.tensors[i]));
    }
  }
  for (const auto& name : stored.names) {
    if (std::find(current.names.begin(), current.names.end(), name) == current.names.end()) {
      reader.fail("holds ", kind, " '", name, "' which the model does not have");
    }
  }
}

void copy_into(const NamedTensors& stored, const NamedTensors& current) {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < current.names.size(); ++i) {
    const auto found = std::find(stored.names.begin(), stored.names.end(), current.names[i]);
    current.tensors[i].copy_(
        stored.tensors[static_cast<std::size_t>(found - stored.names.begin())]);
  }
}

void save_model(OutputArchive& archive, const torch::nn::Module& module,
                detail::TensorCopyPool* copies) {
  for (const auto& [key, items] : {std::make_pair("parameters", module.named_parameters()),
                                   std::make_pair("buffers", module.named_buffers())}) {
    const auto tensors = collect(items, copies);
    archive.write(std::string(key) + "_names", c10::IValue(detail::join_lines(tensors.names)));
    archive.write(key, c10::IValue(c10::List<at::Tensor>(tensors.tensors)));
  }
}

}  // namespace

CheckpointSection model_section(torch::nn::Module& module) {
  return {"model",
          [&module](OutputArchive& archive, const SectionCapture& capture) {
            save_model(archive, module, capture.copies);
          },
          [&module](CheckpointReader& reader) -> CheckpointSection::Apply {
            std::vector<std::pair<NamedTensors, NamedTensors>> kinds;  // stored, the model's
            for (const auto& [key, kind, items] :
                 {std::tuple("parameters", "parameter", module.named_parameters()),
                  std::tuple("buffers", "buffer", module.named_buffers())}) {
              auto stored = read_named_tensors(reader, key);
              auto current = collect(items);
              validate_tensors(reader, kind, stored, current);
              kinds.emplace_back(std::move(stored), std::move(current));
            }
            return [kinds] {
              for (const auto& [stored, current] : kinds) copy_into(stored, current);
            };
          }};
}

namespace {

// ---- the optimizers -----------------------------------------------------------------------------

std::vector<std::int64_t> group_sizes(const torch::optim::Optimizer& optimizer) {
  std::vector<std::int64_t> sizes;
  for (const auto& group : optimizer.param_groups()) {
    sizes.push_back(static_cast<std::int64_t>(group.params().size()));
  }
  return sizes;
}

// The first phase's optimizer (the only one of a trainer of one optimizer) under "optimizer",
// "optimizer_type", "optimizer_groups"; phase i's under the same keys with "_i" appended.
void save_optimizer(OutputArchive& archive, torch::optim::Optimizer& optimizer, std::size_t index,
                    detail::TensorCopyPool* copies) {
  archive.write(detail::indexed_key("optimizer_type", index),
                c10::IValue(type_name(typeid(optimizer))));
  archive.write(detail::indexed_key("optimizer_groups", index),
                c10::IValue(group_sizes(optimizer)));
  const auto key = detail::indexed_key("optimizer", index);
  OutputArchive optimizer_archive;
  if (copies == nullptr) {
    optimizer.save(optimizer_archive);
    archive.write(key, optimizer_archive);
    return;
  }
  const detail::OptimizerStateCopies state_copies(optimizer, *copies);
  optimizer.save(optimizer_archive);
  // A state of a type whose tensors cannot be copied is serialized now, before training goes on.
  write_nested(archive, key, optimizer_archive,
               state_copies.copied() ? SectionBytes::Deferred : SectionBytes::Serialized);
}

InputArchive read_optimizer(CheckpointReader& reader, const OptimizerPhase& phase,
                            std::size_t index) {
  const auto& optimizer = *phase.optimizer();
  const auto which = phase.name().empty()
                         ? std::string("optimizer")
                         : detail::concat("optimizer of phase '", phase.name(), "'");
  const auto optimizer_type =
      reader.value(detail::indexed_key("optimizer_type", index)).toStringRef();
  if (optimizer_type != type_name(typeid(optimizer))) {
    reader.fail("was written with ", which, " ", optimizer_type, "; this trainer uses ",
                type_name(typeid(optimizer)));
  }
  const auto groups = reader.value(detail::indexed_key("optimizer_groups", index)).toIntVector();
  if (groups != group_sizes(optimizer)) {
    reader.fail("has ", which, " parameter groups of sizes ", c10::IntArrayRef(groups),
                "; this optimizer's are ", c10::IntArrayRef(group_sizes(optimizer)));
  }
  return reader.nested(detail::indexed_key("optimizer", index));
}

/// Loads `archives` into the phases' optimizers; if one fails, restores the states they all had
/// and rethrows.
void load_optimizers_or_restore(const std::vector<OptimizerPhase>& phases,
                                std::vector<InputArchive>& archives) {
  std::vector<std::string> previous;
  for (const auto& phase : phases) {
    OutputArchive backup;
    phase.optimizer()->save(backup);
    previous.push_back(detail::archive_bytes(backup));
  }
  try {
    for (std::size_t i = 0; i < phases.size(); ++i) {
      auto& optimizer = *phases[i].optimizer();
      detail::load_optimizer(optimizer, archives[i]);  // also a 1.13 archive under 2.x
      // LibTorch's load takes any tensors: a forged file's would fail at the first step.
      const auto mismatch = detail::param_state_mismatch(optimizer);
      TORCHBUS_CHECK(mismatch.empty(), Error, "its optimizer",
                     phases[i].name().empty() ? "" : " of phase '" + phases[i].name() + "'",
                     " state is not one the optimizer keeps: ", mismatch, " (damaged or forged)");
    }
  } catch (...) {
    for (std::size_t i = 0; i < phases.size(); ++i) {
      auto restore = detail::archive_of_bytes(previous[i]);
      phases[i].optimizer()->state().clear();  // loading adds the saved entries only
      detail::load_optimizer(*phases[i].optimizer(), restore);  // the options too
    }
    throw;
  }
}

}  // namespace

CheckpointSection optimizers_section(const std::vector<OptimizerPhase>& phases) {
  return {"optimizers",
          [&phases](OutputArchive& archive, const SectionCapture& capture) {
            for (std::size_t i = 0; i < phases.size(); ++i) {
              save_optimizer(archive, *phases[i].optimizer(), i, capture.copies);
            }
          },
          [&phases](CheckpointReader& reader) -> CheckpointSection::Apply {
            auto archives = std::make_shared<std::vector<InputArchive>>();
            for (std::size_t i = 0; i < phases.size(); ++i) {
              archives->push_back(read_optimizer(reader, phases[i], i));
            }
            return [&phases, archives] { load_optimizers_or_restore(phases, *archives); };
          },
          /*apply_may_fail=*/true};
}

// ---- the generators -----------------------------------------------------------------------------

CheckpointSection generators_section() {
  return {"generators",
          [](OutputArchive& archive, const SectionCapture&) {
            const auto generators = RngState::capture();
            archive.write("rng", generators.cpu());
            archive.write("cuda_rng", c10::IValue(c10::List<at::Tensor>(generators.cuda())));
          },
          [](CheckpointReader& reader) -> CheckpointSection::Apply {
            RngState generators(reader.tensor("rng"), reader.value("cuda_rng").toTensorVector());
            generators.check();  // before anything is applied
            return [generators = std::move(generators)] { generators.restore(); };
          }};
}

// ---- the run's options --------------------------------------------------------------------------

namespace {

/// The options a run used, as text for the record ("name=value" lines).
std::string describe_options(const TrainerOptions& options) {
  std::ostringstream out;
  out << "max_epochs=" << options.max_epochs() << "\nmax_steps=" << options.max_steps()
      << "\naccumulate_grad_batches=" << options.accumulate_grad_batches()
      << "\nval_every_n_epochs=" << options.val_every_n_epochs()
      << "\nval_every_n_steps=" << options.val_every_n_steps() << "\ndevice=" << options.device()
      << "\nseed=" << (options.seed() ? std::to_string(*options.seed()) : "none")
      << "\ngradient_clip_norm=" << options.gradient_clip_norm()
      << "\ngradient_clip_value=" << options.gradient_clip_value()
      << "\nset_grads_to_none=" << options.set_grads_to_none()
      << "\nprecision=" << to_string(options.precision())
      << "\nchannels_last=" << options.channels_last() << "\n";
  // Options added since the first checkpoint format, written when set.
  if (!options.accumulation_schedule().empty()) {
    out << "accumulation_schedule=";
    for (const auto& [epoch, k] : options.accumulation_schedule()) out << epoch << ':' << k << ' ';
    out << "\n";
  }
  if (!options.limit_train_batches().is_all()) {
    out << "limit_train_batches=" << options.limit_train_batches().to_string() << "\n";
  }
  if (!options.limit_val_batches().is_all()) {
    out << "limit_val_batches=" << options.limit_val_batches().to_string() << "\n";
  }
  return out.str();
}

}  // namespace

CheckpointSection options_section(const TrainerOptions& options) {
  return {"options",
          [&options](OutputArchive& archive, const SectionCapture&) {
            archive.write("options", c10::IValue(describe_options(options)));
          },
          [&options](CheckpointReader& reader) -> CheckpointSection::Apply {
            const auto saved = reader.value("options").toStringRef();
            if (saved != describe_options(options)) {
              logger()->info("checkpoint {} was written with other options:\n{}",
                             reader.path().string(), saved);
            }
            return [] {};
          }};
}

// ---- the metric history -------------------------------------------------------------------------

namespace {

using MetricSeries = std::vector<std::pair<std::string, std::vector<MetricPoint>>>;

void save_metrics(OutputArchive& archive, const MetricHistory& history) {
  const auto names = history.names();
  archive.write("metric_names", c10::IValue(detail::join_lines(names)));
  for (std::size_t i = 0; i < names.size(); ++i) {
    const auto& series = history.series(names[i]);
    auto points = torch::empty({static_cast<std::int64_t>(series.size()), 3}, torch::kDouble);
    auto view = points.accessor<double, 2>();
    for (std::size_t j = 0; j < series.size(); ++j) {
      view[j][0] = static_cast<double>(series[j].step);
      view[j][1] = static_cast<double>(series[j].epoch);
      view[j][2] = series[j].value;
    }
    archive.write("metric_" + std::to_string(i), points);
  }
}

MetricSeries read_metrics(CheckpointReader& reader) {
  MetricSeries metrics;
  const auto names = detail::split_lines(reader.value("metric_names").toStringRef());
  // A step or epoch as a double: an integer within what a double holds exactly (2^53).
  const auto is_count = [](double value) {
    return std::abs(value) <= 9007199254740992.0 && value == std::trunc(value);
  };
  for (std::size_t i = 0; i < names.size(); ++i) {
    const auto key = "metric_" + std::to_string(i);
    const auto stored = reader.tensor(key);
    if (stored.dim() != 2 || stored.size(1) != 3 || !stored.is_floating_point()) {
      reader.fail("has a malformed '", key, "' entry (metric '", names[i], "'): ", stored.sizes(),
                  " ", stored.scalar_type(),
                  " (expected N x 3 floating point: step, epoch, value)");
    }
    const auto points = stored.to(torch::kCPU, torch::kDouble).contiguous();
    auto view = points.accessor<double, 2>();
    std::vector<MetricPoint> series;
    for (std::int64_t j = 0; j < points.size(0); ++j) {
      if (!is_count(view[j][0]) || !is_count(view[j][1])) {
        reader.fail("has a malformed '", key, "' entry (metric '", names[i], "'): point ", j,
                    " has step ", view[j][0], " and epoch ", view[j][1], " (expected integers)");
      }
      series.push_back(MetricPoint{static_cast<std::int64_t>(view[j][0]),
                                   static_cast<std::int64_t>(view[j][1]), view[j][2]});
    }
    metrics.emplace_back(names[i], std::move(series));
  }
  // One series per name: a name listed twice would drop a series, one missing would leave its
  // series out and give the next name's series to the names after it.
  std::set<std::string> listed;
  for (const auto& name : names) {
    if (!listed.insert(name).second) {
      reader.fail("has a malformed 'metric_names' entry: metric '", name, "' is listed twice");
    }
  }
  const auto extra = "metric_" + std::to_string(names.size());
  if (reader.optional_tensor(extra).defined()) {
    reader.fail("has a malformed 'metric_names' entry: it names ", names.size(),
                " metrics, and the checkpoint holds an entry '", extra, "' beyond them");
  }
  return metrics;
}

}  // namespace

CheckpointSection metrics_section(MetricHistory& history) {
  return {
      "metrics",
      [&history](OutputArchive& archive, const SectionCapture&) { save_metrics(archive, history); },
      [&history](CheckpointReader& reader) -> CheckpointSection::Apply {
        return [&history, metrics = read_metrics(reader)]() mutable {
          history.clear();
          for (auto& [name, series] : metrics) history.set_series(name, std::move(series));
        };
      }};
}

// ---- the subscribers: filters' counts and class callbacks' states -------------------------------

CheckpointSection filter_counts_section(EventBus& bus) {
  return {"filter counts",
          [&bus](OutputArchive& archive, const SectionCapture&) {
            std::vector<std::string> keys;
            std::vector<std::int64_t> counts;
            for (const auto& [key, count] : detail::filter_counts(bus)) {
              keys.push_back(key);
              counts.push_back(count);
            }
            archive.write("filter_count_keys", c10::IValue(detail::join_lines(keys)));
            archive.write("filter_counts", c10::IValue(counts));
          },
          [&bus](CheckpointReader& reader) -> CheckpointSection::Apply {
            detail::FilterCounts counts;
            const auto saved_keys = reader.optional_value("filter_count_keys");
            if (saved_keys.isString()) {
              const auto keys = detail::split_lines(saved_keys.toStringRef());
              const auto values = reader.value("filter_counts").toIntVector();
              if (keys.size() != values.size())
                reader.fail("has a malformed 'filter_counts' entry");
              for (std::size_t i = 0; i < keys.size(); ++i) counts.emplace_back(keys[i], values[i]);
            }
            return [&bus, counts] { detail::restore_filter_counts(bus, counts); };
          }};
}

namespace {

/// Writes each callback's state (one whose save_state fails under a disabling error policy is left
/// out: a run resumed from the checkpoint starts it fresh). A state that may hold what the callback
/// changes in place later is serialized now when the capture keeps copies.
void save_callbacks(OutputArchive& archive, EventBus& bus, bool copies) {
  std::vector<std::string> names;
  for (const auto& callback : bus.callbacks()) {
    OutputArchive callback_archive;
    if (!detail::run_callback_hook(bus, *callback, "save_state",
                                   [&] { callback->save_state(callback_archive); })) {
      continue;
    }
    const bool deferred = !copies || callback->state_is_snapshot();
    write_nested(archive, "callback_" + std::to_string(names.size()), callback_archive,
                 deferred ? SectionBytes::Deferred : SectionBytes::Serialized);
    names.push_back(callback->name());
  }
  archive.write("callback_names", c10::IValue(detail::join_lines(names)));
}

/// Loads each callback's state (a callback whose load_state throws fails the checkpoint).
void load_callbacks(CheckpointReader& reader, EventBus& bus) {
  const auto& path = reader.path();
  const auto names = detail::split_lines(reader.value("callback_names").toStringRef());
  for (const auto& callback : bus.callbacks()) {
    const auto found = std::find(names.begin(), names.end(), callback->name());
    if (found == names.end()) {
      logger()->info("checkpoint {} holds no state of callback '{}'; it starts fresh",
                     path.string(), callback->name());
      continue;
    }
    auto callback_archive = reader.nested("callback_" + std::to_string(found - names.begin()));
    try {
      callback->load_state(callback_archive);
    } catch (const std::exception& error) {
      reader.fail("holds state of callback '", callback->name(),
                  "' it cannot load: ", detail::reason_of(error));
    }
  }
  for (const auto& name : names) {
    if (bus.find_callback(name) == nullptr) {
      logger()->warn("checkpoint {} holds state of callback '{}', which this trainer does not have",
                     path.string(), name);
    }
  }
}

}  // namespace

CheckpointSection callbacks_section(EventBus& bus) {
  return {"callbacks",
          [&bus](OutputArchive& archive, const SectionCapture& capture) {
            save_callbacks(archive, bus, capture.copies != nullptr);
          },
          [&bus](CheckpointReader& reader) -> CheckpointSection::Apply {
            load_callbacks(reader, bus);
            return [] {};
          }};
}

}  // namespace torchbus
