#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>
#include <torch/nn/module.h>
#include <torch/serialize/archive.h>
#include <torchbus/atomic_file.hpp>
#include <torchbus/callbacks/archive_value.hpp>
#include <torchbus/callbacks/logged_values.hpp>
#include <torchbus/callbacks/run_report.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/metric_names.hpp>
#include <torchbus/state.hpp>
#include <torchbus/trainer.hpp>

#include "report/svg_chart.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <iterator>
#include <map>

namespace torchbus {

namespace {

namespace fs = std::filesystem;

// No '<', '>', '&' or quotes: the style element's text is raw in HTML and parsed in XHTML.
constexpr const char* kStyle =
    "body{font-family:sans-serif;margin:24px;color:#222;background:#fafafa}"
    "h1{margin:0 0 8px}h2{margin:24px 0 8px}"
    ".status{display:inline-block;padding:3px 10px;border-radius:4px;font-weight:bold;"
    "color:#fff}"
    ".status-finished{background:#2e7d32}.status-stopped{background:#b26a00}"
    ".status-failed{background:#c62828}.status-running{background:#1565c0}"
    "pre.error{background:#fff0f0;border:1px solid #e0b4b4;padding:8px;white-space:pre-wrap}"
    "table{border-collapse:collapse;margin:8px 0 16px;background:#fff}"
    "th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}"
    "th{background:#f0f0f0}td.number{text-align:right}"
    "nav a{margin-right:12px;font-family:monospace}"
    ".help{color:#555;font-size:13px;max-width:60em}"
    ".charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(520px,1fr));gap:16px}"
    "figure.metric{margin:0;padding:8px;background:#fff;border:1px solid #ddd;border-radius:4px}"
    "figcaption{font-size:13px;margin-bottom:4px}"
    "figcaption .name{font-weight:bold;font-family:monospace;margin-right:8px}"
    ".stats{color:#555}.stats b{color:#222}.warn{color:#b03030}"
    "svg.chart{width:100%;height:auto}"
    "footer{margin-top:32px;color:#888;font-size:12px}";

bool listed(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

/// Whether lower or higher is better for `name`: the options' lists, else a guess from the name
/// (nothing for metrics such as lr or step_time, where neither is).
std::optional<Mode> mode_of(const std::string& name, const RunReportOptions& options) {
  if (listed(options.maximize(), name)) return Mode::Max;
  if (listed(options.minimize(), name)) return Mode::Min;
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const auto has = [&](const char* part) { return lower.find(part) != std::string::npos; };
  if (has("loss") || has("error")) return Mode::Min;
  if (has("accuracy") || has("precision") || has("recall") || has("f1")) return Mode::Max;
  return std::nullopt;
}

/// "-1 (no limit)", "0 (off)" and the like for option values with a special meaning.
std::string with_meaning(std::int64_t value, std::int64_t special, const char* meaning) {
  return value == special ? fmt::format("{} ({})", value, meaning) : std::to_string(value);
}

std::string with_meaning(double value, const char* meaning) {
  return value == 0.0 ? fmt::format("0 ({})", meaning) : format_number(value, 15);
}

/// "2.35 s", "4 min 05 s", "3 h 07 min".
std::string format_duration(double seconds) {
  if (seconds < 60.0) return fmt::format("{:.2f} s", seconds);
  const auto whole = static_cast<std::int64_t>(seconds);
  if (whole < 3600) return fmt::format("{} min {:02} s", whole / 60, whole % 60);
  return fmt::format("{} h {:02} min", whole / 3600, (whole % 3600) / 60);
}

/// Local date and time, e.g. "2024-05-01 14:03:12 +0200".
std::string format_time(std::chrono::system_clock::time_point time) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(time);
  std::tm local{};
  localtime_r(&seconds, &local);
  char text[64];
  const auto length = std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S %z", &local);
  return std::string(text, length);
}

/// A chart to draw: a metric of the state, or a series RunReport sampled itself.
struct SeriesRef {
  std::string name;
  const std::vector<MetricPoint>* points;
  const char* sampled;  // what RunReport sampled (its own series), else nullptr
};

/// Where epochs start: after the last step any point of epoch e was recorded at, epoch e + 1
/// (the next epoch with points) begins.
std::vector<ChartMarker> epoch_markers(const std::vector<SeriesRef>& all) {
  std::map<std::int64_t, std::int64_t> last_step;  // epoch -> largest step of its points
  for (const auto& series : all) {
    for (const auto& point : *series.points) {
      auto [it, inserted] = last_step.emplace(point.epoch, point.step);
      if (!inserted) it->second = std::max(it->second, point.step);
    }
  }
  std::vector<ChartMarker> markers;
  for (auto it = last_step.begin(); it != last_step.end(); ++it) {
    const auto next = std::next(it);
    if (next == last_step.end()) break;
    markers.push_back(
        ChartMarker{static_cast<double>(it->second), fmt::format("epoch {}", next->first)});
  }
  return markers;
}

/// One `<figure>`: the caption with the series' numbers, then its chart.
void write_figure(std::string& html, std::size_t index, const SeriesRef& series,
                  const RunReportOptions& options, std::optional<double> x_min,
                  std::optional<double> x_max, const std::vector<ChartMarker>& markers) {
  const auto& points = *series.points;
  LineChart chart;
  chart.name = series.name;
  chart.x_min = x_min;
  chart.x_max = x_max;
  chart.markers = markers;
  chart.max_points = static_cast<std::size_t>(options.max_points());
  if (series.sampled != nullptr) chart.attributes.emplace_back("data-source=\"run_report\"");
  chart.points.reserve(points.size());
  std::optional<std::size_t> low, high;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const double value = points[i].value;
    chart.points.push_back(ChartPoint{static_cast<double>(points[i].step), value});
    if (!std::isfinite(value)) continue;
    if (!low || value < points[*low].value) low = i;
    if (!high || value > points[*high].value) high = i;
  }
  const auto mode = mode_of(series.name, options);
  if (mode) chart.highlight = *mode == Mode::Min ? low : high;

  auto out = std::back_inserter(html);
  fmt::format_to(out,
                 "<figure class=\"metric\" id=\"metric-{}\">\n<figcaption><span class=\"name\">{}"
                 "</span><span class=\"stats\">",
                 index, escape_xml(series.name));
  if (!points.empty()) {
    const auto& last = points.back();
    fmt::format_to(out, "last <b>{}</b> (step {}, epoch {})", format_number(last.value), last.step,
                   last.epoch);
  }
  if (low) {
    fmt::format_to(out, " · min <b>{}</b> (step {}) · max <b>{}</b> (step {})",
                   format_number(points[*low].value), points[*low].step,
                   format_number(points[*high].value), points[*high].step);
  }
  if (chart.highlight) {
    const auto& best = points[*chart.highlight];
    fmt::format_to(out, " · best <b>{}</b> (step {}, {} is better)", format_number(best.value),
                   best.step, *mode == Mode::Min ? "lower" : "higher");
  }
  fmt::format_to(out, " · {} value{}", points.size(), points.size() == 1 ? "" : "s");
  std::size_t finite = 0;
  for (const auto& point : points) finite += std::isfinite(point.value) ? 1 : 0;
  if (finite < points.size()) {
    fmt::format_to(out, " · <span class=\"warn\">{} non-finite (nan/inf) not drawn</span>",
                   points.size() - finite);
  }
  if (chart.max_points != 0 && finite > chart.max_points) {
    fmt::format_to(out, " · thinned to at most {} points (lowest and highest of each run)",
                   chart.max_points);
  }
  if (series.sampled != nullptr) fmt::format_to(out, " · {}", series.sampled);
  html += "</span></figcaption>\n";
  html += render_line_chart(chart);
  html += "\n</figure>\n";
}

/// A section with a chart given to add_chart: its heading, caption and chart.
void write_added_chart(std::string& html, std::size_t index, const ReportChart& added,
                       const RunReportOptions& options) {
  LineChart chart;
  chart.name = added.title;
  chart.x_label = added.x_label;
  chart.x_integer = false;
  chart.max_points = static_cast<std::size_t>(options.max_points());
  chart.highlight = added.highlight;
  chart.attributes.emplace_back("data-source=\"add_chart\"");
  for (std::size_t i = 0; i < added.x.size(); ++i) {
    chart.points.push_back(ChartPoint{added.x[i], added.y[i]});
  }
  fmt::format_to(std::back_inserter(html),
                 "<section class=\"added-chart\" id=\"chart-{}\">\n<h2>{}</h2>\n"
                 "<figure class=\"metric\">\n<figcaption>{}</figcaption>\n",
                 index, escape_xml(added.title), escape_xml(added.caption));
  html += render_line_chart(chart);
  html += "\n</figure>\n</section>\n";
}

/// A `<table>` with a header row and string cells.
void write_table(std::string& html, const char* css_class, const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows) {
  fmt::format_to(std::back_inserter(html), "<table class=\"{}\">\n<thead><tr>", css_class);
  for (const auto& name : header) html += "<th>" + escape_xml(name) + "</th>";
  html += "</tr></thead>\n<tbody>\n";
  for (const auto& row : rows) {
    html += "<tr>";
    for (const auto& cell : row) html += "<td>" + escape_xml(cell) + "</td>";
    html += "</tr>\n";
  }
  html += "</tbody>\n</table>\n";
}

}  // namespace

// ---- options ------------------------------------------------------------------------------------

void ReportTable::validate() const {
  TORCHBUS_CHECK(!title.empty(), ConfigError, "ReportTable: the title is empty");
  TORCHBUS_CHECK(!header.empty(), ConfigError, "ReportTable '", title,
                 "': the header is empty; give at least one column name");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    TORCHBUS_CHECK(rows[i].size() == header.size(), ConfigError, "ReportTable '", title, "': row ",
                   i, " has ", rows[i].size(), " cells, the header has ", header.size(),
                   " columns");
  }
}

void ReportChart::validate() const {
  TORCHBUS_CHECK(!title.empty(), ConfigError, "ReportChart: the title is empty");
  TORCHBUS_CHECK(!x_label.empty(), ConfigError, "ReportChart '", title, "': the x_label is empty");
  TORCHBUS_CHECK(x.size() == y.size(), ConfigError, "ReportChart '", title, "': ", x.size(),
                 " x values but ", y.size(), " y values; expected one of each per point");
  for (std::size_t i = 0; i < x.size(); ++i) {
    TORCHBUS_CHECK(std::isfinite(x[i]), ConfigError, "ReportChart '", title, "': x of point ", i,
                   " is ", x[i], "; expected a finite number");
  }
  TORCHBUS_CHECK(!highlight || *highlight < x.size(), ConfigError, "ReportChart '", title,
                 "': highlight ", highlight.value_or(0), " is past the last of its ", x.size(),
                 " points");
}

RunReportOptions::RunReportOptions(std::string path) : path_(std::move(path)) {}

void RunReportOptions::validate() const {
  TORCHBUS_CHECK(!path().empty(), ConfigError,
                 "RunReport: path is empty; give the HTML file to write, e.g. \"report.html\"");
  TORCHBUS_CHECK(fs::path(path()).has_filename(), ConfigError, "RunReport: path '", path(),
                 "' names a directory; give the HTML file to write, e.g. \"", path(),
                 "report.html\"");
  TORCHBUS_CHECK(!title().empty(), ConfigError, "RunReport: title is empty");
  TORCHBUS_CHECK(max_points() == 0 || max_points() >= 2, ConfigError,
                 "RunReport: max_points must be 0 (every point) or >= 2, got ", max_points());
  TORCHBUS_CHECK(update_every_n_epochs() >= 0, ConfigError,
                 "RunReport: update_every_n_epochs must be >= 0 (0: only at the start and end), "
                 "got ",
                 update_every_n_epochs());
  for (const auto& name : maximize()) {
    TORCHBUS_CHECK(!name.empty(), ConfigError, "RunReport: maximize contains an empty name");
    TORCHBUS_CHECK(!listed(minimize(), name), ConfigError, "RunReport: metric '", name,
                   "' is in both maximize and minimize");
  }
  for (const auto& name : minimize()) {
    TORCHBUS_CHECK(!name.empty(), ConfigError, "RunReport: minimize contains an empty name");
  }
}

// ---- configuration ------------------------------------------------------------------------------

RunReport::RunReport(RunReportOptions options)
    : Callback(options.name()), options_(std::move(options)) {
  set_role(Role::Report).after(Role::Checkpoint);
  options_.validate();
  run_on_rank(0);
}

RunReport& RunReport::add_option(std::string key, std::string value) {
  TORCHBUS_CHECK(!key.empty(), ConfigError, "RunReport '", name(),
                 "': add_option needs a key (got an empty one, value '", value, "')");
  const auto found = std::find_if(app_rows_.begin(), app_rows_.end(),
                                  [&](const Row& row) { return row.first == key; });
  if (found != app_rows_.end()) {
    found->second = std::move(value);
  } else {
    app_rows_.emplace_back(std::move(key), std::move(value));
  }
  return *this;
}

RunReport& RunReport::add_table(ReportTable table) {
  table.validate();
  const auto found = std::find_if(tables_.begin(), tables_.end(), [&](const ReportTable& other) {
    return other.title == table.title;
  });
  if (found != tables_.end()) {
    *found = std::move(table);
  } else {
    tables_.push_back(std::move(table));
  }
  return *this;
}

RunReport& RunReport::add_table_provider(ReportTableProvider provider) {
  TORCHBUS_CHECK(provider != nullptr, ConfigError, "RunReport '", name(),
                 "': add_table_provider got an empty function");
  providers_.push_back(std::move(provider));
  return *this;
}

RunReport& RunReport::add_chart(ReportChart chart) {
  chart.validate();
  const auto found = std::find_if(charts_.begin(), charts_.end(), [&](const ReportChart& other) {
    return other.title == chart.title;
  });
  if (found != charts_.end()) {
    *found = std::move(chart);
  } else {
    charts_.push_back(std::move(chart));
  }
  return *this;
}

EventList RunReport::unused_hooks() const {
  EventList unused;
  if (!options_.record_step_time()) unused |= Event::StepStart;
  if (!options_.record_step_time() && !options_.record_lr()) unused |= Event::StepEnd;
  return unused;
}

void RunReport::on_added(Trainer& trainer) {
  bus_ = &trainer.bus();
  const auto& options = trainer.options();
  trainer_rows_ = {
      {"max_epochs", with_meaning(options.max_epochs(), -1, "no limit")},
      {"max_steps", with_meaning(options.max_steps(), -1, "no limit")},
      {"accumulate_grad_batches", std::to_string(options.accumulate_grad_batches())},
      {"val_every_n_epochs", with_meaning(options.val_every_n_epochs(), 0, "off")},
      {"val_every_n_steps", with_meaning(options.val_every_n_steps(), 0, "off")},
      {"device", options.device().str()},
      {"seed", options.seed() ? std::to_string(*options.seed()) : std::string("none")},
      {"gradient_clip_norm", with_meaning(options.gradient_clip_norm(), "off")},
      {"gradient_clip_value", with_meaning(options.gradient_clip_value(), "off")},
      {"set_grads_to_none", options.set_grads_to_none() ? "true" : "false"},
  };
  // Options added since, shown when set.
  std::string schedule;
  for (const auto& [epoch, k] : options.accumulation_schedule()) {
    schedule += (schedule.empty() ? "" : ", ") + std::to_string(epoch) + ": " + std::to_string(k);
  }
  if (!schedule.empty()) trainer_rows_.emplace_back("accumulation_schedule", schedule);
  for (const auto& [name, limit] :
       {std::make_pair("limit_train_batches", options.limit_train_batches()),
        std::make_pair("limit_val_batches", options.limit_val_batches())}) {
    if (!limit.is_all()) trainer_rows_.emplace_back(name, limit.to_string());
  }
  if (options.num_sanity_val_steps() != 0) {
    trainer_rows_.emplace_back("num_sanity_val_steps",
                               std::to_string(options.num_sanity_val_steps()));
  }
  if (options.min_epochs() > 0) {
    trainer_rows_.emplace_back("min_epochs", std::to_string(options.min_epochs()));
  }
  if (options.min_steps() > 0) {
    trainer_rows_.emplace_back("min_steps", std::to_string(options.min_steps()));
  }
  if (options.detect_anomaly()) trainer_rows_.emplace_back("detect_anomaly", "true");
  if (options.deterministic() != Determinism::Unchanged) {
    trainer_rows_.emplace_back("deterministic", std::string(to_string(options.deterministic())));
  }
}

// ---- hooks --------------------------------------------------------------------------------------

void RunReport::on_action_start(State& state) {
  if (state.step == 0 && state.epoch == 0) {  // a new run (not a resume, not an evaluation after)
    elapsed_before_ = 0.0;
    started_ = std::chrono::system_clock::now();
  } else if (!started_) {
    started_ = std::chrono::system_clock::now();
  }
  // Drop sampled points a restored (or new) run will record again.
  const auto after = [&](const MetricPoint& point) { return point.step > state.step; };
  lr_.erase(std::remove_if(lr_.begin(), lr_.end(), after), lr_.end());
  step_time_.erase(std::remove_if(step_time_.begin(), step_time_.end(), after), step_time_.end());
  action_start_ = Clock::now();
  in_action_ = true;
  trains_ = false;
  action_ = state.action;

  start_failed_ = true;
  const fs::path path(options_.path());
  const std::string who = "RunReport '" + name() + "'";
  std::error_code error;
  if (path.has_parent_path()) {
    fs::create_directories(path.parent_path(), error);
    TORCHBUS_CHECK(!error, ConfigError, who, ": cannot create the directory '",
                   path.parent_path().string(), "' for the report '", path.string(),
                   "': ", error.message());
  }
  TORCHBUS_CHECK(!fs::is_directory(path, error), ConfigError, who, ": '", path.string(),
                 "' is a directory; expected the path of an HTML file");
  try {
    write_file_atomically(path, html(state), Durability::kProcessCrash);
  } catch (const std::exception& failure) {
    throw ConfigError(
        detail::concat(who, ": cannot write the report '", path.string(), "': ", failure.what()));
  }
  start_failed_ = false;
}

void RunReport::on_epoch_start(State& /*state*/) {
  trains_ = true;
}

void RunReport::on_step_start(State& /*state*/) {
  if (options_.record_step_time()) step_start_ = Clock::now();
}

void RunReport::on_step_end(State& state) {
  if (state.update_skipped) return;
  if (options_.record_lr()) {
    // The point of the step's update, as LearningRateScheduler records it; with several
    // optimizers, the first phase's rate, as the loggers write it.
    if (const auto lr = step_lr_.read(state, {"RunReport", *this}, "the report has no lr chart")) {
      lr_.push_back(MetricPoint{state.step, state.epoch, *lr});
    }
  }
  if (options_.record_step_time()) {
    const std::chrono::duration<double> seconds = Clock::now() - step_start_;
    step_time_.push_back(MetricPoint{state.step, state.epoch, seconds.count()});
  }
}

void RunReport::on_epoch_end(State& state) {
  const auto every = options_.update_every_n_epochs();
  if (every <= 0 || (state.epoch + 1) % every != 0) return;
  try {
    write(state, Durability::kProcessCrash);  // rewritten next epoch: no fsync on the loop
  } catch (const std::exception& failure) {
    logger()->error("{}; training goes on, the report is written again at the end", failure.what());
  }
}

void RunReport::on_eval_start(State& state) {
  if (state.action == Action::Test) test_marks_.mark(state.metrics);
}

void RunReport::on_eval_end(State& state) {
  if (state.action != Action::Test || state.error) return;
  ReportTable table{"Test", {"metric", "value"}, {}};
  for (const auto& metric : test_marks_.recorded_since(state.metrics)) {
    table.rows.push_back({metric, fmt::format("{:.6g}", state.metrics.latest(metric).value)});
  }
  if (!table.rows.empty()) add_table(std::move(table));
}

void RunReport::on_action_end(State& state) {
  if (!in_action_) return;  // an earlier subscriber's ActionStart threw before this one ran
  elapsed_before_ += std::chrono::duration<double>(Clock::now() - action_start_).count();
  in_action_ = false;
  if (start_failed_) {
    start_failed_ = false;
    return;  // ActionStart already reported why the report cannot be written
  }
  write(state, Durability::kPowerLoss);
  logger()->info("RunReport '{}': wrote {}", name(), options_.path());
}

void RunReport::write(const State& state, Durability durability) const {
  try {
    write_file_atomically(options_.path(), html(state), durability);
  } catch (const std::exception& failure) {
    throw Error(detail::concat("RunReport '", name(), "': cannot write the report '",
                               options_.path(), "': ", failure.what()));
  }
}

double RunReport::wall_seconds() const {
  const double current =
      in_action_ ? std::chrono::duration<double>(Clock::now() - action_start_).count() : 0.0;
  return elapsed_before_ + current;
}

// ---- checkpoints --------------------------------------------------------------------------------

namespace {
void write_series(torch::serialize::OutputArchive& archive, const std::string& key,
                  const std::vector<MetricPoint>& points) {
  std::vector<std::int64_t> steps, epochs;
  std::vector<double> values;
  for (const auto& point : points) {
    steps.push_back(point.step);
    epochs.push_back(point.epoch);
    values.push_back(point.value);
  }
  archive.write(key + "_steps", c10::IValue(steps));
  archive.write(key + "_epochs", c10::IValue(epochs));
  archive.write(key + "_values", c10::IValue(values));
}

std::vector<MetricPoint> read_series(torch::serialize::InputArchive& archive,
                                     const std::string& key) {
  c10::IValue steps, epochs, values;
  archive.read(key + "_steps", steps);
  archive.read(key + "_epochs", epochs);
  archive.read(key + "_values", values);
  const auto step_list = steps.toIntVector();
  const auto epoch_list = epochs.toIntVector();
  const auto value_list = values.toDoubleVector();
  TORCHBUS_CHECK(step_list.size() == epoch_list.size() && step_list.size() == value_list.size(),
                 CheckpointError, "RunReport: the series '", key, "' has ", step_list.size(),
                 " steps, ", epoch_list.size(), " epochs and ", value_list.size(), " values");
  std::vector<MetricPoint> points;
  for (std::size_t i = 0; i < step_list.size(); ++i) {
    points.push_back(MetricPoint{step_list[i], epoch_list[i], value_list[i]});
  }
  return points;
}
}  // namespace

void RunReport::save_state(torch::serialize::OutputArchive& archive) const {
  write_series(archive, "lr", lr_);
  write_series(archive, "step_time", step_time_);
  archive.write("elapsed", c10::IValue(wall_seconds()));
  const auto started = started_.value_or(std::chrono::system_clock::now());
  archive.write(
      "started",
      c10::IValue(static_cast<std::int64_t>(std::chrono::system_clock::to_time_t(started))));
}

void RunReport::load_state(torch::serialize::InputArchive& archive) {
  auto lr = read_series(archive, "lr");
  auto step_time = read_series(archive, "step_time");
  const auto elapsed = read_non_negative(archive, "elapsed");
  // Seconds since 1970 that the clock holds in nanoseconds (until the year 2242).
  const auto started = read_integer(archive, "started", 0, std::int64_t{1} << 33);
  lr_ = std::move(lr);
  step_time_ = std::move(step_time);
  elapsed_before_ = elapsed;
  if (in_action_) action_start_ = Clock::now();
  started_ = std::chrono::system_clock::from_time_t(static_cast<std::time_t>(started));
}

// ---- the HTML -----------------------------------------------------------------------------------

std::vector<ReportTable> RunReport::collect_tables(std::vector<std::string>& problems) const {
  std::vector<ReportTable> tables = tables_;
  for (std::size_t i = 0; i < providers_.size(); ++i) {
    try {
      ReportTable table = providers_[i]();
      table.validate();
      tables.push_back(std::move(table));
    } catch (const std::exception& failure) {
      problems.push_back(fmt::format("table provider {} failed: {}", i, failure.what()));
      logger()->warn("RunReport '{}': {}; its table is left out", name(), problems.back());
    }
  }
  return tables;
}

std::string RunReport::html(const State& state) const {
  // Status.
  std::string status = "finished", detail_text;
  if (state.error || !state.error_message.empty()) {
    status = "failed";
    detail_text = state.error_message.empty() ? "unknown error" : state.error_message;
  } else if (state.stop_requested()) {
    status = "stopped";
    detail_text = state.stop_reason();
  } else if (in_action_) {
    status = "running";
  }

  // Series: the state's metrics, then what RunReport sampled where no metric has that name.
  std::vector<SeriesRef> series;
  for (const auto& name : state.metrics.names()) {
    series.push_back(SeriesRef{name, &state.metrics.series(name), nullptr});
  }
  if (!lr_.empty() && !state.metrics.contains(metric_names::kLearningRate)) {
    series.push_back(SeriesRef{std::string(metric_names::kLearningRate), &lr_,
                               "sampled by RunReport: learning rate of parameter "
                               "group 0 at each step"});
  }
  if (!step_time_.empty() && !state.metrics.contains(metric_names::kStepTime)) {
    series.push_back(SeriesRef{std::string(metric_names::kStepTime), &step_time_,
                               "sampled by RunReport: seconds from StepStart to StepEnd"});
  }
  // One x range for every chart, so that charts line up.
  std::optional<double> x_min, x_max;
  for (const auto& one : series) {
    for (const auto& point : *one.points) {
      if (!std::isfinite(point.value)) continue;
      const auto step = static_cast<double>(point.step);
      x_min = x_min ? std::min(*x_min, step) : step;
      x_max = x_max ? std::max(*x_max, step) : step;
    }
  }
  const auto markers = epoch_markers(series);

  std::string html;
  html.reserve(4096 + series.size() * 16384);
  auto out = std::back_inserter(html);
  const auto title = escape_xml(options_.title());
  fmt::format_to(out,
                 "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n"
                 "<head>\n<meta charset=\"utf-8\"/>\n"
                 "<meta name=\"generator\" content=\"torchbus RunReport\"/>\n"
                 "<title>{}</title>\n<style>{}</style>\n</head>\n<body>\n<header>\n<h1>{}</h1>\n"
                 "<p><span class=\"status status-{}\" id=\"status\">{}</span>{}</p>\n",
                 title, kStyle, title, status, status,
                 detail_text.empty() || status == "failed"
                     ? std::string()
                     : " <span class=\"reason\">" + escape_xml(detail_text) + "</span>");
  if (status == "failed") {
    html += "<pre class=\"error\">" + escape_xml(detail_text) + "</pre>\n";
  }

  // Summary.
  std::vector<std::vector<std::string>> summary;
  const auto limit = [](std::int64_t value, std::int64_t max) {
    return max >= 0 ? fmt::format("{} of {}", value, max) : std::to_string(value);
  };
  if (trains_ || !in_action_) {
    summary.push_back({"action", trains_ ? "fit" : std::string(to_string(action_))});
  }
  summary.push_back({"steps", limit(state.step, state.max_steps)});
  if (in_action_) {
    summary.push_back({"current epoch (0-based)", std::to_string(state.epoch)});
  } else {
    summary.push_back({"epochs completed", limit(state.epoch, state.max_epochs)});
  }
  summary.push_back({"wall time", format_duration(wall_seconds())});
  if (started_) summary.push_back({"started", format_time(*started_)});
  summary.push_back({"report written", format_time(std::chrono::system_clock::now())});
  summary.push_back({"processes", std::to_string(state.world_size)});
  summary.push_back({"device", state.device.str()});
  if (state.model != nullptr) {
    std::int64_t parameters = 0;
    for (const auto& parameter : state.model->parameters()) parameters += parameter.numel();
    summary.push_back({"parameters", std::to_string(parameters)});
  }
  html += "<table class=\"summary\">\n<tbody>\n";
  for (const auto& row : summary) {
    html += "<tr><th>" + escape_xml(row[0]) + "</th><td>" + escape_xml(row[1]) + "</td></tr>\n";
  }
  html += "</tbody>\n</table>\n";
  if (!series.empty()) {
    html += "<nav>";
    for (std::size_t i = 0; i < series.size(); ++i) {
      fmt::format_to(out, "<a href=\"#metric-{}\">{}</a>", i, escape_xml(series[i].name));
    }
    html += "</nav>\n";
  }
  html += "</header>\n";

  // Subscribers that threw under a Disable error policy.
  if (bus_ != nullptr && !bus_->subscriber_failures().empty()) {
    html +=
        "<section id=\"failures\">\n<h2>Subscriber failures</h2>\n<p class=\"warn\">These "
        "subscribers threw; their error policy kept the run going without them.</p>\n";
    std::vector<std::vector<std::string>> rows;
    for (const auto& failure : bus_->subscriber_failures()) {
      rows.push_back({failure.subscriber, failure.event, std::to_string(failure.failures),
                      failure.disabled ? "disabled" : "recovered", failure.first_error});
    }
    write_table(html, "failures",
                {"subscriber", "first failure during", "failures", "status", "first error"}, rows);
    html += "</section>\n";
  }

  // Charts.
  html += "<section id=\"metrics\">\n<h2>Metrics</h2>\n";
  if (series.empty()) {
    html += "<p class=\"help\">No metric was recorded.</p>\n";
  } else {
    html +=
        "<p class=\"help\">One chart per metric. x: optimizer steps completed when the value was "
        "recorded (the same range on every chart); dashed lines: where an epoch begins; dots: "
        "the values (on short series); ring: the best value, for metrics where lower or higher "
        "is better. Non-finite values are not drawn and are counted in the caption.</p>\n"
        "<div class=\"charts\">\n";
    for (std::size_t i = 0; i < series.size(); ++i) {
      write_figure(html, i, series[i], options_, x_min, x_max, markers);
    }
    html += "</div>\n";
  }
  html += "</section>\n";

  // Charts added with add_chart.
  for (std::size_t i = 0; i < charts_.size(); ++i) {
    write_added_chart(html, i, charts_[i], options_);
  }

  // Options.
  html += "<section id=\"options\">\n<h2>Options</h2>\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& [key, value] : trainer_rows_) rows.push_back({key, value, "trainer"});
  for (const auto& [key, value] : app_rows_) rows.push_back({key, value, "application"});
  if (rows.empty()) {
    html += "<p class=\"help\">No options were recorded.</p>\n";
  } else {
    write_table(html, "options", {"option", "value", "from"}, rows);
  }
  html += "</section>\n";

  // Contributed tables.
  std::vector<std::string> problems;
  const auto tables = collect_tables(problems);
  for (std::size_t i = 0; i < tables.size(); ++i) {
    fmt::format_to(out, "<section class=\"extra\" id=\"table-{}\">\n<h2>{}</h2>\n", i,
                   escape_xml(tables[i].title));
    write_table(html, "extra", tables[i].header, tables[i].rows);
    html += "</section>\n";
  }
  for (const auto& problem : problems) {
    html += "<p class=\"warn\">" + escape_xml(problem) + "</p>\n";
  }

  html += "<footer>Written by torchbus RunReport '" + escape_xml(name()) +
          "'.</footer>\n</body>\n</html>\n";
  return html;
}

}  // namespace torchbus
