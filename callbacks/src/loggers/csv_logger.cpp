#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>
#include <torchbus/atomic_file.hpp>
#include <torchbus/callbacks/csv_logger.hpp>
#include <torchbus/callbacks/logged_values.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/metric_names.hpp>
#include <torchbus/scalar_value.hpp>
#include <torchbus/state.hpp>
#include <torchbus/system_error_text.hpp>

#include "loggers/csv_file_writer.hpp"
#include "support/csv_field.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <system_error>

namespace torchbus {

namespace {

namespace fs = std::filesystem;

/// The columns every CsvLogger file starts with.
constexpr const char* kFixedColumns[] = {"kind", "step", "epoch", "wall_time"};
constexpr std::size_t kFixedCount = std::size(kFixedColumns);
constexpr std::size_t kKindCol = 0, kStepCol = 1, kEpochCol = 2;

/// Rows handed over to the background writer at the latest, also before `flush_secs` passed: a
/// run shorter than `flush_secs` (a fit of a few hundred fast steps) would otherwise format all its
/// rows at ActionEnd on the training thread. A hand-over costs the training thread a few µs (a
/// thread start), the formatting it moves off ~1 µs per row.
constexpr std::size_t kHandOverRows = 128;

bool is_reserved(const std::string& name) {
  return name == "lr" || std::find(std::begin(kFixedColumns), std::end(kFixedColumns), name) !=
                             std::end(kFixedColumns);
}

/// How the logger's messages name it: "CsvLogger '<name>'".
std::string who(const CsvLogger& logger) {
  return "CsvLogger '" + logger.name() + "'";
}

/// Splits one CSV line into fields, honouring quotes.
std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> fields(1);
  bool in_quotes = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (in_quotes) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else if (c == '"') {
        in_quotes = false;
      } else {
        fields.back() += c;
      }
    } else if (c == '"') {
      in_quotes = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else if (c != '\r') {
      fields.back() += c;
    }
  }
  return fields;
}

/// Parses a whole decimal integer; false if `text` is not one.
bool parse_int(const std::string& text, std::int64_t& value) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long parsed = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end != text.c_str() + text.size()) return false;
  value = parsed;
  return true;
}

/// Which rows a rewrite keeps: given kind, step and epoch of a row.
using KeepRow = bool (*)(const std::string& kind, std::int64_t step, std::int64_t epoch,
                         std::int64_t resume_step, std::int64_t resume_epoch);

bool keep_before_resume(const std::string& kind, std::int64_t step, std::int64_t epoch,
                        std::int64_t resume_step, std::int64_t resume_epoch) {
  if (kind == "step") return step <= resume_step;
  if (kind == "epoch") return epoch < resume_epoch;
  return true;
}

}  // namespace

void CsvLoggerOptions::validate() const {
  TORCHBUS_CHECK(!path().empty(), ConfigError,
                 "CsvLogger: path is empty; give the CSV file to write, e.g. \"metrics.csv\"");
  TORCHBUS_CHECK(step_freq() >= 1, ConfigError, "CsvLogger: step_freq must be >= 1, got ",
                 step_freq());
  TORCHBUS_CHECK(flush_secs() >= 0.0 && std::isfinite(flush_secs()), ConfigError,
                 "CsvLogger: flush_secs must be a finite number of seconds >= 0 (0: flush every "
                 "row), got ",
                 flush_secs());
  std::vector<std::string> seen;
  for (const auto& name : tensors_to_log()) {
    TORCHBUS_CHECK(!name.empty(), ConfigError, "CsvLogger: tensors_to_log contains an empty name");
    TORCHBUS_CHECK(!is_reserved(name), ConfigError, "CsvLogger: tensor name '", name,
                   "' clashes with a fixed column (kind, step, epoch, wall_time, lr)");
    TORCHBUS_CHECK(std::find(seen.begin(), seen.end(), name) == seen.end(), ConfigError,
                   "CsvLogger: tensors_to_log names '", name, "' twice");
    seen.push_back(name);
  }
  for (const auto& name : epoch_metrics()) {
    TORCHBUS_CHECK(!name.empty(), ConfigError, "CsvLogger: epoch_metrics contains an empty name");
    TORCHBUS_CHECK(!is_reserved(name), ConfigError, "CsvLogger: metric name '", name,
                   "' clashes with a fixed column (kind, step, epoch, wall_time, lr)");
  }
}

CsvLogger::CsvLogger(CsvLoggerOptions options)
    : Callback(options.name()), options_(std::move(options)) {
  set_role(Role::Logger).after(Role::Metrics);
  out_.file = std::make_unique<detail::CsvFileWriter>();
  options_.validate();
  run_on_rank(0);  // one log per run, not one per process
  warned_.assign(options_.tensors_to_log().size(), false);
}

CsvLogger::~CsvLogger() {
  // An action that ended flushed its rows; this is for a logger destroyed in the middle of one.
  try {
    flush_rows(Flush::kWritten);
  } catch (const std::exception& error) {
    logger()->error("{}", error.what());
  }
}

// ---- opening ------------------------------------------------------------------------------------

void CsvLogger::on_action_start(State& /*state*/) {
  open(/*replace=*/!options_.append() && !opened_before_);
  opened_before_ = true;
}

void CsvLogger::open(bool replace) {
  const fs::path& path = options_.path();
  const std::string who = torchbus::who(*this);
  out_.file->close();
  out_.file->rows() = detail::CsvRows();  // rows a failed write left behind are not this file's
  out_.header_pending = false;
  std::error_code error;
  if (path.has_parent_path()) {
    fs::create_directories(path.parent_path(), error);
    TORCHBUS_CHECK(!error, ConfigError, who, ": cannot create the directory '",
                   path.parent_path().string(), "' for '", path.string(), "': ", error.message());
  }
  const fs::file_status status = fs::status(path, error);  // one stat for both questions
  TORCHBUS_CHECK(!fs::is_directory(status), ConfigError, who, ": '", path.string(),
                 "' is a directory; expected the path of a CSV file");

  // Continue the file if asked to and it has at least a complete header line.
  bool continuing = false;
  if (!replace && fs::exists(status)) {
    std::ifstream in(path);
    TORCHBUS_CHECK(in.good(), ConfigError, who, ": cannot read '", path.string(),
                   "' to continue it: ", system_error_text(errno));
    std::string header;
    std::getline(in, header);
    continuing = !in.eof();  // else empty, or a header cut short by a killed run: start over
    if (continuing) {
      columns_ = split_csv(header);
      const bool ours =
          columns_.size() >= kFixedCount &&
          std::equal(std::begin(kFixedColumns), std::end(kFixedColumns), columns_.begin());
      TORCHBUS_CHECK(ours, ConfigError, who, ": cannot continue '", path.string(),
                     "': its header '", header,
                     "' does not start with kind,step,epoch,wall_time; use another path, or "
                     "append(false) to replace the file");
    }
  }

  // This run's own columns: its tensors and lr.
  std::vector<std::string> own = options_.tensors_to_log();
  own.emplace_back("lr");
  if (continuing) {
    TORCHBUS_CHECK(out_.file->open(path, /*append=*/true, who), ConfigError, who, ": cannot open '",
                   path.string(), "' for appending: ", system_error_text(errno));
    add_columns(own);     // widens the file if it lacks some of them
    reconciled_ = false;  // rows are checked against the resume point at the first EpochStart
  } else {
    columns_.assign(std::begin(kFixedColumns), std::end(kFixedColumns));
    columns_.insert(columns_.end(), own.begin(), own.end());
    TORCHBUS_CHECK(out_.file->open(path, /*append=*/false, who), ConfigError, who,
                   ": cannot open '", path.string(), "' for writing: ", system_error_text(errno));
    // Written with the first rows: metrics that appear before then need no rewrite.
    out_.header_pending = true;
    reconciled_ = true;
  }
  index_columns();
  out_.flushed_at = std::chrono::steady_clock::now();
}

void CsvLogger::on_action_end(State& /*state*/) {
  try {
    flush_rows(Flush::kWritten);
  } catch (...) {
    out_.file->close();  // the error is thrown once, here
    throw;
  }
  out_.file->close();
}

void CsvLogger::index_columns() {
  tensor_cols_.clear();
  for (const auto& tensor : options_.tensors_to_log()) tensor_cols_.push_back(column_index(tensor));
  lr_col_ = column_index("lr");
  out_.file->rows().set_width(columns_.size() - kFixedCount);
}

bool CsvLogger::is_own_column(const std::string& name) const {
  const auto& tensors = options_.tensors_to_log();
  return name == "lr" || std::find(tensors.begin(), tensors.end(), name) != tensors.end();
}

void CsvLogger::reopen_for_appending() {
  const std::string who = torchbus::who(*this);
  TORCHBUS_CHECK(out_.file->open(options_.path(), /*append=*/true, who), Error, who,
                 ": cannot reopen '", options_.path().string(),
                 "' for appending: ", system_error_text(errno));
}

std::size_t CsvLogger::column_index(const std::string& name) {
  const auto found = std::find(columns_.begin(), columns_.end(), name);
  return static_cast<std::size_t>(found - columns_.begin());  // columns_.size() when absent
}

// ---- rewriting ----------------------------------------------------------------------------------

namespace {

/// What `rewrite` changes in a file.
struct Rewrite {
  std::vector<std::string> extra;     // columns added at the end, empty in every row
  std::vector<bool> dropped_columns;  // per column, whether it goes; empty: every column stays
  KeepRow keep = nullptr;             // which rows stay; nullptr: every row
  std::int64_t resume_step = 0, resume_epoch = 0;  // what `keep` is given
};

/// Whether `keep` drops the row of `fields`.
bool dropped_row(const std::vector<std::string>& fields, const Rewrite& change) {
  std::int64_t step = 0, epoch = 0;
  return change.keep != nullptr && fields.size() > kEpochCol && parse_int(fields[kStepCol], step) &&
         parse_int(fields[kEpochCol], epoch) &&
         !change.keep(fields[kKindCol], step, epoch, change.resume_step, change.resume_epoch);
}

/// `line` without the columns `change` drops.
std::string without_dropped_columns(const std::string& line, const Rewrite& change) {
  if (change.dropped_columns.empty()) return line;
  const auto fields = split_csv(line);
  std::string out;
  bool first = true;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (i < change.dropped_columns.size() && change.dropped_columns[i]) continue;
    if (!first) out += ',';
    out += detail::csv_field(fields[i]);
    first = false;
  }
  return out;
}

/// The copy `rewrite` makes, from `in` to `out`.
std::int64_t copy_rows(std::istream& in, AtomicFile& out, const Rewrite& change) {
  std::string suffix;
  for (const auto& name : change.extra) suffix += "," + detail::csv_field(name);
  std::string empty_cells(change.extra.size(), ',');
  std::string line;
  std::int64_t dropped = 0;
  bool header = true;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // a partial last line, left by a killed run
    if (header) {
      out.write(without_dropped_columns(line, change) + suffix + '\n');
      header = false;
      continue;
    }
    if (change.keep != nullptr && dropped_row(split_csv(line), change)) {
      ++dropped;
      continue;
    }
    out.write(without_dropped_columns(line, change));
    out.write(empty_cells);
    out.write("\n");
  }
  return dropped;
}

/// Replaces `path` atomically by a copy changed as `change` says, without a partial last line.
/// Returns the number of rows dropped.
std::int64_t rewrite(const fs::path& path, const Rewrite& change, const std::string& who) {
  std::ifstream in(path);
  TORCHBUS_CHECK(in.good(), Error, who, ": cannot read '", path.string(),
                 "': ", system_error_text(errno));
  try {
    AtomicFile out(path);
    const auto dropped = copy_rows(in, out, change);
    out.commit();
    return dropped;
  } catch (const Error& failure) {
    throw Error(detail::concat(who, ": cannot rewrite '", path.string(), "': ", failure.what()));
  }
}

/// What an existing file holds, read line by line, and what `change` would do to it.
struct Existing {
  std::int64_t last_step = -1;     // largest step of a step row
  bool partial_last_line = false;  // the file ends without a line break (a killed run)
  bool drops_a_row = false;        // `change` drops a row
  std::vector<bool> filled_by_kept, filled_by_dropped;  // per column: a cell of such a row is set
};

/// Reads an existing file of `width` columns.
Existing read_existing(const fs::path& path, const Rewrite& change, std::size_t width) {
  Existing result;
  result.filled_by_kept.assign(width, false);
  result.filled_by_dropped.assign(width, false);
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    if (in.eof()) {
      result.partial_last_line = true;
      break;
    }
    const auto fields = split_csv(line);
    std::int64_t step = 0;
    if (fields.size() > kStepCol && fields[kKindCol] == "step" &&
        parse_int(fields[kStepCol], step)) {
      result.last_step = std::max(result.last_step, step);
    }
    const bool dropped = dropped_row(fields, change);
    result.drops_a_row = result.drops_a_row || dropped;
    auto& filled = dropped ? result.filled_by_dropped : result.filled_by_kept;
    for (std::size_t i = 0; i < fields.size() && i < width; ++i) {
      if (!fields[i].empty()) filled[i] = true;
    }
  }
  return result;
}

}  // namespace

void CsvLogger::add_columns(const std::vector<std::string>& names) {
  std::vector<std::string> extra;
  for (const auto& name : names) {
    if (column_index(name) == columns_.size() &&
        std::find(extra.begin(), extra.end(), name) == extra.end()) {
      extra.push_back(name);
    }
  }
  if (extra.empty()) return;
  if (out_.header_pending) {
    // Nothing of this file is written yet: widen the recorded rows instead of the file.
    out_.file->rows().widen(extra.size());
  } else {
    flush_rows(Flush::kWritten);  // the rewrite copies the file, buffered rows included
    out_.file->close();
    rewrite(options_.path(), Rewrite{extra, {}, nullptr, 0, 0}, who(*this));
    reopen_for_appending();
    out_.file->rows().set_width(columns_.size() + extra.size() - kFixedCount);
  }
  columns_.insert(columns_.end(), extra.begin(), extra.end());
}

void CsvLogger::on_epoch_start(State& state) {
  if (!reconciled_) reconcile(state);
}

void CsvLogger::reconcile(const State& state) {
  reconciled_ = true;
  flush_rows(Flush::kWritten);  // the file holds every row before it is read
  const fs::path& path = options_.path();
  const bool fresh = state.step == 0 && state.epoch == 0;
  Rewrite change;
  change.keep = fresh ? nullptr : keep_before_resume;
  change.resume_step = state.step;
  change.resume_epoch = state.epoch;
  const Existing existing = read_existing(path, change, columns_.size());
  // The columns only dropped rows filled go with them: the run writes them again where they first
  // appear, as an uninterrupted run does (its own columns stay).
  change.dropped_columns.assign(columns_.size(), false);
  std::vector<std::string> dropped_names;
  for (std::size_t i = kFixedCount; i < columns_.size(); ++i) {
    if (existing.filled_by_dropped[i] && !existing.filled_by_kept[i] &&
        !is_own_column(columns_[i])) {
      change.dropped_columns[i] = true;
      dropped_names.push_back(columns_[i]);
    }
  }
  if (dropped_names.empty()) change.dropped_columns.clear();  // the rows are copied as they are
  if (existing.drops_a_row || existing.partial_last_line) {
    out_.file->close();
    const auto dropped = rewrite(path, change, who(*this));
    reopen_for_appending();
    for (const auto& name : dropped_names) columns_.erase(columns_.begin() + column_index(name));
    index_columns();
    if (existing.partial_last_line) {
      logger()->info("CsvLogger '{}': dropped the incomplete last line of '{}'", name(),
                     path.string());
    }
    if (dropped > 0) {
      logger()->info(
          "CsvLogger '{}': the run resumes at step {}, epoch {}: dropped {} rows of '{}' written "
          "after that point by the previous run (they are written again){}",
          name(), state.step, state.epoch, dropped, path.string(),
          dropped_names.empty()
              ? std::string()
              : ", and the columns only they filled: " + detail::join_or_none(dropped_names));
    }
  }
  if (fresh && existing.last_step > 0) {
    logger()->info(
        "CsvLogger '{}': '{}' already has rows up to step {}; this run starts at step 0, so its "
        "rows follow them with step numbers starting again",
        name(), path.string(), existing.last_step);
  }
}

// ---- rows ---------------------------------------------------------------------------------------

void CsvLogger::on_step_end(State& state) {
  // While an exception escapes, the step did not complete: StepEnd fires only to close it.
  if (!state.error && !state.update_skipped && state.step % options_.step_freq() == 0) {
    write_step_row(state);
  }
  flush_if_due();
}

void CsvLogger::on_eval_start(State& state) {
  flush_rows(Flush::kInBackground);  // rows do not wait while the evaluation runs
  if (state.action == Action::Test) test_marks_.mark(state.metrics);
}

void CsvLogger::on_eval_end(State& state) {
  if (state.action != Action::Test || state.error || !out_.file->is_open()) return;
  auto names = test_marks_.recorded_since(state.metrics);
  names.erase(std::remove_if(names.begin(), names.end(), is_reserved), names.end());
  add_columns(names);
  begin_row("test", state);
  for (const auto& metric : names) {
    set_cell(column_index(metric), state.metrics.latest(metric).value);
  }
  flush_if_due();
}

void CsvLogger::begin_row(const char* kind, const State& state) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  out_.file->rows().begin(kind, state.step, state.epoch, ms);
}

void CsvLogger::set_cell(std::size_t column, double value) {
  out_.file->rows().set(column - kFixedCount, value);
}

void CsvLogger::set_lr(const State& state) {
  const auto lr = lr_.read(state, {"CsvLogger", *this}, "the lr column stays empty");
  if (lr) set_cell(lr_col_, *lr);
}

void CsvLogger::write_step_row(State& state) {
  if (!out_.file->is_open()) return;
  begin_row("step", state);
  const auto& names = options_.tensors_to_log();
  for (std::size_t i = 0; i < names.size(); ++i) {
    const at::Tensor* tensor = find_step_tensor(state, names[i]);
    if (tensor != nullptr && tensor->defined() && tensor->numel() == 1 && !tensor->is_complex()) {
      set_cell(tensor_cols_[i], scalar_value(*tensor));
    } else if (!warned_[i]) {
      warned_[i] = true;
      warn_tensor_not_logged(state, names[i], tensor, {"CsvLogger", *this},
                             "only one-element real tensors go in the CSV, its cells stay empty");
    }
  }
  set_lr(state);
}

void CsvLogger::on_epoch_end(State& state) {
  if (!out_.file->is_open()) return;
  // The metrics of this row: the ones named, or every one recorded during the epoch.
  std::vector<std::string> names;
  if (options_.epoch_metrics().empty()) {
    for (auto& metric : state.metrics.names()) {
      // train_loss is per step (the step rows' loss); reserved names would clash with columns.
      if (metric != metric_names::kTrainLoss && !is_reserved(metric))
        names.push_back(std::move(metric));
    }
  } else {
    names = options_.epoch_metrics();
  }
  names.erase(std::remove_if(names.begin(), names.end(),
                             [&](const std::string& metric) {
                               return !state.metrics.contains(metric) ||
                                      state.metrics.latest(metric).epoch != state.epoch;
                             }),
              names.end());
  add_columns(names);
  begin_row("epoch", state);
  for (const auto& metric : names) {
    set_cell(column_index(metric), state.metrics.latest(metric).value);
  }
  set_lr(state);
  flush_if_due();
}

void CsvLogger::flush_if_due() {
  const auto recorded = out_.file->rows().size();
  if (recorded == 0) return;
  const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - out_.flushed_at;
  if (waited.count() >= options_.flush_secs() || recorded >= kHandOverRows) {
    flush_rows(Flush::kInBackground);
  }
}

void CsvLogger::flush_rows(Flush flush) {
  if (!out_.file->is_open()) return;
  if (out_.file->rows().empty() && !out_.header_pending) {
    if (flush == Flush::kWritten) out_.file->wait();
    return;
  }
  std::string header;
  if (out_.header_pending) {
    for (std::size_t i = 0; i < columns_.size(); ++i) {
      if (i != 0) header += ',';
      header += detail::csv_field(columns_[i]);
    }
    header += '\n';
    out_.header_pending = false;
  }
  // flush_secs 0 promises every row in the file when its hook returns.
  const bool background = flush == Flush::kInBackground && options_.flush_secs() > 0.0;
  out_.file->write(header, background);
  out_.flushed_at = std::chrono::steady_clock::now();
}

void CsvLogger::on_save_checkpoint(const Checkpoint& /*checkpoint*/) {
  flush_rows(Flush::kWritten);
}

}  // namespace torchbus
