// A trainer's checkpoints: which part writes what, how everything is validated before anything is
// applied, how a fit resumes from a file or a directory.

#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <torchbus/atomic_file.hpp>
#include <torchbus/checkpoint.hpp>
#include <torchbus/logging.hpp>

#include "checkpoint_format.hpp"
#include "checkpoint_io.hpp"
#include "optimizer_state_copies.hpp"
#include "type_name.hpp"

#include <cstring>
#include <memory>
#include <sstream>

namespace torchbus {
namespace {

namespace fs = std::filesystem;
using detail::CheckpointReader;
using torch::serialize::InputArchive;
using torch::serialize::OutputArchive;

/// Version of the payload's entries (the framing has its own, kCheckpointFormatVersion).
constexpr std::int64_t kPayloadFormatVersion = 1;

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

// ---- sections -----------------------------------------------------------------------------------

/// When a section's entries become bytes: with the rest of the checkpoint, or at once.
enum class Section { Deferred, Serialized };

/// Writes `section` under `key`: nested (Deferred), or serialized now into a byte tensor
/// `<key>_bytes` (CheckpointReader::nested reads both).
void write_section(OutputArchive& archive, const std::string& key, OutputArchive& section,
                   Section when) {
  if (when == Section::Deferred) {
    archive.write(key, section);
    return;
  }
  std::string bytes;
  section.save_to([&bytes](const void* data, std::size_t size) {
    bytes.append(static_cast<const char*>(data), size);
    return size;
  });
  auto tensor = torch::empty({static_cast<std::int64_t>(bytes.size())}, torch::kUInt8);
  std::memcpy(tensor.data_ptr(), bytes.data(), bytes.size());
  archive.write(key + "_bytes", tensor);
}

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

/// The model's parameters and buffers as a checkpoint holds them, validated against the model.
struct ModelTensors {
  NamedTensors parameters, buffers, current_parameters, current_buffers;
};

void save_model(OutputArchive& archive, const torch::nn::Module& module,
                detail::TensorCopyPool* copies) {
  for (const auto& [key, items] : {std::make_pair("parameters", module.named_parameters()),
                                   std::make_pair("buffers", module.named_buffers())}) {
    const auto tensors = collect(items, copies);
    archive.write(std::string(key) + "_names", c10::IValue(detail::join_lines(tensors.names)));
    archive.write(key, c10::IValue(c10::List<at::Tensor>(tensors.tensors)));
  }
}

ModelTensors read_model(CheckpointReader& reader, const torch::nn::Module& module) {
  ModelTensors model{read_named_tensors(reader, "parameters"),
                     read_named_tensors(reader, "buffers"), collect(module.named_parameters()),
                     collect(module.named_buffers())};
  validate_tensors(reader, "parameter", model.parameters, model.current_parameters);
  validate_tensors(reader, "buffer", model.buffers, model.current_buffers);
  return model;
}

// ---- the optimizer ------------------------------------------------------------------------------

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
  write_section(archive, key, optimizer_archive,
                state_copies.copied() ? Section::Deferred : Section::Serialized);
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
    std::ostringstream bytes;
    OutputArchive backup;
    phase.optimizer()->save(backup);
    backup.save_to(bytes);
    previous.push_back(bytes.str());
  }
  try {
    for (std::size_t i = 0; i < phases.size(); ++i) phases[i].optimizer()->load(archives[i]);
  } catch (...) {
    for (std::size_t i = 0; i < phases.size(); ++i) {
      std::istringstream in(previous[i]);
      InputArchive restore;
      restore.load_from(in);
      phases[i].optimizer()->load(restore);
    }
    throw;
  }
}

// ---- the metric history -------------------------------------------------------------------------

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
  for (std::size_t i = 0; i < names.size(); ++i) {
    const auto points =
        reader.tensor("metric_" + std::to_string(i)).to(torch::kCPU, torch::kDouble);
    auto view = points.accessor<double, 2>();
    std::vector<MetricPoint> series;
    for (std::int64_t j = 0; j < points.size(0); ++j) {
      series.push_back(MetricPoint{static_cast<std::int64_t>(view[j][0]),
                                   static_cast<std::int64_t>(view[j][1]), view[j][2]});
    }
    metrics.emplace_back(names[i], std::move(series));
  }
  return metrics;
}

// ---- the subscribers: class callbacks' states and filters' counts -------------------------------

/// The callbacks' states (one whose save_state fails under a disabling error policy is left out:
/// a run resumed from the checkpoint starts it fresh) and the filters' counts.
void save_subscribers(OutputArchive& archive, EventBus& bus, bool copies) {
  std::vector<std::string> callback_names;
  for (const auto& callback : bus.callbacks()) {
    OutputArchive callback_archive;
    if (!bus.run_callback_hook(*callback, "save_state",
                               [&] { callback->save_state(callback_archive); })) {
      continue;
    }
    // A state that may hold what the callback changes in place later is serialized now.
    const bool deferred = !copies || callback->state_is_snapshot();
    write_section(archive, "callback_" + std::to_string(callback_names.size()), callback_archive,
                  deferred ? Section::Deferred : Section::Serialized);
    callback_names.push_back(callback->name());
  }
  archive.write("callback_names", c10::IValue(detail::join_lines(callback_names)));
  std::vector<std::string> filter_keys;
  std::vector<std::int64_t> filter_counts;
  for (const auto& [key, count] : bus.filter_counts()) {
    filter_keys.push_back(key);
    filter_counts.push_back(count);
  }
  archive.write("filter_count_keys", c10::IValue(detail::join_lines(filter_keys)));
  archive.write("filter_counts", c10::IValue(filter_counts));
}

/// The filters' own counts a checkpoint holds (absent from checkpoints of earlier versions).
EventBus::FilterCounts read_filter_counts(CheckpointReader& reader) {
  EventBus::FilterCounts filter_counts;
  const auto filter_keys = reader.optional_value("filter_count_keys");
  if (filter_keys.isString()) {
    const auto keys = detail::split_lines(filter_keys.toStringRef());
    const auto counts = reader.value("filter_counts").toIntVector();
    if (keys.size() != counts.size()) reader.fail("has a malformed 'filter_counts' entry");
    for (std::size_t i = 0; i < keys.size(); ++i) filter_counts.emplace_back(keys[i], counts[i]);
  }
  return filter_counts;
}

/// Loads each callback's state (a callback whose load_state throws fails the checkpoint before
/// anything else changed).
void load_callbacks(CheckpointReader& reader, EventBus& bus, const fs::path& path) {
  const auto callback_names = detail::split_lines(reader.value("callback_names").toStringRef());
  for (const auto& callback : bus.callbacks()) {
    const auto found = std::find(callback_names.begin(), callback_names.end(), callback->name());
    if (found == callback_names.end()) {
      logger()->info("checkpoint {} holds no state of callback '{}'; it starts fresh",
                     path.string(), callback->name());
      continue;
    }
    auto callback_archive =
        reader.nested("callback_" + std::to_string(found - callback_names.begin()));
    try {
      callback->load_state(callback_archive);
    } catch (const std::exception& error) {
      reader.fail("holds state of callback '", callback->name(),
                  "' it cannot load: ", error.what());
    }
  }
  for (const auto& name : callback_names) {
    if (bus.find_callback(name) == nullptr) {
      logger()->warn("checkpoint {} holds state of callback '{}', which this trainer does not have",
                     path.string(), name);
    }
  }
}

Checkpoint checkpoint_of(const fs::path& path, const FitProgress& progress) {
  return {path,
          progress.step,
          progress.epoch,
          progress.batch_in_epoch,
          progress.stop_reason,
          progress.world_size,
          progress.accumulate_grad_batches};
}

/// Reads, validates and applies the checkpoint at `path`; returns the position it held.
FitProgress apply_checkpoint(const CheckpointParts& parts, const fs::path& path) {
  // Its tensors on the device the model trains on, whatever device wrote them (also when loaded
  // before fit() has moved the model there: fit() moves the parameters, not the optimizer state).
  CheckpointReader reader(path, parts.options.device());
  // 1. Read and validate everything; nothing changes yet.
  const auto& identity = parts.options.run_identity();
  if (!identity.empty() && reader.header().identity != identity) {
    reader.fail("belongs to another run (",
                reader.header().identity.empty()
                    ? std::string("it has no run identity")
                    : identity_differences(reader.header().identity, identity),
                ")");
  }
  const auto version = reader.value("format_version").toInt();
  if (version != kPayloadFormatVersion) {
    reader.fail("has payload format version ", version, "; expected ", kPayloadFormatVersion);
  }
  // The optimizer phases first: a checkpoint of other phases is of another kind of run.
  auto optimization = parts.step.read(reader);
  const auto model = read_model(reader, parts.module);
  std::vector<InputArchive> optimizer_archives;
  for (std::size_t i = 0; i < parts.phases.size(); ++i) {
    optimizer_archives.push_back(read_optimizer(reader, parts.phases[i], i));
  }
  const auto progress = parts.fit.read(reader, parts.options);
  const auto saved_options = reader.value("options").toStringRef();
  if (saved_options != describe_options(parts.options)) {
    logger()->info("checkpoint {} was written with other options:\n{}", path.string(),
                   saved_options);
  }
  auto metrics = read_metrics(reader);
  const auto filter_counts = read_filter_counts(reader);
  // 2. Callbacks first: one whose load_state throws leaves the model untouched.
  load_callbacks(reader, parts.bus, path);
  // 3. Validated: apply. The optimizers' states first: a damaged file may hold state that one
  // cannot take (its entries are only read here), and then they are put back as they were.
  load_optimizers_or_restore(parts.phases, optimizer_archives);
  copy_into(model.parameters, model.current_parameters);
  copy_into(model.buffers, model.current_buffers);
  parts.step.restore(std::move(optimization));
  parts.bus.restore_filter_counts(filter_counts);
  parts.state.metrics.clear();
  for (auto& [name, series] : metrics) parts.state.metrics.set_series(name, std::move(series));
  parts.fit.restore(progress);
  return progress;
}

}  // namespace

CheckpointSnapshot capture_checkpoint(const CheckpointParts& parts, const fs::path& path,
                                      TensorCapture capture) {
  TORCHBUS_CHECK(!parts.step.in_window(), ConfigError,
                 "a checkpoint can only be taken at a step boundary (StepEnd, EpochEnd, between "
                 "runs), not between StepStart and the end of the optimizer step");
  const auto checkpoint = checkpoint_of(path, parts.fit.progress());
  // One that fails here (a logger flushing to a full disk) is disabled by its error policy like a
  // failure during an event. A disabled one is still told (a logger then flushes what it wrote
  // before it failed), as its state still goes into the checkpoint.
  for (const auto& callback : parts.bus.callbacks()) {
    if (!callback->runs_on(parts.state.rank)) continue;
    parts.bus.run_callback_hook(*callback, "on_save_checkpoint",
                                [&] { callback->on_save_checkpoint(checkpoint); });
  }
  auto* copies = capture == TensorCapture::Copies ? &parts.copies : nullptr;
  if (copies != nullptr) copies->begin_capture();
  auto archive = std::make_shared<OutputArchive>();
  archive->write("format_version", c10::IValue(kPayloadFormatVersion));
  parts.fit.save(*archive, parts.options);
  save_model(*archive, parts.module, copies);
  for (std::size_t i = 0; i < parts.phases.size(); ++i) {
    save_optimizer(*archive, *parts.phases[i].optimizer(), i, copies);
  }
  if (copies != nullptr) copies->end_capture();
  save_metrics(*archive, parts.state.metrics);
  save_subscribers(*archive, parts.bus, copies != nullptr);
  archive->write("options", c10::IValue(describe_options(parts.options)));
  parts.step.save(*archive);
  return CheckpointSnapshot(
      path, [archive, step = parts.state.step, identity = parts.options.run_identity()] {
        std::ostringstream payload;
        archive->save_to(payload);
        return frame_checkpoint(payload.str(), step, identity);
      });
}

void load_checkpoint(const CheckpointParts& parts, const fs::path& path) {
  FitProgress progress;
  try {
    progress = apply_checkpoint(parts, path);
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& error) {
    // A payload that passed its CRC but holds what LibTorch cannot read (a forged or damaged
    // file): the file is named, so that a resume skips it for an older one.
    throw CheckpointError(detail::concat("checkpoint ", path.string(),
                                         " cannot be loaded: ", detail::reason_of(error)));
  }
  const auto checkpoint = checkpoint_of(path, progress);
  for (const auto& callback : parts.bus.callbacks()) {
    if (callback->runs_on(parts.state.rank)) callback->on_load_checkpoint(checkpoint);
  }
}

void resume_from_checkpoint(const CheckpointParts& parts, const fs::path& path) {
  auto loaded_path = path;
  if (!fs::is_directory(path)) {
    load_checkpoint(parts, path);
  } else {
    remove_stale_temporaries(path);
    // The newest checkpoint this trainer can continue: of the run's identity, and loadable (a
    // checkpoint of another model is skipped, not a reason to stop).
    std::string skipped;
    bool loaded = false;
    for (const auto& candidate : valid_checkpoints(path)) {
      try {
        load_checkpoint(parts, candidate.path);
        loaded_path = candidate.path;
        loaded = true;
        break;
      } catch (const CheckpointError& error) {
        logger()->warn("not resuming from it: {}", error.what());
        skipped += detail::concat("\n  ", error.what());
      }
    }
    TORCHBUS_CHECK(loaded, CheckpointError, "cannot resume: ", path.string(),
                   " holds no valid checkpoint (*", kCheckpointExtension, ") this run can continue",
                   skipped.empty() ? std::string() : "; skipped:" + skipped);
  }
  const auto& state = parts.state;
  logger()->info("resumed from {} at epoch {}, step {}, batch {} of the epoch",
                 loaded_path.string(), state.epoch, state.step, state.batch_in_epoch);
  if (state.stop_requested()) {
    logger()->info("the run had already finished there ({}): nothing to train",
                   state.stop_reason());
  }
}

Checkpoint read_checkpoint_position(const fs::path& path) {
  try {
    CheckpointReader reader(path);
    return checkpoint_of(path, read_fit_position(reader));
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& error) {
    throw CheckpointError(detail::concat("checkpoint ", path.string(),
                                         " cannot be read: ", detail::reason_of(error)));
  }
}

}  // namespace torchbus
