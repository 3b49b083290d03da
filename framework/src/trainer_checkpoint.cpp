// Trainer's checkpoints: what is saved, how it is validated, how a fit resumes.

#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <torchbus/atomic_file.hpp>
#include <torchbus/checkpoint.hpp>
#include <torchbus/checkpoint_file.hpp>
#include <torchbus/distributed.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/trainer.hpp>

#include "checkpoint_format.hpp"
#include "type_name.hpp"

#include <sstream>

namespace torchbus {
namespace {

namespace fs = std::filesystem;
using torch::serialize::InputArchive;
using torch::serialize::OutputArchive;

/// Version of the payload's entries (the framing has its own, kCheckpointFormatVersion).
constexpr std::int64_t kPayloadFormatVersion = 1;

std::string join_lines(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += name + "\n";
  return out;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> names;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) names.push_back(line);
  return names;
}

at::Tensor cpu_rng_state() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_cpu_rng_state(const at::Tensor& state) {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

/// Generator states of every visible CUDA device (none without CUDA).
std::vector<at::Tensor> cuda_rng_states() {
  std::vector<at::Tensor> states;
  if (!torch::cuda::is_available()) return states;
  for (std::size_t i = 0; i < torch::cuda::device_count(); ++i) {
    auto generator = at::globalContext().defaultGenerator(
        at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(i)));
    std::lock_guard<std::mutex> lock(generator.mutex());
    states.push_back(generator.get_state());
  }
  return states;
}

void set_cuda_rng_states(const std::vector<at::Tensor>& states) {
  const auto devices = torch::cuda::is_available() ? torch::cuda::device_count() : 0;
  for (std::size_t i = 0; i < states.size() && i < devices; ++i) {
    auto generator = at::globalContext().defaultGenerator(
        at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(i)));
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(states[i]);
  }
}

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

/// Named tensors of one kind (parameters or buffers) as stored in a checkpoint.
struct NamedTensors {
  std::vector<std::string> names;
  std::vector<at::Tensor> tensors;
};

NamedTensors collect(const torch::OrderedDict<std::string, at::Tensor>& items) {
  NamedTensors out;
  for (const auto& item : items) {
    out.names.push_back(item.key());
    out.tensors.push_back(item.value().detach());
  }
  return out;
}

/// What went wrong, in one line of at most 200 characters (LibTorch's errors carry a trace).
std::string reason_of(const std::exception& error) {
  if (dynamic_cast<const std::bad_alloc*>(&error) != nullptr) {
    return "it announces more memory than can be allocated (std::bad_alloc)";
  }
  const auto* torch_error = dynamic_cast<const c10::Error*>(&error);
  std::string text = torch_error ? torch_error->what_without_backtrace() : error.what();
  text = text.substr(0, text.find('\n')).substr(0, 200);
  return text.empty()
             ? detail::concat("an error of type ", type_name(typeid(error)), " without a message")
             : text;
}

/// Reads the entries of one checkpoint, naming the file in every error.
class CheckpointReader {
 public:
  CheckpointReader(const fs::path& path) : path_(path) {  // NOLINT
    const auto payload = read_checkpoint_payload(path, &header_);
    try {
      std::istringstream in(payload);
      archive_.load_from(in);
    } catch (const std::exception& error) {
      fail("cannot be parsed: ", reason_of(error));
    }
  }

  const CheckpointHeader& header() const { return header_; }
  c10::IValue value(const std::string& key) {
    c10::IValue value;
    if (!archive_.try_read(key, value)) fail("has no '", key, "' entry");
    return value;
  }
  at::Tensor tensor(const std::string& key) {
    at::Tensor tensor;
    if (!archive_.try_read(key, tensor)) fail("has no '", key, "' tensor");
    return tensor;
  }
  /// The value at `key`, None when the checkpoint has none.
  c10::IValue optional_value(const std::string& key) {
    c10::IValue value;
    archive_.try_read(key, value);
    return value;
  }
  /// The tensor at `key`, undefined when the checkpoint has none.
  at::Tensor optional_tensor(const std::string& key) {
    at::Tensor tensor;
    archive_.try_read(key, tensor);
    return tensor;
  }
  InputArchive nested(const std::string& key) {
    InputArchive nested;
    if (!archive_.try_read(key, nested)) fail("has no '", key, "' section");
    return nested;
  }
  NamedTensors named_tensors(const std::string& key) {
    NamedTensors out;
    out.names = split_lines(value(key + "_names").toStringRef());
    out.tensors = value(key).toTensorVector();
    if (out.names.size() != out.tensors.size()) fail("has a malformed '", key, "' entry");
    return out;
  }

  template <typename... Parts>
  [[noreturn]] void fail(const Parts&... parts) const {
    throw CheckpointError(detail::concat("checkpoint ", path_.string(), " ", parts...));
  }

 private:
  fs::path path_;
  CheckpointHeader header_;
  InputArchive archive_;
};

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

std::vector<std::int64_t> group_sizes(const torch::optim::Optimizer& optimizer) {
  std::vector<std::int64_t> sizes;
  for (const auto& group : optimizer.param_groups()) {
    sizes.push_back(static_cast<std::int64_t>(group.params().size()));
  }
  return sizes;
}

/// Loads `archive` into `optimizer`; if that fails, restores the state it had and rethrows.
void load_optimizer_or_restore(torch::optim::Optimizer& optimizer, InputArchive& archive) {
  std::ostringstream previous;
  OutputArchive backup;
  optimizer.save(backup);
  backup.save_to(previous);
  try {
    optimizer.load(archive);
  } catch (...) {
    std::istringstream in(previous.str());
    InputArchive restore;
    restore.load_from(in);
    optimizer.load(restore);
    throw;
  }
}

}  // namespace

std::string Trainer::checkpoint_bytes(const fs::path& path) {
  TORCHBUS_CHECK(!in_window_, ConfigError,
                 "a checkpoint can only be taken at a step boundary (StepEnd, EpochEnd, between "
                 "runs), not between StepStart and the end of the optimizer step");
  // Where the run continues: the next epoch when the current one has finished.
  const bool next_epoch = epoch_finished_;
  const bool finished = state_.stop_requested() && state_.stop_kind() == StopKind::Finished;
  const Checkpoint checkpoint{path, state_.step, next_epoch ? state_.epoch + 1 : state_.epoch,
                              next_epoch ? 0 : state_.batch_in_epoch,
                              finished ? state_.stop_reason() : std::string()};
  for (const auto& callback : bus().callbacks()) {
    if (callback->runs_on(state_.rank)) callback->on_save_checkpoint(checkpoint);
  }
  OutputArchive archive;
  archive.write("format_version", c10::IValue(kPayloadFormatVersion));
  const auto rng_now = cpu_rng_state();
  archive.write("position", c10::IValue(std::vector<std::int64_t>{checkpoint.epoch, checkpoint.step,
                                                                  checkpoint.batch_in_epoch,
                                                                  state_.global_batch}));
  // The run's end: a resume from this checkpoint trains nothing (absent: it goes on).
  if (finished) archive.write("stop_reason", c10::IValue(checkpoint.stop_reason));
  archive.write("rng", rng_now);
  archive.write("cuda_rng", c10::IValue(c10::List<at::Tensor>(cuda_rng_states())));
  archive.write("epoch_start_rng",
                next_epoch || !epoch_start_rng_.defined() ? rng_now : epoch_start_rng_);
  for (const auto& [key, items] : {std::make_pair("parameters", module_->named_parameters()),
                                   std::make_pair("buffers", module_->named_buffers())}) {
    const auto tensors = collect(items);
    archive.write(std::string(key) + "_names", c10::IValue(join_lines(tensors.names)));
    archive.write(key, c10::IValue(c10::List<at::Tensor>(tensors.tensors)));
  }
  archive.write("optimizer_type", c10::IValue(type_name(typeid(optimizer_))));
  archive.write("optimizer_groups", c10::IValue(group_sizes(optimizer_)));
  OutputArchive optimizer_archive;
  optimizer_.save(optimizer_archive);
  archive.write("optimizer", optimizer_archive);
  const auto metric_names = state_.metrics.names();
  archive.write("metric_names", c10::IValue(join_lines(metric_names)));
  for (std::size_t i = 0; i < metric_names.size(); ++i) {
    const auto& series = state_.metrics.series(metric_names[i]);
    auto points = torch::empty({static_cast<std::int64_t>(series.size()), 3}, torch::kDouble);
    auto view = points.accessor<double, 2>();
    for (std::size_t j = 0; j < series.size(); ++j) {
      view[j][0] = static_cast<double>(series[j].step);
      view[j][1] = static_cast<double>(series[j].epoch);
      view[j][2] = series[j].value;
    }
    archive.write("metric_" + std::to_string(i), points);
  }
  std::vector<std::string> callback_names;
  for (const auto& callback : bus().callbacks()) {
    OutputArchive callback_archive;
    callback->save_state(callback_archive);
    archive.write("callback_" + std::to_string(callback_names.size()), callback_archive);
    callback_names.push_back(callback->name());
  }
  archive.write("callback_names", c10::IValue(join_lines(callback_names)));
  std::vector<std::string> filter_keys;
  std::vector<std::int64_t> filter_counts;
  for (const auto& [key, count] : bus().filter_counts()) {
    filter_keys.push_back(key);
    filter_counts.push_back(count);
  }
  archive.write("filter_count_keys", c10::IValue(join_lines(filter_keys)));
  archive.write("filter_counts", c10::IValue(filter_counts));
  // k of the last epoch trained (mid-epoch: the current one), which a resume must agree on.
  const auto k_epoch = std::max<std::int64_t>(
      0, checkpoint.batch_in_epoch > 0 ? checkpoint.epoch : checkpoint.epoch - 1);
  archive.write("accumulate_grad_batches",
                c10::IValue(options_.accumulate_grad_batches_at(k_epoch)));
  archive.write("accumulate_grad_batches_epoch", c10::IValue(k_epoch));
  archive.write("options", c10::IValue(describe_options(options_)));
  if (loss_scaler_) {
    archive.write("loss_scaler",
                  torch::tensor({loss_scaler_->current_scale(),
                                 static_cast<double>(loss_scaler_->growth_tracker())},
                                torch::kDouble));
  }
  std::ostringstream payload;
  archive.save_to(payload);
  return frame_checkpoint(payload.str(), state_.step, options_.run_identity());
}

void Trainer::save_checkpoint(const fs::path& path) {
  write_checkpoint_file(path, checkpoint_bytes(path));
}

void Trainer::resume_from(fs::path path) {
  TORCHBUS_CHECK(fs::exists(path), CheckpointError, "cannot resume from ", path.string(),
                 ": no such file or directory");
  resume_path_ = std::move(path);
}

void Trainer::restore_for_resume() {
  auto path = *resume_path_;
  resume_path_.reset();
  if (!fs::is_directory(path)) {
    load_checkpoint(path);
  } else {
    remove_stale_temporaries(path);
    // The newest checkpoint this trainer can continue: of the run's identity, and loadable (a
    // checkpoint of another model is skipped, not a reason to stop).
    std::string skipped;
    bool loaded = false;
    for (const auto& candidate : valid_checkpoints(path)) {
      try {
        load_checkpoint(candidate.path);
        path = candidate.path;
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
  logger()->info("resumed from {} at epoch {}, step {}, batch {} of the epoch", path.string(),
                 state_.epoch + 1, state_.step, state_.batch_in_epoch);
  if (state_.stop_requested()) {
    logger()->info("the run had already finished there ({}): nothing to train",
                   state_.stop_reason());
  }
}

void Trainer::load_checkpoint(const fs::path& path) {
  ensure_idle();
  try {
    apply_checkpoint(path);
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& error) {
    // A payload that passed its CRC but holds what LibTorch cannot read (a forged or damaged
    // file): the file is named, so that a resume skips it for an older one.
    throw CheckpointError(
        detail::concat("checkpoint ", path.string(), " cannot be loaded: ", reason_of(error)));
  }
  const Checkpoint checkpoint{path, state_.step, state_.epoch, state_.batch_in_epoch,
                              state_.stop_requested() ? state_.stop_reason() : std::string()};
  for (const auto& callback : bus().callbacks()) {
    if (callback->runs_on(state_.rank)) callback->on_load_checkpoint(checkpoint);
  }
}

void Trainer::apply_checkpoint(const fs::path& path) {
  CheckpointReader reader(path);
  // 1. Read and validate everything; nothing changes yet.
  const auto& identity = options_.run_identity();
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
  const auto parameters = reader.named_tensors("parameters");
  const auto buffers = reader.named_tensors("buffers");
  const auto current_parameters = collect(module_->named_parameters());
  const auto current_buffers = collect(module_->named_buffers());
  validate_tensors(reader, "parameter", parameters, current_parameters);
  validate_tensors(reader, "buffer", buffers, current_buffers);
  const auto optimizer_type = reader.value("optimizer_type").toStringRef();
  if (optimizer_type != type_name(typeid(optimizer_))) {
    reader.fail("was written with optimizer ", optimizer_type, "; this trainer uses ",
                type_name(typeid(optimizer_)));
  }
  const auto groups = reader.value("optimizer_groups").toIntVector();
  if (groups != group_sizes(optimizer_)) {
    reader.fail("has optimizer parameter groups of sizes ", c10::IntArrayRef(groups),
                "; this optimizer's are ", c10::IntArrayRef(group_sizes(optimizer_)));
  }
  // The k of the checkpoint's last epoch must agree; later epochs may change it (the schedule
  // says so). Checkpoints written before accumulation schedules had one k for every epoch.
  const auto k = reader.value("accumulate_grad_batches").toInt();
  const auto k_epoch = reader.optional_value("accumulate_grad_batches_epoch");
  const auto k_here = k_epoch.isInt() ? options_.accumulate_grad_batches_at(k_epoch.toInt())
                                      : options_.accumulate_grad_batches();
  if (k != k_here) {
    reader.fail("was written with accumulate_grad_batches ", k, "; this trainer uses ", k_here,
                k_epoch.isInt() ? detail::concat(" in epoch ", k_epoch.toInt(), " (counted from 0)")
                                : std::string(),
                " (the accumulation windows would differ; an accumulation_schedule may change k "
                "only for epochs after the checkpoint's)");
  }
  auto optimizer_archive = reader.nested("optimizer");
  const auto position = reader.value("position").toIntVector();
  if (position.size() != 4) reader.fail("has a malformed 'position' entry");
  const auto rng = reader.tensor("rng");
  const auto cuda_rng = reader.value("cuda_rng").toTensorVector();
  // The loss scale of a float16 run (absent otherwise; a run in another precision ignores it).
  auto loss_scaler = loss_scaler_;
  const auto saved_scale = reader.optional_tensor("loss_scaler");
  if (loss_scaler && saved_scale.defined()) {
    if (saved_scale.numel() != 2) reader.fail("has a malformed 'loss_scaler' entry");
    const auto values = saved_scale.to(torch::kDouble);
    try {
      loss_scaler->restore(values[0].item<double>(), values[1].item<std::int64_t>());
    } catch (const CheckpointError& error) {
      reader.fail("has an unusable loss scale: ", error.what());
    }
  }
  const auto saved_options = reader.value("options").toStringRef();
  if (saved_options != describe_options(options_)) {
    logger()->info("checkpoint {} was written with other options:\n{}", path.string(),
                   saved_options);
  }
  const auto epoch_start_rng = reader.tensor("epoch_start_rng");
  const auto stop_reason = reader.optional_value("stop_reason");
  if (!stop_reason.isNone() && !stop_reason.isString())
    reader.fail("has a malformed 'stop_reason' entry");
  std::vector<std::pair<std::string, std::vector<MetricPoint>>> metrics;
  const auto metric_names = split_lines(reader.value("metric_names").toStringRef());
  for (std::size_t i = 0; i < metric_names.size(); ++i) {
    const auto points = reader.tensor("metric_" + std::to_string(i)).to(torch::kDouble);
    auto view = points.accessor<double, 2>();
    std::vector<MetricPoint> series;
    for (std::int64_t j = 0; j < points.size(0); ++j) {
      series.push_back(MetricPoint{static_cast<std::int64_t>(view[j][0]),
                                   static_cast<std::int64_t>(view[j][1]), view[j][2]});
    }
    metrics.emplace_back(metric_names[i], std::move(series));
  }
  const auto callback_names = split_lines(reader.value("callback_names").toStringRef());
  // The own counts of the subscriptions' filters (absent from checkpoints of earlier versions).
  EventBus::FilterCounts filter_counts;
  const auto filter_keys = reader.optional_value("filter_count_keys");
  if (filter_keys.isString()) {
    const auto keys = split_lines(filter_keys.toStringRef());
    const auto counts = reader.value("filter_counts").toIntVector();
    if (keys.size() != counts.size()) reader.fail("has a malformed 'filter_counts' entry");
    for (std::size_t i = 0; i < keys.size(); ++i) filter_counts.emplace_back(keys[i], counts[i]);
  }

  // 2. Callbacks first: one whose load_state throws leaves the model untouched.
  for (const auto& callback : bus().callbacks()) {
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
    if (bus().find_callback(name) == nullptr) {
      logger()->warn("checkpoint {} holds state of callback '{}', which this trainer does not have",
                     path.string(), name);
    }
  }
  // 3. Validated: apply. The optimizer's state first: a damaged file may hold state that it
  // cannot take (its entries are only read here), and then the optimizer is put back as it was.
  load_optimizer_or_restore(optimizer_, optimizer_archive);
  copy_into(parameters, current_parameters);
  copy_into(buffers, current_buffers);
  loss_scaler_ = loss_scaler;
  bus().restore_filter_counts(filter_counts);
  state_.metrics.clear();
  for (auto& [name, series] : metrics) state_.metrics.set_series(name, std::move(series));
  state_.epoch = position[0];
  state_.step = position[1];
  state_.batch_in_epoch = position[2];
  state_.global_batch = position[3];
  state_.window_position = 0;
  resume_skip_ = position[2];
  epoch_start_rng_ = epoch_start_rng;
  set_cpu_rng_state(rng);
  set_cuda_rng_states(cuda_rng);
  state_.clear_stop();
  if (stop_reason.isString()) state_.request_stop(stop_reason.toStringRef(), StopKind::Finished);
}

Checkpoint read_checkpoint_position(const fs::path& path) {
  try {
    CheckpointReader reader(path);
    const auto position = reader.value("position").toIntVector();
    if (position.size() != 4) reader.fail("has a malformed 'position' entry");
    const auto stop_reason = reader.optional_value("stop_reason");
    if (!stop_reason.isNone() && !stop_reason.isString()) {
      reader.fail("has a malformed 'stop_reason' entry");
    }
    return {path, position[1], position[0], position[2],
            stop_reason.isString() ? stop_reason.toStringRef() : std::string()};
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& error) {
    throw CheckpointError(
        detail::concat("checkpoint ", path.string(), " cannot be read: ", reason_of(error)));
  }
}

void Trainer::start_training_epoch(BatchSource& train) {
  if (resume_skip_ == 0) {
    if (distributed()) {
      // Every rank draws the epoch's order (e.g. a DistributedSampler's permutation) from rank
      // 0's generator, so that the shards stay disjoint.
      std::vector<at::Tensor> generator{cpu_rng_state()};
      process_group_->broadcast(generator);
      set_cpu_rng_state(generator.front());
    }
    epoch_start_rng_ = cpu_rng_state();
    train.start_epoch(state_.epoch);
    return;
  }
  // Resuming mid-epoch: draw the epoch's order as the interrupted run did, skip what it trained,
  // then continue with the generator where the checkpoint left it.
  const auto rng_now = cpu_rng_state();
  set_cpu_rng_state(epoch_start_rng_);
  train.start_epoch(state_.epoch);
  const auto skipped = train.skip(resume_skip_);
  set_cpu_rng_state(rng_now);
  TORCHBUS_CHECK(skipped == resume_skip_, DataError, "cannot resume at batch ", resume_skip_,
                 " of epoch ", state_.epoch, ": the training data yields only ", skipped,
                 " batches now");
  state_.batch_in_epoch = resume_skip_;
  resume_skip_ = 0;
}

}  // namespace torchbus
