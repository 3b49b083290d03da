#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>
#include <torch/nn/module.h>
#include <torchbus/callbacks/logged_values.hpp>
#include <torchbus/callbacks/tensorboard_logger.hpp>
#include <torchbus/connection.hpp>
#include <torchbus/error.hpp>
#include <torchbus/filter.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/metric_names.hpp>
#include <torchbus/scalar_value.hpp>
#include <torchbus/state.hpp>
#include <torchbus/tensor_names.hpp>
#include <torchbus/trainer.hpp>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string_view>
#include <system_error>

#include "loggers/event_file_writer.hpp"

namespace torchbus {

namespace {

namespace fs = std::filesystem;

constexpr const char* kTensorPrefix = "train/";
constexpr const char* kMetricPrefix = "metrics/";
constexpr const char* kTestSection = "test/";

/// The tag of a test's metric: "test/<name>", its "test_" prefix dropped ("test/loss").
std::string test_tag(const std::string& metric) {
  const std::string_view prefix = metric_names::kTestPrefix;
  const bool prefixed = metric.compare(0, prefix.size(), prefix) == 0;
  return kTestSection + (prefixed ? metric.substr(prefix.size()) : metric);
}
constexpr const char* kLrTag = "train/lr";
constexpr const char* kEpochTimeTag = "epoch/time_s";
constexpr const char* kEpochsCompletedTag = "epoch/completed";
constexpr const char* kParameterPrefix = "parameters/";
constexpr const char* kGradientPrefix = "gradients/";
constexpr const char* kRunOptionsTag = "run_options";
/// The sub-runs of group_train_val, and the metric prefixes that go into them.
constexpr const char* kTrainRunDirectory = "train";
constexpr const char* kValRunDirectory = "val";
constexpr std::string_view kTrainMetricPrefix = "train_";
constexpr std::string_view kValMetricPrefix = "val_";

/// The elements of `tensor` as doubles (a copy to the host: a sync on an accelerator).
std::vector<double> host_values(const at::Tensor& tensor) {
  const at::Tensor values = tensor.detach().to(at::kCPU, at::kDouble).contiguous();
  const double* data = values.data_ptr<double>();
  return std::vector<double>(data, data + values.numel());
}

/// Whether a histogram can be made of `tensor`'s elements.
bool histogram_of_it(const at::Tensor& tensor) {
  return tensor.defined() && !tensor.is_complex() && tensor.numel() > 0;
}

/// `text` as a cell of a Markdown table: pipes escaped, line breaks as spaces.
std::string markdown_cell(const std::string& text) {
  std::string cell;
  cell.reserve(text.size());
  for (char c : text) {
    if (c == '|') {
      cell += "\\|";
    } else {
      cell += (c == '\n' || c == '\r') ? ' ' : c;
    }
  }
  return cell;
}

/// A two-column Markdown table of `rows`.
std::string markdown_table(const std::vector<std::pair<std::string, std::string>>& rows) {
  std::string table = "| option | value |\n|---|---|\n";
  for (const auto& [key, value] : rows) {
    table += fmt::format("| {} | {} |\n", markdown_cell(key), markdown_cell(value));
  }
  return table;
}

/// The sub-run and the tag of metric `name` under group_train_val: `val_<x>` and `train_<x>` as
/// `<x>`; nothing for other metrics.
std::optional<std::pair<bool, std::string>> grouped_metric(const std::string& name) {
  for (const auto prefix : {kValMetricPrefix, kTrainMetricPrefix}) {
    if (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0) {
      return std::make_pair(prefix == kTrainMetricPrefix, name.substr(prefix.size()));
    }
  }
  return std::nullopt;
}

/// The tag of tensor `name`'s step scalars in the train sub-run: `<name>`, the step's loss as
/// `loss` (the tag of the validation's loss in the val sub-run, so that both share a chart).
std::string train_run_tag(const std::string& name) {
  return name == tensor_names::kStepLoss ? "loss" : name;
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
  TORCHBUS_CHECK(parameter_histogram_freq() >= 0, ConfigError,
                 "TensorBoardLogger: parameter_histogram_freq must be >= 0 (0: never), got ",
                 parameter_histogram_freq());
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
  for (const auto& row : run_options()) {
    TORCHBUS_CHECK(!row.first.empty(), ConfigError,
                   "TensorBoardLogger: run_options has a row with an empty option name");
  }
}

TensorBoardLogger::TensorBoardLogger(TensorBoardLoggerOptions options)
    : Callback(options.name()), options_(std::move(options)) {
  set_role(Role::Logger).after(Role::Metrics);
  options_.validate();
  run_on_rank(0);
  for (const auto& tensor : options_.tensors_to_log()) tags_.push_back(kTensorPrefix + tensor);
  captured_.resize(tags_.size());
  warned_.assign(tags_.size(), false);
}

TensorBoardLogger::~TensorBoardLogger() = default;

EventList TensorBoardLogger::unused_hooks() const {
  const auto& names = options_.tensors_to_log();
  const bool step_values_only =
      std::all_of(names.begin(), names.end(),
                  [](const std::string& name) { return name == tensor_names::kStepLoss; });
  return step_values_only ? EventList(Event::BatchEnd) : EventList();
}

std::string TensorBoardLogger::who() const {
  return "TensorBoardLogger '" + name() + "'";
}

TensorBoardLogger& TensorBoardLogger::add_option(std::string key, std::string value) {
  TORCHBUS_CHECK(!key.empty(), ConfigError, who(), ": add_option needs an option name");
  auto& rows = options_.run_options();
  const auto row = std::find_if(rows.begin(), rows.end(),
                                [&](const auto& existing) { return existing.first == key; });
  if (row != rows.end()) {
    row->second = std::move(value);
  } else {
    rows.emplace_back(std::move(key), std::move(value));
  }
  return *this;
}

void TensorBoardLogger::on_added(Trainer& trainer) {
  const auto every_n = options_.parameter_histogram_freq();
  if (every_n <= 0) return;
  // Gradients are cleared before StepEnd: the histograms are taken after the optimizer step.
  parameter_histograms_ = std::make_unique<ScopedConnection>(trainer.on(
      Event::AfterOptimizerStep, every(every_n),
      [this](State& state) { write_parameter_histograms(state); }, priority()));
}

// ---- the file -----------------------------------------------------------------------------------

void TensorBoardLogger::on_action_start(State& /*state*/) {
  for (auto& writer : writers_) writer.reset();
  const fs::path directory(options_.log_dir());
  std::error_code error;
  fs::create_directories(directory, error);
  TORCHBUS_CHECK(!error, ConfigError, who(), ": cannot create the log directory '",
                 directory.string(), "': ", error.message(),
                 "; expected a writable directory for the event files");
  TORCHBUS_CHECK(fs::is_directory(directory, error), ConfigError, who(), ": log_dir '",
                 directory.string(), "' is not a directory");
  if (options_.group_train_val()) {
    // The sub-runs' files are created when first written to, their directories now: a problem
    // shows before training starts.
    for (const char* sub_run : {kTrainRunDirectory, kValRunDirectory}) {
      fs::create_directories(directory / sub_run, error);
      TORCHBUS_CHECK(!error, ConfigError, who(), ": cannot create the sub-run directory '",
                     (directory / sub_run).string(), "': ", error.message());
    }
  }
  file_ = (directory / event_file_name()).string();
  try {
    writers_[kMainRun] = open_writer(kMainRun, file_);
  } catch (const ConfigError& failure) {
    throw ConfigError(detail::concat(who(), ": cannot write into the log directory '",
                                     directory.string(), "': ", failure.what()));
  }
  pending_.reserve(kHandOverValues);
  begun_ = false;
  resume_step_ = 0;
}

std::unique_ptr<EventFileWriter> TensorBoardLogger::open_writer(Run run, const std::string& file) {
  if (auto& kept = kept_writers_[run]) {
    kept->open(file);
    return std::move(kept);
  }
  // The main run's scalar tags are tags_ and the learning rate's; a sub-run's are the names of
  // tensors_to_log (without "train/").
  std::vector<std::string> tags;
  if (run == kMainRun) {
    tags = tags_;
    tags.emplace_back(kLrTag);
  } else {
    for (const auto& name : options_.tensors_to_log()) tags.push_back(train_run_tag(name));
  }
  return std::make_unique<EventFileWriter>(
      file, static_cast<std::size_t>(options_.queue_capacity()), std::move(tags));
}

EventFileWriter& TensorBoardLogger::writer(Run run) {
  auto& writer = writers_[run];
  if (writer) return *writer;
  const fs::path file = fs::path(options_.log_dir()) /
                        (run == kTrainRun ? kTrainRunDirectory : kValRunDirectory) /
                        event_file_name();
  writer = open_writer(run, file.string());  // its callers name the logger in an error
  if (resume_step_ > 0) writer->add_session_start(resume_step_ + 1);
  return *writer;
}

void TensorBoardLogger::on_action_end(State& /*state*/) {
  if (!writers_[kMainRun]) return;
  for (auto& tensor : captured_) tensor.reset();
  try {
    hand_over();
  } catch (...) {
    pending_.clear();
    for (auto& writer : writers_) writer.reset();  // closes the files; the error is being thrown
    throw;
  }
  for (auto& writer : writers_) {
    if (!writer) continue;
    try {
      writer->close();
    } catch (const Error& failure) {
      for (auto& other : writers_) other.reset();  // closes the others, their errors logged
      throw Error(detail::concat(who(), ": ", failure.what()));
    }
  }
  // Closed, kept with their threads for the next action's files.
  for (std::size_t run = 0; run < kRunCount; ++run) {
    if (writers_[run]) kept_writers_[run] = std::move(writers_[run]);
  }
}

void TensorBoardLogger::on_save_checkpoint(const Checkpoint& /*checkpoint*/) {
  if (!writers_[kMainRun]) return;
  hand_over();
  for (const auto& writer : writers_) {
    if (!writer) continue;
    try {
      writer->flush();
    } catch (const Error& failure) {
      throw Error(detail::concat(who(), ": ", failure.what()));
    }
  }
}

void TensorBoardLogger::on_exception(State& /*state*/) {
  if (!writers_[kMainRun]) return;
  try {
    hand_over();
    for (const auto& writer : writers_) {
      if (writer) writer->flush();
    }
  } catch (const std::exception& failure) {
    logger()->error("{}: {}", who(), failure.what());
  }
}

void TensorBoardLogger::write(Run run, std::int64_t step, std::vector<SummaryValue> values) {
  hand_over();  // the steps before this event first
  submit(run, step, std::move(values), wall_time_now());
}

void TensorBoardLogger::submit(Run run, std::int64_t step, std::vector<SummaryValue> values,
                               double wall_time) {
  try {
    writer(run).add_summary(step, std::move(values), wall_time);
  } catch (const Error& failure) {
    throw Error(detail::concat(who(), ": ", failure.what()));
  }
}

void TensorBoardLogger::hand_over() {
  if (pending_.empty()) return;
  try {
    if (options_.group_train_val()) {
      // The tensors' scalars (not the learning rate) again in the train sub-run (train_run_tag).
      std::vector<ScalarPoint> grouped;
      for (const auto& point : pending_) {
        if (point.tag < tags_.size()) grouped.push_back(point);
      }
      if (!grouped.empty()) writer(kTrainRun).add_scalars(std::move(grouped));
    }
    // One burst, one queue entry; the writer thread makes an event per step.
    writers_[kMainRun]->add_scalars(std::move(pending_));
  } catch (const Error& failure) {
    throw Error(detail::concat(who(), ": ", failure.what()));
  }
  pending_.clear();  // moved from: empty, without its buffer
  pending_.reserve(kHandOverValues);
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
  if (!writers_[kMainRun]) return;
  // Counters and metrics restored by a resume are in place by now. Points already in the history
  // were written by the run that recorded them.
  written_.clear();
  pending_.clear();
  for (const auto& metric : state.metrics.names()) {
    written_[metric] = state.metrics.series(metric).size();
  }
  // A resumed run: TensorBoard drops what the previous run wrote after the resume point (the
  // sub-runs' writers, created later, do the same).
  resume_step_ = state.step;
  if (state.step > 0) writers_[kMainRun]->add_session_start(state.step + 1);
  if (!options_.run_options().empty()) {
    std::vector<SummaryValue> text;
    text.push_back(SummaryValue::text(kRunOptionsTag, markdown_table(options_.run_options())));
    submit(kMainRun, state.step, std::move(text), wall_time_now());
  }
}

// ---- steps --------------------------------------------------------------------------------------

bool TensorBoardLogger::due(std::int64_t step) const noexcept {
  return step % options_.step_freq() == 0 || step % options_.histogram_freq() == 0;
}

void TensorBoardLogger::on_batch_end(State& state) {
  // Batch values such as the output are gone at StepEnd: keep them when the step will be written.
  if (!writers_[kMainRun] || captured_.empty() || !due(state.step + 1)) return;
  const auto& names = options_.tensors_to_log();
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (const at::Tensor* tensor = find_step_tensor(state, names[i])) captured_[i] = *tensor;
  }
}

void TensorBoardLogger::on_step_end(State& state) {
  // While an exception escapes, the step did not complete: StepEnd fires only to close it.
  if (!writers_[kMainRun] || state.error || !due(state.step)) return;
  const bool scalars = state.step % options_.step_freq() == 0;
  const bool histograms = state.step % options_.histogram_freq() == 0;
  std::vector<SummaryValue> histogram_values;
  if (!state.update_skipped) {
    const double wall_time = wall_time_now();
    for (std::size_t i = 0; i < captured_.size(); ++i) {
      const at::Tensor* tensor = find_step_tensor(state, options_.tensors_to_log()[i]);
      if (tensor == nullptr && captured_[i].defined()) tensor = &captured_[i];
      add_tensor(histogram_values, i, tensor, scalars, histograms, state, wall_time);
    }
    if (scalars && options_.log_lr()) add_lr(state, wall_time);
  }
  for (auto& tensor : captured_) tensor.reset();
  if (!histogram_values.empty()) {
    write(kMainRun, state.step, std::move(histogram_values));
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
      pending_.push_back(ScalarPoint{state.step, wall_time, static_cast<std::uint32_t>(index),
                                     scalar_value(*tensor)});
    } else if (!scalar && histograms) {
      histogram_values.push_back(SummaryValue::histogram(tags_[index], host_values(*tensor),
                                                         options_.histogram_buckets()));
    }
    return;
  }
  if (warned_[index]) return;
  warned_[index] = true;
  warn_tensor_not_logged(state, name, tensor, {"TensorBoardLogger", *this},
                         "only real tensors with elements are written");
}

void TensorBoardLogger::add_lr(const State& state, double wall_time) {
  const auto lr = lr_.read(state, {"TensorBoardLogger", *this}, "train/lr is not written");
  if (lr) {
    pending_.push_back(
        ScalarPoint{state.step, wall_time, static_cast<std::uint32_t>(tags_.size()), *lr});
  }
}

void TensorBoardLogger::write_parameter_histograms(const State& state) {
  // Subscribed on every rank: only where the logger runs (and during an action) is there a file.
  if (!writers_[kMainRun] || state.model == nullptr) return;
  std::vector<SummaryValue> values;
  for (const auto& parameter : state.model->named_parameters()) {
    const at::Tensor& weights = parameter.value();
    if (histogram_of_it(weights)) {
      values.push_back(SummaryValue::histogram(kParameterPrefix + parameter.key(),
                                               host_values(weights), options_.histogram_buckets()));
    }
    const at::Tensor& gradient = weights.grad();
    if (histogram_of_it(gradient)) {
      values.push_back(SummaryValue::histogram(
          kGradientPrefix + parameter.key(), host_values(gradient), options_.histogram_buckets()));
    }
  }
  // The step this optimizer step completes (state.step counts it at StepEnd).
  if (!values.empty()) write(kMainRun, state.step + 1, std::move(values));
}

// ---- epochs and metrics -------------------------------------------------------------------------

void TensorBoardLogger::on_eval_end(State& state) {
  if (writers_[kMainRun]) write_new_metrics(state);
}

void TensorBoardLogger::on_epoch_end(State& state) {
  if (!writers_[kMainRun]) return;
  if (options_.log_epoch() && !state.error) {
    const std::chrono::duration<double> elapsed = Clock::now() - epoch_start_;
    std::vector<SummaryValue> values;
    values.push_back(SummaryValue::scalar(kEpochTimeTag, elapsed.count()));
    values.push_back(
        SummaryValue::scalar(kEpochsCompletedTag, static_cast<double>(state.epoch + 1)));
    write(kMainRun, state.step, std::move(values));
  }
  write_new_metrics(state);
}

bool TensorBoardLogger::wanted_metric(const std::string& name) const {
  const auto& wanted = options_.metrics_to_log();
  if (wanted.empty()) return name != metric_names::kTrainLoss;
  return std::find(wanted.begin(), wanted.end(), name) != wanted.end();
}

void TensorBoardLogger::write_new_metrics(State& state) {
  if (!options_.log_metrics()) return;
  // Every point not written yet, at its own step; the points of one step and run in one event.
  std::array<std::map<std::int64_t, std::vector<SummaryValue>>, kRunCount> by_step;
  const auto& tensors = options_.tensors_to_log();
  for (const auto& metric : state.metrics.names()) {
    if (!wanted_metric(metric)) continue;
    // Under group_train_val also as "<x>" in a sub-run; not train_<x> when the step scalars of
    // tensor <x> go there already.
    std::optional<std::pair<bool, std::string>> grouped;
    if (options_.group_train_val()) grouped = grouped_metric(metric);
    if (grouped && grouped->first &&
        std::any_of(tensors.begin(), tensors.end(), [&](const std::string& tensor) {
          return train_run_tag(tensor) == grouped->second;
        })) {
      grouped.reset();
    }
    const auto& series = state.metrics.series(metric);
    std::size_t& written = written_[metric];
    // A test's metrics in their own section: "test/loss", "test/accuracy".
    const bool test = state.action == Action::Test;
    if (test) grouped.reset();
    const auto tag = test ? test_tag(metric) : kMetricPrefix + metric;
    for (std::size_t i = std::min(written, series.size()); i < series.size(); ++i) {
      by_step[kMainRun][series[i].step].push_back(SummaryValue::scalar(tag, series[i].value));
      if (grouped) {
        by_step[grouped->first ? kTrainRun : kValRun][series[i].step].push_back(
            SummaryValue::scalar(grouped->second, series[i].value));
      }
    }
    written = series.size();
  }
  for (const Run run : {kMainRun, kTrainRun, kValRun}) {
    for (auto& [step, values] : by_step[run]) write(run, step, std::move(values));
  }
}

}  // namespace torchbus
