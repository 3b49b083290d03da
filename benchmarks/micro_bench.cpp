// Micro-benchmarks of the bus: what an emission, a class callback, a filter and a custom event
// cost, against the plainest C++ equivalent (a loop over std::function). No tensors are involved;
// subscribers do trivial work on State so that only the dispatch is measured.
//
// Names are parsed by benchmarks/run (dispatch_ns_per_subscriber, dispatch_vs_function_ratio):
// keep BM_Emit/<n> and BM_FunctionVector/<n>.
//
// The last group measures the tensor bookkeeping the Trainer does per step besides emitting
// (detach, metric history, tensor store), which is what the loop benchmark's "none" variant pays
// over the hand-written loop.
//
// BM_EmitObserved/<n> is BM_Emit with a DispatchObserver installed (the Profiler's cost per call).
//
// BM_EMA_StepEnd is one update of the EMA callback on the 784-256-10 MLP's parameters, against
// BM_Lerp_PerParameter, the same `lerp_` per parameter written by hand (benchmarks/run prints
// ema_over_lerp).
//
// Every benchmark reports allocs_per_iter: heap allocations (global operator new) per iteration,
// which must be 0 for an emission (docs/performance.md).

#include <ATen/ATen.h>
#include <benchmark/benchmark.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <support/allocation_count.hpp>
#include <torchbus/bus.hpp>
#include <torchbus/callback.hpp>
#include <torchbus/callbacks/ema.hpp>
#include <torchbus/dispatch_observer.hpp>
#include <torchbus/filter.hpp>
#include <torchbus/metric_history.hpp>
#include <torchbus/state.hpp>
#include <torchbus/tensor_store.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace {

using torchbus::Event;
using torchbus::EventPublisher;
using torchbus::State;

using torchbus::testing::allocations;

/// Reports the heap allocations made since `start` per iteration; call right after the loop.
void report_allocations(benchmark::State& bench, std::uint64_t start) {
  const auto count = allocations() - start;
  const auto iterations = std::max<benchmark::IterationCount>(bench.iterations(), 1);
  bench.counters["allocs_per_iter"] = static_cast<double>(count) / static_cast<double>(iterations);
}

/// The subscriber every benchmark uses: one increment of a State counter.
void bump(State& state) {
  ++state.eval_batch;
}

// Benchmark functions keep Google Benchmark's BM_ names: benchmarks/run parses them.
// NOLINTBEGIN(readability-identifier-naming)

/// The loop alone, for comparison with an emission that has no subscribers.
void BM_EmptyLoop(benchmark::State& bench) {
  State state;
  const auto allocations_before = allocations();
  for (auto _ : bench) {
    benchmark::DoNotOptimize(&state);
    benchmark::ClobberMemory();
  }
  report_allocations(bench, allocations_before);
}
BENCHMARK(BM_EmptyLoop);

/// EventPublisher::emit of StepEnd with n lambda subscribers, under `observer` when given; returns
/// the number of subscriber calls made.
std::int64_t run_emit(benchmark::State& bench, torchbus::DispatchObserver* observer) {
  const auto subscribers = bench.range(0);
  EventPublisher publisher;
  auto& bus = publisher.bus();
  State state;
  for (std::int64_t i = 0; i < subscribers; ++i) {
    bus.on(Event::StepEnd, [](State& s) { ++s.eval_batch; });
  }
  if (observer != nullptr) set_dispatch_observer(bus, observer);
  const auto allocations_before = allocations();
  for (auto _ : bench) {
    benchmark::DoNotOptimize(&state);
    publisher.emit(Event::StepEnd, state);
    benchmark::ClobberMemory();
  }
  report_allocations(bench, allocations_before);
  bench.counters["subscribers"] = static_cast<double>(subscribers);
  return state.eval_batch;
}

/// EventPublisher::emit of StepEnd with n lambda subscribers.
void BM_Emit(benchmark::State& bench) {
  const auto calls = run_emit(bench, nullptr);
  if (calls != static_cast<std::int64_t>(bench.iterations()) * bench.range(0)) {
    bench.SkipWithError("subscribers did not all run");
  }
}
BENCHMARK(BM_Emit)->Arg(0)->Arg(1)->Arg(8)->Arg(32);

/// The hand-written equivalent: a loop over a vector of std::function of the same size.
void BM_FunctionVector(benchmark::State& bench) {
  const auto subscribers = bench.range(0);
  std::vector<std::function<void(State&)>> slots;
  for (std::int64_t i = 0; i < subscribers; ++i) {
    slots.emplace_back([](State& s) { ++s.eval_batch; });
  }
  State state;
  const auto allocations_before = allocations();
  for (auto _ : bench) {
    benchmark::DoNotOptimize(&state);
    benchmark::DoNotOptimize(slots.data());
    for (auto& slot : slots) slot(state);
    benchmark::ClobberMemory();
  }
  report_allocations(bench, allocations_before);
  if (state.eval_batch != static_cast<std::int64_t>(bench.iterations()) * subscribers) {
    bench.SkipWithError("slots did not all run");
  }
  bench.counters["subscribers"] = static_cast<double>(subscribers);
}
BENCHMARK(BM_FunctionVector)->Arg(0)->Arg(1)->Arg(8)->Arg(32);

/// A DispatchObserver that only sums the reported times.
class SummingObserver : public torchbus::DispatchObserver {
 public:
  std::int64_t calls = 0;
  std::int64_t nanoseconds = 0;
  void on_dispatch(const torchbus::DispatchTiming& timing) noexcept override {
    ++calls;
    nanoseconds += timing.nanoseconds;
  }
};

/// BM_Emit with a DispatchObserver installed: what observing (e.g. the Profiler) adds per
/// subscriber call, two steady_clock reads and one virtual call.
void BM_EmitObserved(benchmark::State& bench) {
  SummingObserver observer;
  run_emit(bench, &observer);
  if (observer.calls != static_cast<std::int64_t>(bench.iterations()) * bench.range(0)) {
    bench.SkipWithError("calls were not all observed");
  }
}
BENCHMARK(BM_EmitObserved)->Arg(1)->Arg(8)->Arg(32);

// ---- class callbacks: every built-in event is emitted once per iteration
// --------------------------

void emit_every_event(EventPublisher& publisher, State& state) {
  for (std::size_t i = 0; i < torchbus::kEventCount; ++i) {
    publisher.emit(static_cast<Event>(i), state);
  }
}

/// Overrides one hook: 1 of the 17 emissions reaches it, the other 16 cost one branch each.
class OneHook : public torchbus::Callback {
 public:
  void on_step_end(State& state) override { bump(state); }
};

/// Overrides every hook: all 17 emissions reach it.
class AllHooks : public torchbus::Callback {
 public:
#define TORCHBUS_BENCH_HOOK(Name, name)   \
  void on_##name(State& state) override { \
    bump(state);                          \
  }
  TORCHBUS_FOR_EACH_EVENT(TORCHBUS_BENCH_HOOK)
#undef TORCHBUS_BENCH_HOOK
};

void BM_AllEvents_NoCallback(benchmark::State& bench) {
  EventPublisher publisher;
  State state;
  const auto allocations_before = allocations();
  for (auto _ : bench) {
    benchmark::DoNotOptimize(&state);
    emit_every_event(publisher, state);
    benchmark::ClobberMemory();
  }
  report_allocations(bench, allocations_before);
}
BENCHMARK(BM_AllEvents_NoCallback);

template <typename CallbackType>
void BM_AllEvents_Callback(benchmark::State& bench) {
  EventPublisher publisher;
  State state;
  const auto connection = publisher.bus().add(std::make_shared<CallbackType>());
  const auto allocations_before = allocations();
  for (auto _ : bench) {
    benchmark::DoNotOptimize(&state);
    emit_every_event(publisher, state);
    benchmark::ClobberMemory();
  }
  report_allocations(bench, allocations_before);
  bench.counters["hooks_connected"] = static_cast<double>(connection.size());
  if (state.eval_batch != static_cast<std::int64_t>(bench.iterations() * connection.size())) {
    bench.SkipWithError("hooks did not all run");
  }
}
BENCHMARK_TEMPLATE(BM_AllEvents_Callback, OneHook)->Name("BM_AllEvents_Callback_OneHook");
BENCHMARK_TEMPLATE(BM_AllEvents_Callback, AllHooks)->Name("BM_AllEvents_Callback_AllHooks");

// ---- filters ------------------------------------------------------------------------------------

/// One StepEnd subscriber without a filter (the step counter advances as in the loop).
void BM_Filter_None(benchmark::State& bench) {
  EventPublisher publisher;
  State state;
  publisher.bus().on(Event::StepEnd, bump);
  const auto allocations_before = allocations();
  for (auto _ : bench) {
    ++state.step;
    benchmark::DoNotOptimize(&state);
    publisher.emit(Event::StepEnd, state);
    benchmark::ClobberMemory();
  }
  report_allocations(bench, allocations_before);
}
BENCHMARK(BM_Filter_None);

/// One StepEnd subscriber behind every(n): n = 1 runs it each time (pure filter cost), n = 50
/// skips 49 of 50 (the usual logger case).
void BM_Filter_Every(benchmark::State& bench) {
  EventPublisher publisher;
  State state;
  publisher.bus().on(Event::StepEnd, torchbus::every(bench.range(0)), bump);
  const auto allocations_before = allocations();
  for (auto _ : bench) {
    ++state.step;
    benchmark::DoNotOptimize(&state);
    publisher.emit(Event::StepEnd, state);
    benchmark::ClobberMemory();
  }
  report_allocations(bench, allocations_before);
  if (state.eval_batch != state.step / bench.range(0)) bench.SkipWithError("filter miscounted");
}
BENCHMARK(BM_Filter_Every)->Arg(1)->Arg(50);

// ---- custom events ------------------------------------------------------------------------------

/// A bus with four custom events (the emitted one registered last) and one subscriber on it.
struct CustomFixture {
  EventPublisher publisher;
  torchbus::CustomEventPublisher event;
  CustomFixture() {
    auto& bus = publisher.bus();
    bus.register_event("gan_generator_step");
    bus.register_event("gan_discriminator_step");
    bus.register_event("checkpoint_saved");
    event = bus.register_event("swa_update");
    bus.on(event, bump);
  }
};

void BM_Custom_ById(benchmark::State& bench) {
  CustomFixture fixture;
  State state;
  const auto allocations_before = allocations();
  for (auto _ : bench) {
    benchmark::DoNotOptimize(&state);
    fixture.event.emit(state);
    benchmark::ClobberMemory();
  }
  report_allocations(bench, allocations_before);
}
BENCHMARK(BM_Custom_ById);

// ---- the Trainer's per-step tensor bookkeeping (see Trainer::run_step / run_batch)
// -----------------

/// A scalar loss with an autograd history, like the one the train step returns.
at::Tensor scalar_loss() {
  auto weight = at::ones({4}).set_requires_grad(true);
  return (weight * 2).sum();
}

/// `loss.detach()`: what run_batch does to accumulate the window loss, and MetricHistory::record
/// does again (with a reshape) for "train_loss".
void BM_Bookkeeping_Detach(benchmark::State& bench) {
  const auto loss = scalar_loss();
  const auto allocations_before = allocations();
  for (auto _ : bench) {
    auto detached = loss.detach();
    benchmark::DoNotOptimize(detached.unsafeGetTensorImpl());
  }
  report_allocations(bench, allocations_before);
}
BENCHMARK(BM_Bookkeeping_Detach);

/// `loss.detach().reshape({})`: the copy MetricHistory::record keeps of a tensor value.
void BM_Bookkeeping_DetachReshape(benchmark::State& bench) {
  const auto loss = scalar_loss();
  const auto allocations_before = allocations();
  for (auto _ : bench) {
    auto kept = loss.detach().reshape({});
    benchmark::DoNotOptimize(kept.unsafeGetTensorImpl());
  }
  report_allocations(bench, allocations_before);
}
BENCHMARK(BM_Bookkeeping_DetachReshape);

/// One epoch of 64 steps of "train_loss" as the Trainer records it: record(tensor) per step, then
/// latest() at epoch end, which resolves the pending values (at::stack + one read). Per step.
void BM_Bookkeeping_MetricTensor64(benchmark::State& bench) {
  const auto loss = scalar_loss().detach();
  torchbus::MetricHistory history;
  std::int64_t step = 0;
  const auto allocations_before = allocations();
  for (auto _ : bench) {
    for (int i = 0; i < 64; ++i) history.record("train_loss", ++step, 0, loss);
    benchmark::DoNotOptimize(history.latest("train_loss").value);
    bench.PauseTiming();
    history.clear();
    bench.ResumeTiming();
  }
  report_allocations(bench, allocations_before);
  bench.counters["ns_per_step"] =
      benchmark::Counter(static_cast<double>(bench.iterations()) * 64.0,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_Bookkeeping_MetricTensor64);

/// The same with values already on the host (record(double)): no tensor work at all.
void BM_Bookkeeping_MetricDouble64(benchmark::State& bench) {
  torchbus::MetricHistory history;
  std::int64_t step = 0;
  const auto allocations_before = allocations();
  for (auto _ : bench) {
    for (int i = 0; i < 64; ++i) history.record("train_loss", ++step, 0, 0.5);
    benchmark::DoNotOptimize(history.latest("train_loss").value);
    bench.PauseTiming();
    history.clear();
    bench.ResumeTiming();
  }
  report_allocations(bench, allocations_before);
  bench.counters["ns_per_step"] =
      benchmark::Counter(static_cast<double>(bench.iterations()) * 64.0,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_Bookkeeping_MetricDouble64);

/// The tensor store per batch: set "output", "target", "loss", then clear the batch scope.
void BM_Bookkeeping_TensorStore(benchmark::State& bench) {
  const auto output = at::zeros({32, 10});
  const auto target = at::zeros({32}, at::kLong);
  const auto loss = scalar_loss();
  torchbus::TensorStore store;
  const auto allocations_before = allocations();
  for (auto _ : bench) {
    store.set("output", output);
    store.set("target", target);
    store.set("loss", loss);
    benchmark::DoNotOptimize(&store);
    store.clear(torchbus::Scope::Batch);
  }
  report_allocations(bench, allocations_before);
}
BENCHMARK(BM_Bookkeeping_TensorStore);

/// The MLP of the loop benchmark (784-256-10), its parameters one step apart from the average.
torch::nn::Sequential ema_model() {
  return torch::nn::Sequential(torch::nn::Linear(784, 256), torch::nn::Linear(256, 10));
}

void BM_EMA_StepEnd(benchmark::State& bench) {
  auto model = ema_model();
  torchbus::EMA ema(torchbus::EMAOptions().decay(0.999));
  torchbus::State state;
  state.model = model.ptr().get();
  ema.on_step_start(state);
  state.step = 1;
  const auto allocations_before = allocations();
  for (auto _ : bench) ema.on_step_end(state);
  report_allocations(bench, allocations_before);
}
BENCHMARK(BM_EMA_StepEnd);

void BM_Lerp_PerParameter(benchmark::State& bench) {
  auto model = ema_model();
  const auto parameters = model->parameters();
  std::vector<at::Tensor> average;
  for (const auto& parameter : parameters) average.push_back(parameter.detach().clone());
  at::NoGradGuard no_grad;
  const auto allocations_before = allocations();
  for (auto _ : bench) {
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      average[i].lerp_(parameters[i].detach(), 0.001);
    }
  }
  report_allocations(bench, allocations_before);
}
BENCHMARK(BM_Lerp_PerParameter);

// NOLINTEND(readability-identifier-naming)

}  // namespace

BENCHMARK_MAIN();
