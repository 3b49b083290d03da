// Profiler: subscriber and phase times that add up to the action's total; the logged table.

#include <boost/test/unit_test.hpp>
#include <support/captured_log.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <torchbus/callbacks/profiler.hpp>
#include <torchbus/callbacks/timer.hpp>
#include <torchbus/dispatch_observer.hpp>

#include <algorithm>
#include <chrono>
#include <climits>
#include <thread>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

void sleep_ms(int milliseconds) {
  std::this_thread::sleep_for(std::chrono::milliseconds(milliseconds));
}

/// The row of `kind` called `name` (at `event` when given); fails the test when there is none.
const ProfileRow& row(const Profiler& profiler, const std::string& kind, const std::string& name,
                      const std::string& event = "") {
  for (const auto& row : profiler.rows()) {
    if (row.kind == kind && row.name == name && (event.empty() || row.event == event)) return row;
  }
  BOOST_FAIL("no " << kind << " row '" << name << "' at '" << event << "'");
  return profiler.rows().front();
}

bool has_row(const Profiler& profiler, const std::string& kind, const std::string& name) {
  const auto& rows = profiler.rows();
  return std::any_of(rows.begin(), rows.end(),
                     [&](const ProfileRow& r) { return r.kind == kind && r.name == name; });
}

/// Phases + subscribers + other == total, and every row is >= 0.
void check_adds_up(const Profiler& profiler) {
  const auto& rows = profiler.rows();
  BOOST_TEST_REQUIRE(rows.size() >= 2u);
  BOOST_TEST(rows.front().kind == "total");
  BOOST_TEST(rows.back().kind == "other");
  double parts = 0.0;
  for (std::size_t i = 1; i < rows.size(); ++i) {
    BOOST_TEST(rows[i].total_seconds >= 0.0,
               rows[i].kind << " " << rows[i].name << " " << rows[i].event << " is negative");
    parts += rows[i].total_seconds;
  }
  BOOST_TEST(std::abs(parts - rows.front().total_seconds) < 1e-6);
}

/// Naps `factor` times as long as everything else took since the action began (its own naps left
/// out), and at least `least`: so its share of the run holds however fast or loaded the machine is.
class ProportionalNap {
 public:
  using Clock = std::chrono::steady_clock;
  ProportionalNap(Trainer& trainer, double factor, Clock::duration least)
      : factor_(factor), least_(least) {
    trainer.on(Event::ActionStart, [this](State&) { action_start_ = Clock::now(); });
  }
  void operator()() {
    const auto others = Clock::now() - action_start_ - napped_;
    const auto nap =
        std::max(least_, std::chrono::duration_cast<Clock::duration>(factor_ * others));
    const auto before = Clock::now();
    std::this_thread::sleep_for(nap);
    napped_ += Clock::now() - before;
  }
  /// The naps' total, in seconds.
  double napped_seconds() const { return std::chrono::duration<double>(napped_).count(); }

 private:
  double factor_;
  Clock::duration least_;
  Clock::time_point action_start_;
  Clock::duration napped_{};
};

}  // namespace

BOOST_AUTO_TEST_SUITE(profiler)

BOOST_AUTO_TEST_CASE(a_sleeping_subscriber_is_measured_per_call) {
  Run run;
  auto profiler = std::make_shared<Profiler>(ProfilerOptions().log_table(false));
  run.trainer.add(profiler);
  const auto id = next_subscriber_id(run.trainer.bus());
  run.trainer.on(Event::StepEnd, [](State&) { sleep_ms(5); });
  auto data = make_batches(4, 4);
  run.trainer.fit(data);

  const auto sleeper = row(*profiler, "subscriber", subscriber_label(run.trainer.bus(), id));
  BOOST_TEST(sleeper.name == "subscriber #" + std::to_string(id) + " (priority 0)");
  BOOST_TEST(sleeper.event == "StepEnd");
  BOOST_TEST(sleeper.calls == 4);
  BOOST_TEST(sleeper.total_seconds >= 4 * 0.005);
  BOOST_TEST(sleeper.mean_seconds() >= 0.005);
  BOOST_TEST(row(*profiler, "total", "action").total_seconds >= sleeper.total_seconds);
  check_adds_up(*profiler);
  // Its own timing points are not subscriber rows (their cost is part of "other").
  for (const auto& r : profiler->rows()) {
    BOOST_TEST(lacks(r.name, std::to_string(INT_MIN)));
    BOOST_TEST(lacks(r.name, std::to_string(INT_MAX)));
    BOOST_TEST(r.name != "profiler");
  }
}

BOOST_AUTO_TEST_CASE(a_subscriber_over_warn_share_is_named_once_during_the_run) {
  for (const double share : {0.2, 0.0}) {
    Run run(TrainerOptions().max_epochs(2));
    run.trainer.add(std::make_shared<Profiler>(
        ProfilerOptions().log_table(false).warn_share(share).warn_every_steps(2)));
    // The plot naps four times as long as everything else took since the action began, so it is
    // at least 80% of the time at every check.
    ProportionalNap nap(run.trainer, 4.0, std::chrono::milliseconds(5));
    run.trainer.on(
        Event::StepEnd, [&](State&) { nap(); }, named("slow_plot"));
    int steps_when_warned = -1;
    CapturedLog log;
    run.trainer.on(Event::StepEnd, [&](State& state) {
      if (steps_when_warned < 0 && !log.messages("warning", "Profiler: slow_plot").empty()) {
        steps_when_warned = static_cast<int>(state.step);
      }
    });
    auto data = make_batches(4, 4);
    run.trainer.fit(data);
    const auto warnings = log.messages("warning", "Profiler: ");
    if (share == 0.0) {
      BOOST_TEST(warnings.empty());
      continue;
    }
    BOOST_TEST_REQUIRE(warnings.size() == 1u);
    BOOST_TEST(has(warnings[0], "Profiler: slow_plot takes "));
    BOOST_TEST(has(warnings[0], "at StepEnd"));
    BOOST_TEST(has(warnings[0], "more than warn_share 20%"));
    BOOST_TEST(steps_when_warned == 3);  // checked at step 2, seen by the next step's StepEnd
  }
  BOOST_CHECK_THROW(Profiler(ProfilerOptions().warn_share(1.5)), ConfigError);
  BOOST_CHECK_THROW(Profiler(ProfilerOptions().warn_every_steps(0)), ConfigError);
}

BOOST_AUTO_TEST_CASE(totals_add_up_and_phases_count_batches_steps_and_evaluations) {
  Run run(TrainerOptions().accumulate_grad_batches(2).max_epochs(2).val_every_n_steps(2));
  auto profiler = std::make_shared<Profiler>(ProfilerOptions().log_table(false));
  run.trainer.add(profiler);
  run.trainer.add(std::make_shared<Timer>());
  int evaluations = 0;
  run.trainer.on(Event::EvalStart, [&](State&) { ++evaluations; });
  // Each nap is as long as everything else took so far, so the naps outweigh the evaluations.
  ProportionalNap nap(run.trainer, 1.0, std::chrono::milliseconds(1));
  const auto eval_sleeper = next_subscriber_id(run.trainer.bus());
  run.trainer.on(Event::EvalBatchEnd, [&](State&) { nap(); });
  auto train = make_batches(6, 4);  // 3 steps of 2 batches per epoch
  auto validation = make_batches(2, 4, 4, 3, 11);
  run.trainer.fit(train, validation);

  BOOST_TEST(row(*profiler, "phase", "forward").calls == 12);
  BOOST_TEST(row(*profiler, "phase", "backward").calls == 12);
  BOOST_TEST(row(*profiler, "phase", "optimizer").calls == 6);
  BOOST_TEST(row(*profiler, "phase", "evaluation").calls == evaluations);
  BOOST_TEST(row(*profiler, "phase", "data").calls >= 6);
  BOOST_TEST(row(*profiler, "subscriber", "timer", "StepEnd").calls == 6);
  BOOST_TEST(row(*profiler, "subscriber", "timer", "BatchEnd").calls == 12);
  // The evaluation's subscriber time is a subscriber row, not part of the evaluation phase.
  const auto slow = row(*profiler, "subscriber", subscriber_label(run.trainer.bus(), eval_sleeper),
                        "EvalBatchEnd");
  BOOST_TEST(slow.calls == 2 * evaluations);
  BOOST_TEST(slow.total_seconds >= nap.napped_seconds());
  BOOST_TEST(row(*profiler, "phase", "evaluation").total_seconds < slow.total_seconds);
  check_adds_up(*profiler);
}

BOOST_AUTO_TEST_CASE(gradient_sync_is_a_phase_only_with_several_ranks) {
  Run run(TrainerOptions().accumulate_grad_batches(2));
  auto profiler = std::make_shared<Profiler>(ProfilerOptions().log_table(false));
  run.trainer.add(profiler);
  auto data = make_batches(6, 4);
  run.trainer.fit(data);
  BOOST_TEST(!has_row(*profiler, "phase", "gradient_sync"));
  // As a process group of 2 ranks would set it (the averaging itself needs a real group): the
  // interval from the window's last batch to BeforeOptimizerStep is measured once per step.
  run.trainer.state().world_size = 2;
  run.trainer.fit(data);
  BOOST_TEST(row(*profiler, "phase", "gradient_sync").calls == 3);
  check_adds_up(*profiler);
}

BOOST_AUTO_TEST_CASE(a_slow_train_step_makes_forward_dominate) {
  Run run;
  // Each step naps as long as everything else took so far, so the forwards outweigh every other
  // row.
  ProportionalNap nap(run.trainer, 1.0, std::chrono::milliseconds(3));
  run.trainer.set_train_step([&](Trainer& t, Batch& batch) {
    nap();
    return t.compute_loss(t.forward(batch.data), batch.target);
  });
  auto profiler = std::make_shared<Profiler>(ProfilerOptions().log_table(false));
  run.trainer.add(profiler);
  run.trainer.add(std::make_shared<Timer>(TimerOptions().samples_from("")));
  auto data = make_batches(4, 4);
  run.trainer.fit(data);

  const auto forward = row(*profiler, "phase", "forward");
  BOOST_TEST(forward.calls == 4);
  BOOST_TEST(forward.total_seconds >= nap.napped_seconds());
  for (const auto& r : profiler->rows()) {
    if (r.kind != "total" && r.name != "forward")
      BOOST_TEST(r.total_seconds < forward.total_seconds);
  }
  check_adds_up(*profiler);
}

BOOST_AUTO_TEST_CASE(subscribers_count_their_own_time_and_nested_emissions_separately) {
  Run run;
  auto& bus = run.trainer.bus();
  const auto checked = bus.register_event("batch_checked");
  auto profiler = std::make_shared<Profiler>(ProfilerOptions().log_table(false));
  run.trainer.add(profiler);
  // The nested subscriber sleeps far longer than a forward pass of the tiny model takes, even on a
  // loaded machine (a first forward under load took 26 ms where a 2 ms sleep was used).
  constexpr int kNapMs = 25;
  const auto checker = next_subscriber_id(bus);
  bus.on(checked, [](State&) { sleep_ms(kNapMs); });
  const auto outer = next_subscriber_id(bus);
  bus.on(Event::StepEnd, [&](State& state) { checked.emit(state); });
  // The train step emits the custom event too: its subscriber's time is not forward time.
  run.trainer.set_train_step([checked](Trainer& t, Batch& batch) {
    checked.emit(t.state());
    return t.compute_loss(t.forward(batch.data), batch.target);
  });
  auto data = make_batches(3, 4);
  run.trainer.fit(data);

  const auto inner = row(*profiler, "subscriber", subscriber_label(bus, checker), "batch_checked");
  BOOST_TEST(inner.calls == 6);  // 3 from the train step, 3 from the StepEnd subscriber
  BOOST_TEST(inner.total_seconds >= 6 * kNapMs * 1e-3);
  const auto emitter = row(*profiler, "subscriber", subscriber_label(bus, outer), "StepEnd");
  BOOST_TEST(emitter.calls == 3);
  BOOST_TEST(emitter.total_seconds < 3 * kNapMs * 1e-3);  // the nested calls are not its own time
  BOOST_TEST(row(*profiler, "phase", "forward").total_seconds < inner.total_seconds);
  check_adds_up(*profiler);
}

BOOST_AUTO_TEST_CASE(evaluate_has_an_evaluation_phase_only) {
  Run run;
  auto profiler = std::make_shared<Profiler>(ProfilerOptions().log_table(false));
  run.trainer.add(profiler);
  auto data = make_batches(3, 4);
  run.trainer.evaluate(data);
  BOOST_TEST(row(*profiler, "phase", "evaluation").calls == 1);
  BOOST_TEST(!has_row(*profiler, "phase", "forward"));
  BOOST_TEST(!has_row(*profiler, "phase", "data"));
  check_adds_up(*profiler);
}

BOOST_AUTO_TEST_CASE(an_error_in_the_train_step_still_gives_a_profile) {
  Run run;
  auto profiler = std::make_shared<Profiler>(ProfilerOptions().log_table(false));
  run.trainer.add(profiler);
  run.trainer.set_train_step([](Trainer& t, Batch&) -> at::Tensor {
    if (t.state().global_batch == 2) throw DataError("corrupt batch");
    sleep_ms(1);
    return torch::ones({}, torch::requires_grad());
  });
  auto data = make_batches(4, 4);
  BOOST_CHECK_THROW(run.trainer.fit(data), DataError);
  BOOST_TEST(row(*profiler, "phase", "forward").calls == 2);  // the failed batch is not counted
  check_adds_up(*profiler);
}

BOOST_AUTO_TEST_CASE(one_profiler_per_trainer) {
  Run run;
  run.trainer.add(std::make_shared<Profiler>());
  const auto second = message_of<ConfigError>(
      [&] { run.trainer.add(std::make_shared<Profiler>(ProfilerOptions().name("profiler2"))); });
  BOOST_TEST(has(second, "already has a dispatch observer"));
  BOOST_TEST(run.trainer.bus().find_callback("profiler2") == nullptr);

  Run other;
  auto profiler = std::make_shared<Profiler>(ProfilerOptions().name("shared"));
  other.trainer.add(profiler);
  Run third;
  BOOST_TEST(has(message_of<ConfigError>([&] { third.trainer.add(profiler); }),
                 "already added to a trainer"));
}

BOOST_AUTO_TEST_CASE(logged_table_names_the_callbacks_and_phases) {
  Run run;
  auto profiler = std::make_shared<Profiler>();
  run.trainer.add(profiler);
  run.trainer.add(std::make_shared<Timer>());
  run.trainer.on(Event::StepEnd, [](State&) {});
  run.trainer.on(
      Event::StepEnd, [](State&) {}, before("timer").named("my_logger"));
  auto data = make_batches(3, 4);
  CapturedLog log;
  run.trainer.fit(data);
  std::string table;
  std::string step_end_order;
  std::size_t order_lines = 0;
  for (const auto& line : log.messages("info", "profiler: ")) {
    table += line + "\n";
    if (line.find("profiler: order at ") == 0) ++order_lines;
    if (line.find("profiler: order at StepEnd: ") == 0) step_end_order = line;
  }
  BOOST_TEST(has(table, "kind"));
  BOOST_TEST(has(table, "timer"));
  BOOST_TEST(has(table, "subscriber #"));
  BOOST_TEST(has(table, "forward"));
  BOOST_TEST(has(table, "optimizer"));
  BOOST_TEST(has(table, "other"));
  BOOST_TEST(has(table, "action"));
  // The table (a header and a line per row), then the order of each event it reports.
  BOOST_TEST(log.messages("info", "profiler: ").size() ==
             profiler->rows().size() + 1 + order_lines);
  BOOST_TEST(order_lines > 0u);
  BOOST_TEST(step_end_order.find("my_logger") < step_end_order.find("timer"), step_end_order);
  BOOST_TEST(step_end_order.find("timer") != std::string::npos, step_end_order);
}

BOOST_AUTO_TEST_CASE(top_n_limits_the_logged_subscriber_rows) {
  Run run;
  auto profiler = std::make_shared<Profiler>(ProfilerOptions().top_n(1));
  run.trainer.add(profiler);
  run.trainer.add(std::make_shared<Timer>());  // several hooks: several subscriber rows
  auto data = make_batches(2, 4);
  CapturedLog log;
  run.trainer.fit(data);
  std::size_t subscriber_rows = 0;
  for (const auto& r : profiler->rows()) subscriber_rows += r.kind == "subscriber" ? 1 : 0;
  BOOST_TEST_REQUIRE(subscriber_rows > 2u);
  std::string table;
  for (const auto& line : log.messages("info", "profiler: ")) table += line + "\n";
  BOOST_TEST(has(table, "(" + std::to_string(subscriber_rows - 1) + " more rows)"));
}

BOOST_AUTO_TEST_CASE(no_table_when_disabled_or_on_another_rank) {
  Run run;
  auto quiet = std::make_shared<Profiler>(ProfilerOptions().log_table(false));
  run.trainer.add(quiet);
  auto data = make_batches(2, 4);
  {
    CapturedLog log;
    run.trainer.fit(data);
    BOOST_TEST(log.messages("info", "profiler").empty());
    BOOST_TEST(!quiet->rows().empty());
  }
  Run ranked;
  auto elsewhere = std::make_shared<Profiler>();
  elsewhere->run_on_rank(1);  // this process is rank 0
  ranked.trainer.add(elsewhere);
  CapturedLog log;
  ranked.trainer.fit(data);
  BOOST_TEST(log.messages("info", "profiler").empty());
  BOOST_TEST(elsewhere->rows().empty());
}

BOOST_AUTO_TEST_CASE(options_name_and_priority) {
  BOOST_CHECK_THROW(Profiler(ProfilerOptions().top_n(-1)), ConfigError);
  Profiler profiler;
  BOOST_TEST(profiler.name() == "profiler");
  BOOST_TEST(profiler.priority() == INT_MAX);
  BOOST_TEST(profiler.rows().empty());
}

BOOST_AUTO_TEST_SUITE_END()
