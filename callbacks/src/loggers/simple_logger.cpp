#include <spdlog/fmt/fmt.h>
#include <spdlog/fmt/ranges.h>  // fmt::join (in fmt/format.h before fmt 11)
#include <spdlog/spdlog.h>
#include <torchbus/callbacks/logged_values.hpp>
#include <torchbus/callbacks/simple_logger.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/scalar_value.hpp>
#include <torchbus/state.hpp>

#include <ATen/ops/stack.h>

#include <iterator>

namespace torchbus {

void SimpleLoggerOptions::validate() const {
  TORCHBUS_CHECK(step_freq() >= 1, ConfigError, "SimpleLogger: step_freq must be >= 1, got ",
                 step_freq());
  TORCHBUS_CHECK(!tensors_to_log().empty(), ConfigError,
                 "SimpleLogger: tensors_to_log is empty, so there is nothing to log; name at least "
                 "one tensor of the tensor store, e.g. {\"step_loss\"}");
  for (const auto& name : tensors_to_log()) {
    TORCHBUS_CHECK(!name.empty(), ConfigError,
                   "SimpleLogger: tensors_to_log contains an empty name");
  }
  TORCHBUS_CHECK(precision() >= 1 && precision() <= 17, ConfigError,
                 "SimpleLogger: precision must be in [1, 17] significant digits, got ",
                 precision());
}

SimpleLogger::SimpleLogger(SimpleLoggerOptions options)
    : Callback(options.name()), options_(std::move(options)) {
  // Writes no file, so it shows a fast dev run too (a Logger's default is to sit it out).
  set_role(Role::Logger).after(Role::Metrics).run_during(RunStage::FastDevRun);
  options_.validate();
  run_on_rank(0);  // one log per run, not one per process
  warned_.assign(options_.tensors_to_log().size(), false);
}

void SimpleLogger::on_action_start(State& /*state*/) {
  mark_step_ = -1;
}

void SimpleLogger::on_epoch_start(State& state) {
  if (mark_step_ >= 0) return;
  // The first epoch of the action: counters are final here, also when a resume restored them.
  mark_step_ = state.step;
  mark_time_ = Clock::now();
}

void SimpleLogger::on_step_end(State& state) {
  if (state.error || state.update_skipped || state.step % options_.step_freq() != 0) return;
  log_step(state);
}

void SimpleLogger::log_step(State& state) {
  line_.clear();
  fmt::format_to(std::back_inserter(line_), "step {} epoch {}:", state.step, state.epoch);
  const auto& names = options_.tensors_to_log();
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (find_step_tensor(state, names[i]) != nullptr) {
      append_tensor(line_, names[i], state);
    } else if (!warned_[i]) {
      warned_[i] = true;
      warn_tensor_not_logged(state, names[i], nullptr, {"SimpleLogger", *this},
                             "it is left out of the log");
    }
  }
  if (options_.log_lr()) append_lr(line_, state);
  if (options_.log_step_time()) {
    const auto now = Clock::now();
    if (mark_step_ >= 0 && state.step > mark_step_) {
      const std::chrono::duration<double, std::milli> elapsed = now - mark_time_;
      fmt::format_to(std::back_inserter(line_), " step_time={:.{}g}ms",
                     elapsed.count() / static_cast<double>(state.step - mark_step_),
                     options_.precision());
    }
    mark_time_ = now;
    mark_step_ = state.step;
  }
  logger()->info("{}", line_);
}

void SimpleLogger::append_tensor(std::string& line, const std::string& name, State& state) {
  const at::Tensor& tensor = *find_step_tensor(state, name);
  const int digits = options_.precision();
  auto out = std::back_inserter(line);
  if (!tensor.defined()) {
    fmt::format_to(out, " {}=undefined", name);
  } else if (tensor.numel() == 1 && !tensor.is_complex()) {
    fmt::format_to(out, " {}={:.{}g}", name, scalar_value(tensor), digits);
  } else {
    fmt::format_to(out, " {}=[{}]", name, fmt::join(tensor.sizes(), ", "));
    if (tensor.numel() == 0) {
      fmt::format_to(out, " empty");
    } else if (tensor.is_complex()) {
      fmt::format_to(out, " complex");
    } else {
      const auto values = tensor.detach().to(at::kDouble);
      // One host read for the four statistics.
      const auto stats = at::stack({values.mean(), values.std(), values.min(), values.max()}).cpu();
      const auto* s = stats.data_ptr<double>();
      fmt::format_to(out, " mean={:.{}g} std={:.{}g} min={:.{}g} max={:.{}g}", s[0], digits, s[1],
                     digits, s[2], digits, s[3], digits);
    }
  }
}

void SimpleLogger::append_lr(std::string& line, State& state) {
  const auto lr = lr_.read(state, {"SimpleLogger", *this},
                           "it is left out of the log (set log_lr(false) to silence this)");
  if (lr) fmt::format_to(std::back_inserter(line), " lr={:.{}g}", *lr, options_.precision());
}

}  // namespace torchbus
