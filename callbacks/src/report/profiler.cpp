#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>
#include <torchbus/callbacks/profiler.hpp>
#include <torchbus/dispatch_observer.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/state.hpp>
#include <torchbus/trainer.hpp>

#include <algorithm>
#include <chrono>
#include <string_view>

namespace torchbus {
namespace {

constexpr int kFirst = std::numeric_limits<int>::min();
constexpr int kLast = std::numeric_limits<int>::max();

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double seconds(std::int64_t nanoseconds) {
  return static_cast<double>(nanoseconds) * 1e-9;
}

/// Name and span of each phase, in the order of Profiler's LoopPhase enum.
struct PhaseName {
  const char* name;
  const char* span;
};
constexpr std::array<PhaseName, 6> kPhaseNames{{
    {"data", "StepEnd..StepStart"},
    {"forward", "BatchStart..BeforeBackward"},
    {"backward", "BeforeBackward..AfterBackward"},
    {"gradient_sync", "AfterBackward..BeforeOptimizerStep"},
    {"optimizer", "BeforeOptimizerStep..AfterOptimizerStep"},
    {"evaluation", "EvalStart..EvalEnd"},
}};

}  // namespace

void ProfilerOptions::validate() const {
  TORCHBUS_CHECK(top_n() >= 0, ConfigError,
                 "Profiler: top_n must be >= 0 (0: log every subscriber row), got ", top_n());
  TORCHBUS_CHECK(warn_share() >= 0 && warn_share() <= 1, ConfigError,
                 "Profiler: warn_share must be in [0, 1] (0: never warn), got ", warn_share());
  TORCHBUS_CHECK(warn_every_steps() >= 1, ConfigError,
                 "Profiler: warn_every_steps must be >= 1, got ", warn_every_steps());
}

Profiler::Profiler(ProfilerOptions options)
    : Callback(options.name(), kDefaultPriority), options_(options) {
  options_.validate();
  nested_ns_.assign(8, 0);
}

void Profiler::on_added(Trainer& trainer) {
  TORCHBUS_CHECK(bus_ == nullptr, ConfigError, "Profiler '", name(),
                 "' was already added to a trainer; create one Profiler per trainer");
  auto& bus = trainer.bus();
  TORCHBUS_CHECK(dispatch_observer(bus) == nullptr, ConfigError, "Profiler '", name(),
                 "': this trainer's bus already has a dispatch observer (another Profiler?); a bus "
                 "has one observer, so add one Profiler per trainer");
  set_dispatch_observer(bus, this);
  bus_ = &bus;
  own_first_ = next_subscriber_id(bus);
  // Timing points, run only inside an action on a rank the profiler runs on.
  const auto at = [&](Event event, int priority, auto body) {
    bus.on(
        event,
        [this, body](State&) {
          if (active_) body();
        },
        priority);
  };
  const auto first = [&](Event event, auto body) { at(event, kFirst, body); };
  const auto last = [&](Event event, auto body) { at(event, kLast, body); };
  bus.on(
      Event::ActionStart, [this](State& state) { start_action(state); }, kFirst);
  first(Event::StepStart, [this] { close(kData); });
  first(Event::EvalStart, [this] { close(kData); });
  first(Event::EpochEnd, [this] { close(kData); });
  first(Event::BeforeBackward, [this] { close(kForward); });
  first(Event::AfterBackward, [this] { close(kBackward); });
  first(Event::BatchEnd, [this] {
    discard(kForward);  // a cancelled batch
    discard(kBackward);
  });
  first(Event::BeforeOptimizerStep, [this] { close(kGradientSync); });
  first(Event::AfterOptimizerStep, [this] { close(kOptimizer); });
  first(Event::StepEnd, [this] {
    discard(kGradientSync);  // no batch of the window ran backward
    discard(kOptimizer);
  });
  first(Event::EvalEnd, [this] { close(kEvaluation); });
  if (options_.warn_share() > 0) {
    bus.on(
        Event::StepEnd,
        [this](State& state) {
          if (active_ && state.step % options_.warn_every_steps() == 0) {
            warn_about_slow_subscribers();
          }
        },
        kLast);
    last(Event::EpochEnd, [this] { warn_about_slow_subscribers(); });
  }
  first(Event::ActionEnd, [this] { end_action(); });
  last(Event::EpochStart, [this] { open(kData); });
  last(Event::StepEnd, [this] { open(kData); });
  last(Event::EvalEnd, [this] { open(kData); });
  last(Event::BatchStart, [this] { open(kForward); });
  // Under a process group the trainer averages the gradients after the window's last backward.
  bus.on(
      Event::AfterBackward,
      [this](State& state) {
        if (active_ && state.world_size > 1 && state.window_position + 1 == state.window_size) {
          open(kGradientSync);
        }
      },
      kLast);
  last(Event::BeforeBackward, [this] { open(kBackward); });
  last(Event::BeforeOptimizerStep, [this] { open(kOptimizer); });
  last(Event::EvalStart, [this] { open(kEvaluation); });
  own_end_ = next_subscriber_id(bus);
}

void Profiler::start_action(State& state) {
  active_ = runs_on(state.rank);
  if (!active_) return;
  subscriber_ns_ = 0;
  std::fill(nested_ns_.begin(), nested_ns_.end(), 0);
  phases_.fill(PhaseClock{});
  tallies_.resize(std::max<std::size_t>(tallies_.size(), next_subscriber_id(*bus_)));
  for (auto& tallies : tallies_) tallies.clear();
  action_start_ = now_ns();
}

void Profiler::open(LoopPhase phase) {
  auto& clock = phases_[phase];
  clock.open = true;
  clock.subscribers_at = subscriber_ns_;
  clock.start = now_ns();
}

void Profiler::close(LoopPhase phase) {
  auto& clock = phases_[phase];
  if (!clock.open) return;
  const auto end = now_ns();
  clock.open = false;
  clock.nanoseconds += end - clock.start - (subscriber_ns_ - clock.subscribers_at);
  ++clock.calls;
}

void Profiler::on_dispatch(const DispatchTiming& timing) noexcept {
  if (!active_) return;
  // A call's own time is its time minus that of the calls nested in it, which are reported
  // before it, one level deeper.
  const std::size_t depth = timing.depth;
  if (nested_ns_.size() < depth + 2) nested_ns_.resize(depth + 2, 0);
  const auto own_time = timing.nanoseconds - nested_ns_[depth + 1];
  nested_ns_[depth + 1] = 0;
  nested_ns_[depth] += timing.nanoseconds;
  if (own(timing.subscriber)) return;  // its timing points: part of "other"
  subscriber_ns_ += own_time;
  if (tallies_.size() <= timing.subscriber) tallies_.resize(timing.subscriber + 1);
  auto& tallies = tallies_[timing.subscriber];
  auto tally = std::find_if(tallies.begin(), tallies.end(),
                            [&](const Tally& t) { return t.channel == timing.channel; });
  if (tally == tallies.end()) tally = tallies.insert(tallies.end(), Tally{timing.channel, 0, 0});
  ++tally->calls;
  tally->nanoseconds += own_time;
}

void Profiler::end_action() {
  const auto total = now_ns() - action_start_;
  active_ = false;
  rows_.clear();
  static_assert(kPhaseNames.size() == kPhaseCount);
  rows_.push_back({"total", "action", "ActionStart..ActionEnd", 1, seconds(total)});
  std::int64_t accounted = 0;
  for (std::size_t phase = 0; phase < kPhaseCount; ++phase) {
    const auto& clock = phases_[phase];
    accounted += clock.nanoseconds;
    if (clock.calls == 0) continue;
    rows_.push_back({"phase", kPhaseNames[phase].name, kPhaseNames[phase].span, clock.calls,
                     seconds(clock.nanoseconds)});
  }
  struct Entry {
    SubscriberId id;
    Tally tally;
  };
  std::vector<Entry> entries;
  for (SubscriberId id = 0; id < tallies_.size(); ++id) {
    for (const auto& tally : tallies_[id]) entries.push_back({id, tally});
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.tally.nanoseconds > b.tally.nanoseconds;
  });
  for (const auto& entry : entries) {
    accounted += entry.tally.nanoseconds;
    rows_.push_back({"subscriber", subscriber_label(*bus_, entry.id),
                     std::string(channel_name(*bus_, entry.tally.channel)), entry.tally.calls,
                     seconds(entry.tally.nanoseconds)});
  }
  rows_.push_back({"other", "other", "loop bookkeeping", 0, seconds(total - accounted)});
}

void Profiler::warn_about_slow_subscribers() {
  const auto elapsed = now_ns() - action_start_;
  if (elapsed <= 0) return;
  warned_.resize(tallies_.size(), false);
  for (SubscriberId id = 0; id < tallies_.size(); ++id) {
    if (warned_[id]) continue;
    std::int64_t own = 0;
    std::string events;
    for (const auto& tally : tallies_[id]) {
      own += tally.nanoseconds;
      events += fmt::format("{}{}", events.empty() ? "" : ", ", channel_name(*bus_, tally.channel));
    }
    const auto share = static_cast<double>(own) / static_cast<double>(elapsed);
    if (share <= options_.warn_share()) continue;
    warned_[id] = true;
    logger()->warn(
        "Profiler: {} takes {:.0f}% of the run's time so far ({:.3f} s of {:.3f} s, at {}); "
        "more than warn_share {:.0f}%",
        subscriber_label(*bus_, id), 100 * share, seconds(own), seconds(elapsed), events,
        100 * options_.warn_share());
  }
}

void Profiler::on_action_end(State& /*state*/) {
  if (options_.log_table() && !rows_.empty()) log_rows();
}

void Profiler::log_rows() const {
  const auto& log = logger();
  const auto& prefix = name();
  const double total = rows_.front().total_seconds;
  const auto percent = [total](double value) { return total > 0 ? 100.0 * value / total : 0.0; };
  const auto line = [&](std::string_view kind, std::string_view row_name, std::string_view event,
                        const std::string& calls, double seconds, const std::string& mean) {
    log->info("{}: {:<10} {:<28} {:<40} {:>8} {:>12.3f} {:>12} {:>6.1f}", prefix, kind, row_name,
              event, calls, 1e3 * seconds, mean, percent(seconds));
  };
  log->info("{}: {:<10} {:<28} {:<40} {:>8} {:>12} {:>12} {:>6}", prefix, "kind", "name", "event",
            "calls", "total ms", "mean us", "%");
  const auto top_n = static_cast<std::size_t>(options_.top_n());
  std::size_t shown = 0;
  std::size_t hidden = 0;
  double hidden_seconds = 0.0;
  for (const auto& row : rows_) {
    if (row.kind == "subscriber" && top_n > 0 && shown++ >= top_n) {
      ++hidden;
      hidden_seconds += row.total_seconds;
      continue;
    }
    if (row.kind == "other" && hidden > 0) {
      line("subscriber", fmt::format("({} more rows)", hidden), "", "", hidden_seconds, "");
    }
    if (row.calls > 0) {
      line(row.kind, row.name, row.event, std::to_string(row.calls), row.total_seconds,
           fmt::format("{:.2f}", 1e6 * row.mean_seconds()));
    } else {
      line(row.kind, row.name, row.event, "", row.total_seconds, "");
    }
  }
  // The order the subscribers of each reported event run in (trainer.describe(event) details it).
  std::vector<std::string> events;
  for (const auto& row : rows_) {
    const bool listed = std::find(events.begin(), events.end(), row.event) != events.end();
    if (row.kind == "subscriber" && !listed) events.push_back(row.event);
  }
  for (const auto& event : events) {
    const auto builtin = find_event(event);
    const auto channel = builtin ? index_of(*builtin) : kEventCount + bus_->custom_event(event).id;
    std::string order;
    for (const auto id : dispatch_order(*bus_, channel)) {
      order += (order.empty() ? "" : ", ") + subscriber_label(*bus_, id);
    }
    log->info("{}: order at {}: {}", prefix, event, order);
  }
}

}  // namespace torchbus
