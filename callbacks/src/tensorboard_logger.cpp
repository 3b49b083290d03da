#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>
#include <torch/optim/optimizer.h>
#include <torchbus/callbacks/event_file_writer.hpp>
#include <torchbus/callbacks/tensorboard_logger.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/scalar_value.hpp>
#include <torchbus/state.hpp>

#include <algorithm>
#include <filesystem>
#include <system_error>

namespace torchbus {

namespace {

namespace fs = std::filesystem;

constexpr const char* kTensorPrefix = "train/";
constexpr const char* kMetricPrefix = "metrics/";
constexpr const char* kLrTag = "train/lr";
constexpr const char* kEpochTimeTag = "epoch/time_s";
constexpr const char* kEpochsCompletedTag = "epoch/completed";

/// The elements of `tensor` as doubles (a copy to the host: a sync on an accelerator).
std::vector<double> host_values(const at::Tensor& tensor) {
  const at::Tensor values = tensor.detach().to(at::kCPU, at::kDouble).contiguous();
  const double* data = values.data_ptr<double>();
  return std::vector<double>(data, data + values.numel());
}

std::string shape_of(const at::Tensor& tensor) {
  return fmt::format("[{}]", fmt::join(tensor.sizes(), ", "));
}

}  // namespace

TensorBoardLoggerOptions::TensorBoardLoggerOptions(std::string log_dir)
    : log_dir_(std::move(log_dir)) {}

void TensorBoardLoggerOptions::validate() const {
  TORCHBUS_CHECK(!log_dir().empty(), ConfigError,
                 "TensorBoardLogger: log_dir is empty; give the run directory of the event "
                 "files, e.g. \"runs/exp1\"");
  TORCHBUS_CHECK(step_freq() >= 1, ConfigError, "TensorBoardLogger: step_freq must be >= 1, got ",
                 step_freq());
  TORCHBUS_CHECK(histogram_freq() >= 1, ConfigError,
                 "TensorBoardLogger: histogram_freq must be >= 1, got ", histogram_freq());
  TORCHBUS_CHECK(histogram_buckets() >= 1, ConfigError,
                 "TensorBoardLogger: histogram_buckets must be >= 1, got ", histogram_buckets());
  TORCHBUS_CHECK(queue_capacity() >= 1, ConfigError,
                 "TensorBoardLogger: queue_capacity must be >= 1, got ", queue_capacity());
  std::vector<std::string> seen;
  for (const auto& name : tensors_to_log()) {
    TORCHBUS_CHECK(!name.empty(), ConfigError,
                   "TensorBoardLogger: tensors_to_log contains an empty name");
    TORCHBUS_CHECK(name != "lr", ConfigError,
                   "TensorBoardLogger: tensors_to_log names 'lr', which clashes with the learning "
                   "rate's tag train/lr; store the tensor under another name");
    TORCHBUS_CHECK(std::find(seen.begin(), seen.end(), name) == seen.end(), ConfigError,
                   "TensorBoardLogger: tensors_to_log names '", name, "' twice");
    seen.push_back(name);
  }
  for (const auto& name : metrics_to_log()) {
    TORCHBUS_CHECK(!name.empty(), ConfigError,
                   "TensorBoardLogger: metrics_to_log contains an empty name");
  }
}

TensorBoardLogger::TensorBoardLogger(TensorBoardLoggerOptions options, std::string name)
    : Callback(std::move(name), kDefaultPriority), options_(std::move(options)) {
  options_.validate();
  run_on_rank(0);
  for (const auto& tensor : options_.tensors_to_log()) tags_.push_back(kTensorPrefix + tensor);
  captured_.resize(tags_.size());
  warned_.assign(tags_.size(), false);
}

TensorBoardLogger::~TensorBoardLogger() = default;

std::string TensorBoardLogger::who() const {
  return "TensorBoardLogger '" + name() + "'";
}

// ---- the file -----------------------------------------------------------------------------------

void TensorBoardLogger::on_action_start(State& /*state*/) {
  writer_.reset();
  const fs::path directory(options_.log_dir());
  std::error_code error;
  fs::create_directories(directory, error);
  TORCHBUS_CHECK(!error, ConfigError, who(), ": cannot create the log directory '",
                 directory.string(), "': ", error.message(),
                 "; expected a writable directory for the event files");
  TORCHBUS_CHECK(fs::is_directory(directory, error), ConfigError, who(), ": log_dir '",
                 directory.string(), "' is not a directory");
  file_ = (directory / event_file_name()).string();
  try {
    writer_ = std::make_unique<EventFileWriter>(
        file_, static_cast<std::size_t>(options_.queue_capacity()));
  } catch (const ConfigError& failure) {
    throw ConfigError(detail::concat(who(), ": cannot write into the log directory '",
                                     directory.string(), "': ", failure.what()));
  }
  begun_ = false;
}

void TensorBoardLogger::on_action_end(State& /*state*/) {
  if (!writer_) return;
  for (auto& tensor : captured_) tensor.reset();
  try {
    hand_over();
  } catch (...) {
    pending_.clear();
    writer_.reset();  // closes the file; its error is the one being thrown
    throw;
  }
  const std::unique_ptr<EventFileWriter> writer = std::move(writer_);
  try {
    writer->close();
  } catch (const Error& failure) {
    throw Error(detail::concat(who(), ": ", failure.what()));
  }
}

void TensorBoardLogger::save_state(torch::serialize::OutputArchive& /*archive*/) const {
  if (!writer_) return;
  hand_over();
  try {
    writer_->flush();
  } catch (const Error& failure) {
    throw Error(detail::concat(who(), ": ", failure.what()));
  }
}

void TensorBoardLogger::on_exception(State& /*state*/) {
  if (!writer_) return;
  try {
    hand_over();
    writer_->flush();
  } catch (const std::exception& failure) {
    logger()->error("{}: {}", who(), failure.what());
  }
}

void TensorBoardLogger::write(std::int64_t step, std::vector<SummaryValue> values) {
  hand_over();  // the steps before this event first
  submit(step, std::move(values), wall_time_now());
}

void TensorBoardLogger::submit(std::int64_t step, std::vector<SummaryValue> values,
                               double wall_time) const {
  try {
    writer_->add_summary(step, std::move(values), wall_time);
  } catch (const Error& failure) {
    throw Error(detail::concat(who(), ": ", failure.what()));
  }
}

void TensorBoardLogger::hand_over() const {
  // One event per step, in the order recorded.
  for (std::size_t first = 0; first < pending_.size();) {
    std::size_t end = first;
    std::vector<SummaryValue> values;
    for (; end < pending_.size() && pending_[end].step == pending_[first].step; ++end) {
      const auto tag = pending_[end].tag;
      values.push_back(
          SummaryValue::scalar(tag < tags_.size() ? tags_[tag] : kLrTag, pending_[end].value));
    }
    submit(pending_[first].step, std::move(values), pending_[first].wall_time);
    first = end;
  }
  pending_.clear();
}

// ---- the resume point ---------------------------------------------------------------------------

void TensorBoardLogger::on_epoch_start(State& state) {
  if (!begun_) begin(state);
  epoch_start_ = Clock::now();
}

void TensorBoardLogger::on_eval_start(State& state) {
  if (!begun_) begin(state);
}

void TensorBoardLogger::begin(State& state) {
  begun_ = true;
  if (!writer_) return;
  // Counters and metrics restored by a resume are in place by now. Points already in the history
  // were written by the run that recorded them.
  written_.clear();
  pending_.clear();
  for (const auto& metric : state.metrics.names()) {
    written_[metric] = state.metrics.series(metric).size();
  }
  // A resumed run: TensorBoard drops what the previous run wrote after the resume point.
  if (state.step > 0) writer_->add_session_start(state.step + 1);
}

// ---- steps --------------------------------------------------------------------------------------

bool TensorBoardLogger::due(std::int64_t step) const noexcept {
  return step % options_.step_freq() == 0 || step % options_.histogram_freq() == 0;
}

void TensorBoardLogger::on_batch_end(State& state) {
  // Batch tensors such as "output" are gone at StepEnd: keep them when the step will be written.
  if (!writer_ || captured_.empty() || !due(state.step + 1)) return;
  const auto& names = options_.tensors_to_log();
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (const at::Tensor* tensor = state.tensors.find(names[i])) captured_[i] = *tensor;
  }
}

void TensorBoardLogger::on_step_end(State& state) {
  // While an exception escapes, the step did not complete: StepEnd fires only to close it.
  if (!writer_ || state.error || !due(state.step)) return;
  const bool scalars = state.step % options_.step_freq() == 0;
  const bool histograms = state.step % options_.histogram_freq() == 0;
  std::vector<SummaryValue> histogram_values;
  if (!state.update_skipped) {
    const double wall_time = wall_time_now();
    for (std::size_t i = 0; i < captured_.size(); ++i) {
      const at::Tensor* tensor = state.tensors.find(options_.tensors_to_log()[i]);
      if (tensor == nullptr && captured_[i].defined()) tensor = &captured_[i];
      add_tensor(histogram_values, i, tensor, scalars, histograms, state, wall_time);
    }
    if (scalars && options_.log_lr()) add_lr(state, wall_time);
  }
  for (auto& tensor : captured_) tensor.reset();
  if (!histogram_values.empty()) {
    write(state.step, std::move(histogram_values));
  } else if (!pending_.empty() &&
             (pending_.size() >= kHandOverValues ||
              pending_.back().wall_time - pending_.front().wall_time >= kHandOverSeconds)) {
    hand_over();
  }
}

void TensorBoardLogger::add_tensor(std::vector<SummaryValue>& histogram_values, std::size_t index,
                                   const at::Tensor* tensor, bool scalars, bool histograms,
                                   const State& state, double wall_time) {
  const std::string& name = options_.tensors_to_log()[index];
  const bool scalar = tensor != nullptr && tensor->defined() && tensor->numel() == 1;
  if (tensor != nullptr && tensor->defined() && !tensor->is_complex() && tensor->numel() > 0) {
    if (scalar && scalars) {
      pending_.push_back(PendingScalar{state.step, wall_time, static_cast<std::uint32_t>(index),
                                       scalar_value(*tensor)});
    } else if (!scalar && histograms) {
      histogram_values.push_back(SummaryValue::histogram(tags_[index], host_values(*tensor),
                                                         options_.histogram_buckets()));
    }
    return;
  }
  if (warned_[index]) return;
  warned_[index] = true;
  if (tensor == nullptr) {
    logger()->warn(
        "{}: no tensor named '{}' at step {} nor in its batches; present at StepEnd: {}. It is "
        "not written (reported once)",
        who(), name, state.step, detail::join_or_none(state.tensors.names()));
  } else if (!tensor->defined()) {
    logger()->warn("{}: tensor '{}' is undefined at step {}; it is not written (reported once)",
                   who(), name, state.step);
  } else {
    logger()->warn(
        "{}: tensor '{}' of shape {} is {}; only real tensors with elements are written (reported "
        "once)",
        who(), name, shape_of(*tensor), tensor->is_complex() ? "complex" : "empty");
  }
}

void TensorBoardLogger::add_lr(const State& state, double wall_time) {
  std::string problem;
  if (state.optimizer == nullptr || state.optimizer->param_groups().empty()) {
    problem = "the optimizer has no parameter group";
  } else {
    try {
      pending_.push_back(PendingScalar{state.step, wall_time,
                                       static_cast<std::uint32_t>(tags_.size()),
                                       state.optimizer->param_groups()[0].options().get_lr()});
      return;
    } catch (const std::exception& error) {
      problem = error.what();
    }
  }
  if (!warned_lr_) {
    warned_lr_ = true;
    logger()->warn("{}: cannot read the learning rate ({}); train/lr is not written", who(),
                   problem);
  }
}

// ---- epochs and metrics -------------------------------------------------------------------------

void TensorBoardLogger::on_eval_end(State& state) {
  if (writer_) write_new_metrics(state);
}

void TensorBoardLogger::on_epoch_end(State& state) {
  if (!writer_) return;
  if (options_.log_epoch() && !state.error) {
    const std::chrono::duration<double> elapsed = Clock::now() - epoch_start_;
    std::vector<SummaryValue> values;
    values.push_back(SummaryValue::scalar(kEpochTimeTag, elapsed.count()));
    values.push_back(
        SummaryValue::scalar(kEpochsCompletedTag, static_cast<double>(state.epoch + 1)));
    write(state.step, std::move(values));
  }
  write_new_metrics(state);
}

bool TensorBoardLogger::wanted_metric(const std::string& name) const {
  const auto& wanted = options_.metrics_to_log();
  if (wanted.empty()) return name != "train_loss";
  return std::find(wanted.begin(), wanted.end(), name) != wanted.end();
}

void TensorBoardLogger::write_new_metrics(State& state) {
  if (!options_.log_metrics()) return;
  // Every point not written yet, at its own step; the points of one step in one event.
  std::map<std::int64_t, std::vector<SummaryValue>> by_step;
  for (const auto& metric : state.metrics.names()) {
    if (!wanted_metric(metric)) continue;
    const auto& series = state.metrics.series(metric);
    std::size_t& written = written_[metric];
    for (std::size_t i = std::min(written, series.size()); i < series.size(); ++i) {
      by_step[series[i].step].push_back(
          SummaryValue::scalar(kMetricPrefix + metric, series[i].value));
    }
    written = series.size();
  }
  for (auto& [step, values] : by_step) write(step, std::move(values));
}

}  // namespace torchbus
