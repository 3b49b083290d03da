#include "support/model_weights.hpp"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>
#include <torchbus/atomic_file.hpp>
#include <torchbus/callbacks/lr_finder.hpp>
#include <torchbus/connection.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/rng_state.hpp>
#include <torchbus/state.hpp>
#include <torchbus/system_error_text.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace torchbus {
namespace {

/// Everything the sweep changes, kept in memory and put back bit for bit: the model's parameters
/// and buffers, the optimizer's state, its parameter groups' options, the training mode and the
/// default CPU generator (dropout, random data order).
class TrainingSnapshot {
 public:
  explicit TrainingSnapshot(Trainer& trainer)
      : module_(trainer.module()),
        optimizer_(trainer.optimizer()),
        weights_(detail::model_weights(module_, /*with_buffers=*/true)),
        was_training_(module_.is_training()),
        generators_(RngState::capture()) {
    for (const auto& tensor : weights_) copies_.push_back(tensor.detach().clone());
    torch::serialize::OutputArchive archive;
    optimizer_.save(archive);
    std::ostringstream bytes;
    archive.save_to(bytes);
    optimizer_state_ = bytes.str();
    for (auto& group : optimizer_.param_groups()) {
      group_options_.push_back(group.has_options() ? group.options().clone() : nullptr);
    }
  }

  void restore() {
    detail::copy_weights(copies_, weights_);
    // Loading adds the saved entries only: entries the sweep created must go first.
    optimizer_.state().clear();
    std::istringstream bytes(optimizer_state_);
    torch::serialize::InputArchive archive;
    archive.load_from(bytes);
    optimizer_.load(archive);
    auto& groups = optimizer_.param_groups();
    for (std::size_t i = 0; i < groups.size() && i < group_options_.size(); ++i) {
      if (group_options_[i]) groups[i].set_options(group_options_[i]->clone());
    }
    module_.train(was_training_);
    generators_.restore();
  }

 private:
  torch::nn::Module& module_;
  torch::optim::Optimizer& optimizer_;
  std::vector<at::Tensor> weights_;  // the model's own tensors
  std::vector<at::Tensor> copies_;   // their values before the sweep
  std::string optimizer_state_;      // the optimizer's serialized state
  std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> group_options_;
  bool was_training_;
  RngState generators_;  // the random generators before the sweep
};

/// Whether the smoothed loss `smoothed` ends the sweep: it is not finite, or above
/// divergence_threshold times `best`, the lowest smoothed loss so far (this one included).
bool diverges(double smoothed, double best, const LRFinderOptions& options) {
  const auto threshold = options.divergence_threshold();
  // A threshold is a multiple of the best loss: it means nothing for losses <= 0.
  return !std::isfinite(smoothed) || (threshold && best > 0.0 && smoothed > *threshold * best);
}

/// Sets the result's suggestion: the steepest descent of its smoothed loss under `options`.
void suggest(LRFinderResult& result, const LRFinderOptions& options) {
  result.suggestion_index = steepest_descent_index(result.lrs, result.smoothed_losses,
                                                   options.skip_begin(), options.skip_end());
  if (result.suggestion_index) result.suggestion = result.lrs[*result.suggestion_index];
}

/// A number of an lr_finder.csv cell as write_csv wrote it (also inf and nan); none when the cell
/// is anything else.
std::optional<double> csv_number(const std::string& cell) {
  if (cell.empty() || std::isspace(static_cast<unsigned char>(cell.front())) ||
      cell.find_first_of("xX") != std::string::npos) {  // strtod reads hexadecimal too
    return std::nullopt;
  }
  char* end = nullptr;
  const double value = std::strtod(cell.c_str(), &end);
  if (end != cell.c_str() + cell.size()) return std::nullopt;
  return value;
}

/// Records one point per applied step and decides when the sweep ends.
class Sweep {
 public:
  explicit Sweep(const LRFinderOptions& options) : options_(options) {}

  /// The learning rate of the next step.
  double next_lr() const {
    return sweep_learning_rate(options_, static_cast<std::int64_t>(result_.lrs.size()));
  }

  /// Records the loss of the step that used next_lr(); stops the run when the sweep is complete
  /// or diverged.
  void record(State& state) {
    const double lr = next_lr();
    const double loss = state.step_loss().item<double>();
    const double smoothed = result_.smoothed_losses.empty()
                                ? loss
                                : options_.smoothing() * loss +
                                      (1.0 - options_.smoothing()) * result_.smoothed_losses.back();
    result_.lrs.push_back(lr);
    result_.losses.push_back(loss);
    result_.smoothed_losses.push_back(smoothed);
    best_ = std::min(best_, smoothed);
    result_.diverged = diverges(smoothed, best_, options_);
    if (result_.diverged) {
      state.request_stop(fmt::format("LRFinder: the loss diverged at lr {:.4g}", lr));
    } else if (complete()) {
      state.request_stop(fmt::format("LRFinder: {} steps done", result_.lrs.size()));
    }
  }

  bool complete() const {
    return static_cast<std::int64_t>(result_.lrs.size()) >= options_.num_steps();
  }
  std::size_t points() const noexcept { return result_.lrs.size(); }
  LRFinderResult& result() noexcept { return result_; }

 private:
  const LRFinderOptions& options_;
  LRFinderResult result_;
  double best_ = std::numeric_limits<double>::infinity();
};

}  // namespace

void LRFinderOptions::validate() const {
  TORCHBUS_CHECK(std::isfinite(min_lr()) && min_lr() > 0.0, ConfigError,
                 "LRFinder: min_lr must be finite and > 0, got ", min_lr());
  TORCHBUS_CHECK(std::isfinite(max_lr()) && max_lr() > min_lr(), ConfigError,
                 "LRFinder: max_lr must be finite and > min_lr (", min_lr(), "), got ", max_lr());
  TORCHBUS_CHECK(num_steps() >= 2, ConfigError, "LRFinder: num_steps must be >= 2, got ",
                 num_steps());
  TORCHBUS_CHECK(smoothing() > 0.0 && smoothing() <= 1.0, ConfigError,
                 "LRFinder: smoothing must be in (0, 1] (1: no smoothing), got ", smoothing());
  TORCHBUS_CHECK(!divergence_threshold() || *divergence_threshold() > 1.0, ConfigError,
                 "LRFinder: divergence_threshold must be > 1 (or none), got ",
                 divergence_threshold().value_or(0.0));
  TORCHBUS_CHECK(skip_begin() >= 0 && skip_end() >= 0, ConfigError,
                 "LRFinder: skip_begin and skip_end must be >= 0, got ", skip_begin(), " and ",
                 skip_end());
}

double sweep_learning_rate(const LRFinderOptions& options, std::int64_t index) {
  const auto last = options.num_steps() - 1;
  if (index == last) return options.max_lr();  // exactly, whatever the rounding
  const double fraction = static_cast<double>(index) / static_cast<double>(last);
  if (options.mode() == LRSweepMode::Linear) {
    return options.min_lr() + (options.max_lr() - options.min_lr()) * fraction;
  }
  return options.min_lr() * std::pow(options.max_lr() / options.min_lr(), fraction);
}

std::optional<std::size_t> steepest_descent_index(const std::vector<double>& lrs,
                                                  const std::vector<double>& losses,
                                                  std::int64_t skip_begin, std::int64_t skip_end) {
  TORCHBUS_CHECK(lrs.size() == losses.size(), ConfigError, "steepest_descent_index: ", lrs.size(),
                 " learning rates but ", losses.size(), " losses");
  TORCHBUS_CHECK(skip_begin >= 0 && skip_end >= 0, ConfigError,
                 "steepest_descent_index: skip_begin and skip_end must be >= 0, got ", skip_begin,
                 " and ", skip_end);
  const auto count = static_cast<std::int64_t>(lrs.size());
  std::vector<std::size_t> kept;
  std::vector<double> x, y;
  for (std::int64_t i = skip_begin; i < count - skip_end; ++i) {
    const auto index = static_cast<std::size_t>(i);
    if (!std::isfinite(losses[index])) continue;
    TORCHBUS_CHECK(std::isfinite(lrs[index]) && lrs[index] > 0.0, ConfigError,
                   "steepest_descent_index: learning rate ", index, " must be finite and > 0, got ",
                   lrs[index]);
    const double log_lr = std::log10(lrs[index]);
    TORCHBUS_CHECK(x.empty() || log_lr > x.back(), ConfigError,
                   "steepest_descent_index: the learning rates must increase, but lr ", index,
                   " is ", lrs[index], " after ", lrs[kept.back()]);
    kept.push_back(index);
    x.push_back(log_lr);
    y.push_back(losses[index]);
  }
  const auto n = x.size();
  if (n < 2) return std::nullopt;
  const auto gradient = [&](std::size_t i) {
    if (i == 0) return (y[1] - y[0]) / (x[1] - x[0]);
    if (i == n - 1) return (y[n - 1] - y[n - 2]) / (x[n - 1] - x[n - 2]);
    const double left = x[i] - x[i - 1], right = x[i + 1] - x[i];
    return -right / (left * (left + right)) * y[i - 1] + (right - left) / (left * right) * y[i] +
           left / (right * (left + right)) * y[i + 1];
  };
  std::size_t steepest = 0;
  double lowest = gradient(0);
  for (std::size_t i = 1; i < n; ++i) {
    const double value = gradient(i);
    if (value < lowest) {
      lowest = value;
      steepest = i;
    }
  }
  return kept[steepest];
}

void LRFinderResult::write_csv(const std::filesystem::path& path) const {
  std::string text = "step,lr,loss,smoothed_loss\n";
  auto out = std::back_inserter(text);
  for (std::size_t i = 0; i < lrs.size(); ++i) {
    fmt::format_to(out, "{},{:.17g},{:.17g},{:.17g}\n", i, lrs[i], losses[i], smoothed_losses[i]);
  }
  write_file_atomically(path, text);
}

LRFinderResult LRFinderResult::read_csv(const std::filesystem::path& path,
                                        const LRFinderOptions& options) {
  options.validate();
  std::ifstream in(path, std::ios::binary);
  TORCHBUS_CHECK(in.is_open(), Error, "LRFinder: cannot open '", path.string(),
                 "': ", system_error_text(errno));
  const auto fail = [&](std::size_t line, const auto&... what) {
    throw Error(
        detail::concat("LRFinder: ", path.string(), " line ", line, ": ", what...,
                       " (expected the table write_csv writes: step,lr,loss,smoothed_loss, one "
                       "row per step, from step 0, increasing learning rates)"));
  };
  std::string text;
  if (!std::getline(in, text) || text != "step,lr,loss,smoothed_loss") {
    fail(1, "the header is '", text.substr(0, 80), "'");
  }
  LRFinderResult result;
  double best = std::numeric_limits<double>::infinity();
  for (std::size_t line = 2; std::getline(in, text); ++line) {
    std::vector<std::string> cells;
    std::istringstream row(text);
    for (std::string cell; std::getline(row, cell, ',');) cells.push_back(cell);
    if (cells.size() != 4 || text.back() == ',')
      fail(line, "'", text.substr(0, 80), "' is not 4 cells");
    const auto step = csv_number(cells[0]), lr = csv_number(cells[1]), loss = csv_number(cells[2]),
               smoothed = csv_number(cells[3]);
    if (!step || !lr || !loss || !smoothed)
      fail(line, "'", text.substr(0, 80), "' is not 4 numbers");
    if (*step != static_cast<double>(result.lrs.size())) {
      fail(line, "step ", cells[0], " where step ", result.lrs.size(), " belongs");
    }
    if (!std::isfinite(*lr) || *lr <= 0.0 || (!result.lrs.empty() && *lr <= result.lrs.back())) {
      fail(line, "lr ", cells[1], " is not finite, > 0 and above the row before");
    }
    if (result.diverged) fail(line, "a row after the sweep diverged");
    result.lrs.push_back(*lr);
    result.losses.push_back(*loss);
    result.smoothed_losses.push_back(*smoothed);
    best = std::min(best, *smoothed);
    result.diverged = diverges(*smoothed, best, options);
  }
  TORCHBUS_CHECK(!in.bad(), Error, "LRFinder: reading '", path.string(),
                 "' failed: ", system_error_text(errno));
  suggest(result, options);
  return result;
}

LRFinderResult find_learning_rate_source(Trainer& trainer, BatchSource& train,
                                         const LRFinderOptions& options) {
  options.validate();
  TORCHBUS_CHECK(trainer.process_group() == nullptr, ConfigError,
                 "LRFinder: the trainer has a process group; every rank would sweep on its own "
                 "losses. Run the range test in one process, before set_process_group");
  Sweep sweep(options);
  TrainingSnapshot snapshot(trainer);
  // Last at StepStart, so that the sweep's learning rate wins over any scheduler's.
  const ScopedConnection set_lr = trainer.on(
      Event::StepStart,
      [&](State& state) {
        const double lr = sweep.next_lr();
        for (auto& group : state.optimizer->param_groups()) group.options().set_lr(lr);
      },
      std::numeric_limits<int>::max());
  const ScopedConnection record = trainer.on(
      Event::StepEnd,
      [&](State& state) {
        if (!state.update_skipped && !state.error) sweep.record(state);
      },
      std::numeric_limits<int>::min());
  try {
    // fit() again while the data or the trainer's limits end it before the sweep is done.
    while (!sweep.complete() && !sweep.result().diverged) {
      const auto before = sweep.points();
      trainer.fit_sources(train, nullptr);
      if (trainer.state().stop_requested() || sweep.points() == before) break;
    }
  } catch (...) {
    snapshot.restore();
    throw;
  }
  snapshot.restore();

  auto result = std::move(sweep.result());
  suggest(result, options);
  auto log = logger();
  if (result.lrs.empty()) {
    log->warn("LRFinder: no step was recorded; no suggestion");
  } else if (result.suggestion) {
    log->info(
        "LRFinder: {} steps, lr {:.4g} to {:.4g}{}; suggested lr {:.4g} (steepest descent "
        "of the smoothed loss, step {})",
        result.lrs.size(), result.lrs.front(), result.lrs.back(),
        result.diverged ? ", stopped: the loss diverged" : "", *result.suggestion,
        *result.suggestion_index);
  } else {
    log->warn(
        "LRFinder: {} steps, lr {:.4g} to {:.4g}{}: too few finite points after skipping "
        "{} at the start and {} at the end; no suggestion",
        result.lrs.size(), result.lrs.front(), result.lrs.back(),
        result.diverged ? ", stopped: the loss diverged" : "", options.skip_begin(),
        options.skip_end());
  }
  return result;
}

}  // namespace torchbus
