#include <ATen/ATen.h>
#include <spdlog/spdlog.h>
#include <torch/nn/module.h>
#include <torch/serialize/archive.h>
#include <torchbus/callbacks/logged_values.hpp>
#include <torchbus/callbacks/terminate_on_nan.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/state.hpp>

#include <ATen/Dispatch.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>

namespace torchbus {

namespace {

/// Whether every element of `tensor` is finite, read directly from host memory when that is
/// possible: a dense, contiguous CPU tensor of a real type holds its values as soon as the op that
/// produced it returned, so reading them is no host sync and costs no dispatcher call (the tensor
/// ops `isfinite().all()` + `stack` + `item` cost ~70,000 instructions per step on a small model).
/// Returns false when the tensor must be checked with tensor ops (accelerators, other layouts,
/// complex and quantized types); `finite` is set only when it returns true.
bool finite_on_host(const at::Tensor& tensor, bool& finite) {
  if (!tensor.device().is_cpu() || tensor.layout() != at::kStrided || !tensor.is_contiguous()) {
    return false;
  }
  const auto type = tensor.scalar_type();
  if (c10::isIntegralType(type, /*includeBool=*/true)) {
    finite = true;
    return true;
  }
  if (!c10::isFloatingType(type)) return false;
  const std::int64_t count = tensor.numel();
  std::int64_t non_finite = 0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, type, "terminate_on_nan", [&] {
    const scalar_t* data = tensor.data_ptr<scalar_t>();
    for (std::int64_t i = 0; i < count; ++i) {
      non_finite += std::isfinite(static_cast<double>(data[i])) ? 0 : 1;
    }
  });
  finite = non_finite == 0;
  return true;
}

/// A float32 value, computed where `tensor` is, that is finite exactly when every element of the
/// tensor is: a one-element float tensor's own value (no op), otherwise the sum of the elements
/// times zero (0, or NaN when one is not finite; multiplied first, large finite values cannot
/// overflow the sum). Two ops at most, where `isfinite().all()` takes five (ATen's isfinite is
/// eq, abs, ne and mul), each a kernel launch on a GPU.
at::Tensor finite_probe(const at::Tensor& tensor) {
  auto values = tensor.detach();
  if (values.is_complex()) values = at::view_as_real(values);
  const auto type = values.scalar_type();
  const bool fits_float = type == at::kFloat || type == at::kHalf || type == at::kBFloat16;
  auto probe = values.numel() == 1 && fits_float ? values.reshape({}) : values.mul(0).sum();
  return probe.scalar_type() == at::kFloat ? probe : probe.to(at::kFloat);
}

/// The position of the first of the `count` probes at `values` (finite_probe) that is not finite,
/// or `count` when all are.
std::size_t first_non_finite(const float* values, std::size_t count) {
  return static_cast<std::size_t>(
      std::find_if(values, values + count, [](float value) { return !std::isfinite(value); }) -
      values);
}

}  // namespace

TerminateOnNaN::TerminateOnNaN(TerminateOnNaNOptions options)
    : Callback(options.name()), options_(std::move(options)) {
  set_role(Role::Monitor).after(Role::Metrics).before(Role::Scheduler);
  TORCHBUS_CHECK(!options_.tensors().empty() || options_.check_gradients(), ConfigError,
                 "TerminateOnNaN has nothing to check: tensors is empty and check_gradients is "
                 "false; expected at least one tensor name (e.g. \"loss\") or check_gradients");
  for (const auto& tensor : options_.tensors()) {
    TORCHBUS_CHECK(!tensor.empty(), ConfigError,
                   "TerminateOnNaN got an empty tensor name; expected names of tensors in the "
                   "tensor store such as \"loss\"");
  }
}

void TerminateOnNaN::on_action_start(State& state) {
  parameters_.clear();
  in_flight_.clear();
  spare_.clear();
  probes_.clear();
  checks_.clear();
  if (options_.check_gradients() && state.model != nullptr) {
    parameters_ = state.model->parameters();
  }
}

void TerminateOnNaN::forget_earlier_steps(const State& state) noexcept {
  // Left over only when a step ended without its BeforeOptimizerStep (cancelled, skipped); the
  // probes read there are cleared there, so what is left holds tensor checks, oldest first.
  const auto window_start = state.global_batch - state.window_position;
  if (!checks_.empty() && checks_.front().global_batch < window_start) {
    probes_.clear();
    checks_.clear();
  }
}

void TerminateOnNaN::on_after_backward(State& state) {
  forget_earlier_steps(state);
  const auto& names = options_.tensors();
  for (std::size_t i = 0; i < names.size(); ++i) {
    const auto* tensor = find_step_tensor(state, names[i]);
    TORCHBUS_CHECK(tensor != nullptr && tensor->defined(), ConfigError, "TerminateOnNaN: tensor '",
                   names[i], "' is not there at AfterBackward (epoch ", state.epoch, ", step ",
                   state.step, "); present: ", detail::join_or_none(step_tensor_names(state)),
                   ". A custom train step must store it with state.tensors.set(\"", names[i],
                   "\", ...) (its output: state.set_batch_output(...)), or configure "
                   "TerminateOnNaNOptions::tensors");
    bool finite = true;
    if (finite_on_host(*tensor, finite)) {
      if (finite) continue;  // nothing left to read at BeforeOptimizerStep
      // A constant non-finite probe: reported like the others, in batch order.
      probes_.push_back(at::full({}, std::numeric_limits<float>::quiet_NaN()));
    } else if (c10::isIntegralType(tensor->scalar_type(), /*includeBool=*/true)) {
      continue;  // integers are finite
    } else {
      probes_.push_back(finite_probe(*tensor));
    }
    checks_.push_back(Check{i, state.global_batch});
  }
}

void TerminateOnNaN::on_before_optimizer_step(State& state) {
  // A GPU's probes of earlier steps first: a non-finite one stops the run at this step.
  if (read_in_flight(state, /*wait=*/false)) {
    probes_.clear();
    checks_.clear();
    return;
  }
  if (options_.check_gradients()) {
    gradient_probes_.clear();
    for (const auto& parameter : parameters_) {
      const auto& grad = parameter.grad();
      if (grad.defined()) gradient_probes_.push_back(finite_probe(grad));
    }
    if (!gradient_probes_.empty()) {
      probes_.push_back(at::stack(gradient_probes_).sum());
      checks_.push_back(Check{options_.tensors().size(), -1});
    }
  }
  if (probes_.empty()) return;
  // Probes of the CPU beside a device's (a custom tensor on the host beside a GPU's loss) join the
  // device's, which are read without waiting for the device.
  auto device = c10::Device(c10::kCPU);
  for (const auto& probe : probes_) {
    if (!probe.device().is_cpu()) device = probe.device();
  }
  for (auto& probe : probes_) {
    if (probe.device() != device) probe = probe.to(device);
  }
  const auto stacked = probes_.size() == 1 ? probes_.front().reshape({1}) : at::stack(probes_);
  if (stacked.device().is_cpu()) {
    // On the CPU the probes are computed by now: reading them waits for nothing.
    const auto values = stacked.contiguous();
    const auto bad = first_non_finite(values.data_ptr<float>(), probes_.size());
    if (bad < probes_.size()) {
      report(state, checks_[bad], state.step, state.epoch, /*before_update=*/true);
    }
  } else {
    send_to_host(stacked, state);
  }
  probes_.clear();
  checks_.clear();
}

void TerminateOnNaN::send_to_host(const at::Tensor& probes, const State& state) {
  const auto reusable = [&](const InFlight& read) {
    return read.host.sizes() == probes.sizes() &&
           read.copied.device_type() == probes.device().type() &&
           (!read.copied.was_marked_for_recording() ||
            read.copied.device_index() == probes.device().index());
  };
  if (spare_.empty() || !reusable(spare_.back())) {
    spare_.clear();
    spare_.push_back(
        InFlight{at::empty(probes.sizes(), probes.options().device(at::kCPU).pinned_memory(true)),
                 c10::Event(probes.device().type()),
                 {},
                 0,
                 0});
  }
  auto flight = std::move(spare_.back());
  spare_.pop_back();
  flight.host.copy_(probes, /*non_blocking=*/true);
  const c10::impl::VirtualGuardImpl device(probes.device().type());
  flight.copied.record(device.getStream(probes.device()));
  flight.checks.assign(checks_.begin(), checks_.end());
  flight.step = state.step;
  flight.epoch = state.epoch;
  // In flight once its copy is queued and recorded: a copy that threw (an earlier CUDA error
  // surfacing) leaves no entry whose unrecorded event would read as done.
  in_flight_.push_back(std::move(flight));
}

bool TerminateOnNaN::read_in_flight(State& state, bool wait) {
  // Waiting happens at the end of an epoch or of the action, after the last update.
  const bool before_update = !wait;
  while (!in_flight_.empty()) {
    auto& oldest = in_flight_.front();
    if (!oldest.copied.query()) {
      if (!wait) return false;
      std::this_thread::yield();
      continue;
    }
    const auto count = static_cast<std::size_t>(oldest.host.numel());
    const auto bad = first_non_finite(oldest.host.data_ptr<float>(), count);
    if (bad == count) {
      spare_.push_back(std::move(oldest));
      in_flight_.pop_front();
      continue;
    }
    report(state, oldest.checks[bad], oldest.step, oldest.epoch, before_update);
    in_flight_.clear();
    return true;
  }
  return false;
}

void TerminateOnNaN::report(State& state, const Check& check, std::int64_t step, std::int64_t epoch,
                            bool before_update) {
  std::string what;
  if (check.tensor == options_.tensors().size()) {
    what = "a gradient";
  } else {
    what = detail::concat("tensor '", options_.tensors()[check.tensor], "' of batch ",
                          check.global_batch);
  }
  std::string outcome;
  if (step == state.step && before_update) {
    outcome = "; the step's update was skipped and training stops";
  } else {
    // A GPU's probes, read once they had reached the host.
    outcome = detail::concat(
        "; read ", state.step - step,
        " step(s) later without waiting for the GPU: the updates of steps ", step, " to ",
        state.step - 1, " were applied",
        before_update ? detail::concat(", step ", state.step, "'s is skipped") : std::string(),
        " and training stops");
  }
  reason_ = detail::concat("TerminateOnNaN: ", what, " is not finite (NaN or infinite) at step ",
                           step, " (0-based), epoch ", epoch, outcome);
  logger()->error(reason_);
  if (before_update) state.skip_update = true;
  state.request_stop(reason_);
}

void TerminateOnNaN::on_epoch_end(State& state) {
  read_in_flight(state, /*wait=*/true);
}

void TerminateOnNaN::on_action_end(State& state) {
  read_in_flight(state, /*wait=*/true);
}

void TerminateOnNaN::save_state(torch::serialize::OutputArchive& archive) const {
  archive.write("reason", c10::IValue(reason_));
}

void TerminateOnNaN::load_state(torch::serialize::InputArchive& archive) {
  c10::IValue reason;
  archive.read("reason", reason);
  reason_ = reason.toStringRef();
}

}  // namespace torchbus
