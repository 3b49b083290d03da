#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>
#include <torchbus/callbacks/logged_values.hpp>
#include <torchbus/callbacks/progress_bar.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/metric_names.hpp>
#include <torchbus/scalar_value.hpp>
#include <torchbus/state.hpp>

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <iterator>

namespace torchbus {

namespace {

/// The label of the step's loss (metric_names::kTrainLoss) on the bar.
constexpr const char* kLossLabel = "loss";

/// "12.3s", "4:05" or "1:02:03".
void append_duration(std::string& out, double seconds) {
  auto it = std::back_inserter(out);
  if (!std::isfinite(seconds) || seconds < 0) {
    fmt::format_to(it, "?");
  } else if (seconds < 60) {
    fmt::format_to(it, "{:.1f}s", seconds);
  } else {
    const auto total = static_cast<std::int64_t>(std::llround(seconds));
    if (total < 3600) {
      fmt::format_to(it, "{}:{:02}", total / 60, total % 60);
    } else {
      fmt::format_to(it, "{}:{:02}:{:02}", total / 3600, total / 60 % 60, total % 60);
    }
  }
}

/// Columns of the terminal on stdout, or 0 when unknown.
std::size_t terminal_width() {
  winsize size{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return 0;
}

}  // namespace

void ProgressBarOptions::validate() const {
  TORCHBUS_CHECK(std::isfinite(refresh_rate()) && refresh_rate() > 0, ConfigError,
                 "ProgressBar: refresh_rate must be a positive number of redraws per second, got ",
                 refresh_rate());
  TORCHBUS_CHECK(refresh_every_batches() >= 1, ConfigError,
                 "ProgressBar: refresh_every_batches must be >= 1, got ", refresh_every_batches());
  TORCHBUS_CHECK(!total_batches() || *total_batches() >= 1, ConfigError,
                 "ProgressBar: total_batches must be >= 1 when given, got ",
                 total_batches().value_or(0));
  TORCHBUS_CHECK(bar_width() >= 1, ConfigError, "ProgressBar: bar_width must be >= 1, got ",
                 bar_width());
  for (const auto& name : metrics_to_show()) {
    TORCHBUS_CHECK(!name.empty(), ConfigError,
                   "ProgressBar: metrics_to_show contains an empty name");
  }
}

ProgressBar::ProgressBar(ProgressBarOptions options)
    : Callback(options.name()), options_(std::move(options)) {
  // Writes no file, so it shows a fast dev run too (a Logger's default is to sit it out).
  set_role(Role::Logger).after(Role::Metrics).run_during(RunStage::FastDevRun);
  options_.validate();
  run_on_rank(0);
  mode_ = options_.mode();
  if (mode_ == ProgressBarMode::Auto) {
    mode_ = options_.stream() != nullptr || ::isatty(::fileno(stdout)) != 0
                ? ProgressBarMode::Bar
                : ProgressBarMode::Plain;
  }
  out_ = options_.stream() != nullptr ? options_.stream() : &std::cout;
  redraw_interval_ = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(1.0 / options_.refresh_rate()));
  line_.reserve(256);
}

void ProgressBar::on_action_start(State& /*state*/) {
  learned_total_.reset();
}

void ProgressBar::on_epoch_start(State& state) {
  epoch_start_ = Clock::now();
  next_draw_ = last_batch_end_ = epoch_start_;
  seen_ = 0;
  total_ = options_.total_batches() ? *options_.total_batches() : learned_total_.value_or(-1);
  if (total_ > 0 && state.max_steps >= 0) {
    // The step limit may end this epoch early.
    total_ = std::min(total_, (state.max_steps - state.step) * state.accumulate_grad_batches);
  }
}

void ProgressBar::on_batch_end(State& state) {
  const std::int64_t done = state.batch_in_epoch + 1;
  last_batch_end_ = Clock::now();  // the epoch's training time ends here (not its validation)
  ++seen_;
  if (mode_ == ProgressBarMode::Plain) {
    if (done % options_.refresh_every_batches() != 0) return;
    format(state, done, /*final=*/false);
    logger()->info("{}", line_);
    return;
  }
  const auto now = last_batch_end_;
  if (now < next_draw_) return;
  next_draw_ = now + redraw_interval_;
  format(state, done, /*final=*/false);
  draw_bar();
}

void ProgressBar::on_epoch_end(State& state) {
  const std::int64_t done = state.batch_in_epoch;
  const bool limited = state.max_steps >= 0 && state.step >= state.max_steps;
  if (!state.stop_requested() && !state.error && !limited && done > 0) learned_total_ = done;
  format(state, done, /*final=*/true);
  if (mode_ == ProgressBarMode::Plain) {
    logger()->info("{}", line_);
  } else {
    draw_bar();
    *out_ << '\n' << std::flush;
  }
}

void ProgressBar::append_value(const char* name, double value) {
  fmt::format_to(std::back_inserter(line_), " {}={:.6g}", name, value);
}

void ProgressBar::format(State& state, std::int64_t done, bool final) {
  line_.clear();
  auto out = std::back_inserter(line_);
  fmt::format_to(out, "epoch {}", state.epoch + 1);
  if (state.max_epochs >= 0) fmt::format_to(out, "/{}", state.max_epochs);
  // The final line reports the training time: up to the last batch, without epoch-end validation.
  const auto until = final ? last_batch_end_ : Clock::now();
  const double elapsed = std::chrono::duration<double>(until - epoch_start_).count();
  // Batches this callback saw (a run resumed inside an epoch starts counting at its position).
  const double rate = elapsed > 0 ? static_cast<double>(seen_) / elapsed : 0.0;
  const bool known = total_ > 0;
  if (final) {
    fmt::format_to(out, " done: {} batches in ", done);
    append_duration(line_, elapsed);
  } else if (mode_ == ProgressBarMode::Bar && known) {
    const double fraction =
        std::clamp(static_cast<double>(done) / static_cast<double>(total_), 0.0, 1.0);
    const auto filled = static_cast<int>(fraction * options_.bar_width());
    line_ += " [";
    line_.append(filled, '#');
    line_.append(options_.bar_width() - filled, '-');
    fmt::format_to(out, "] {}/{} {:3.0f}%", done, total_, fraction * 100);
  } else if (known) {
    fmt::format_to(out, " batch {}/{} ({:.0f}%)", done, total_,
                   std::min(1.0, static_cast<double>(done) / static_cast<double>(total_)) * 100);
  } else {
    fmt::format_to(out, " batch {}", done);
  }
  if (rate > 0) fmt::format_to(out, " {:.1f} batch/s", rate);
  if (!final && known && rate > 0) {
    line_ += " ETA ";
    append_duration(line_, static_cast<double>(std::max<std::int64_t>(total_ - done, 0)) / rate);
  }
  if (state.metrics.contains(metric_names::kTrainLoss)) {
    append_value(kLossLabel, state.metrics.latest(metric_names::kTrainLoss).value);
  }
  for (const auto& name : options_.metrics_to_show()) {
    if (state.metrics.contains(name)) {
      append_value(name.c_str(), state.metrics.latest(name).value);
    } else if (const at::Tensor* tensor = find_step_tensor(state, name);
               tensor != nullptr && tensor->defined() && tensor->numel() == 1 &&
               !tensor->is_complex()) {
      append_value(name.c_str(), scalar_value(*tensor));
    }
  }
}

void ProgressBar::draw_bar() {
  std::size_t length = line_.size();
  if (out_ == &std::cout) {
    // A line longer than the terminal would wrap and break the redraw in place.
    const std::size_t width = terminal_width();
    if (width > 1) length = std::min(length, width - 1);
  }
  *out_ << '\r';
  out_->write(line_.data(), static_cast<std::streamsize>(length));
  *out_ << "\x1b[K" << std::flush;
}

}  // namespace torchbus
