// Filters and their composition: for each kind of counter, the occurrences 1..100 a filter lets
// through against a hand-written predicate; one occurrence number per call; skipped updates;
// copies; no allocation per call; bad input.

#include <boost/test/unit_test.hpp>
#include <support/allocation_count.hpp>
#include <support/errors.hpp>
#include <torchbus/error.hpp>
#include <torchbus/filter.hpp>
#include <torchbus/placement.hpp>
#include <torchbus/state.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

// ---- overloads: the filters after(n)/before(n) beside the placements after/before("name") ------

namespace filters_beside_placements {
using torchbus::after;
using torchbus::before;
static_assert(std::is_same_v<decltype(after(3)), torchbus::Filter>);
static_assert(std::is_same_v<decltype(after(0)), torchbus::Filter>);  // 0 is not a null pointer
static_assert(std::is_same_v<decltype(before(3)), torchbus::Filter>);
static_assert(std::is_same_v<decltype(before(0)), torchbus::Filter>);
static_assert(std::is_same_v<decltype(after(std::int64_t{3})), torchbus::Filter>);
static_assert(std::is_same_v<decltype(after("validation")), torchbus::Placement>);
static_assert(
    std::is_same_v<decltype(before(std::string_view("checkpoint"))), torchbus::Placement>);
}  // namespace filters_beside_placements

namespace {

using namespace torchbus;
using torchbus::testing::has;
using torchbus::testing::message_of;
using Occurrences = std::vector<std::int64_t>;

/// The kinds of occurrence number a filter can see.
enum class Counter { Epoch, StepStart, StepEnd, StepEndWithSkips, GlobalBatch, EvalBatch, Own };

const Counter kAllCounters[] = {
    Counter::Epoch,       Counter::StepStart, Counter::StepEnd, Counter::StepEndWithSkips,
    Counter::GlobalBatch, Counter::EvalBatch, Counter::Own};

std::string name_of(Counter counter) {
  switch (counter) {
    case Counter::Epoch:
      return "epoch";
    case Counter::StepStart:
      return "step (StepStart)";
    case Counter::StepEnd:
      return "step (StepEnd)";
    case Counter::StepEndWithSkips:
      return "step (StepEnd, a skipped update before each step)";
    case Counter::GlobalBatch:
      return "global batch";
    case Counter::EvalBatch:
      return "eval batch";
    case Counter::Own:
      return "own count";
  }
  return "";
}

/// State as it is at occurrence `k` of the counter's event; `batch_in_epoch` carries k for `when`
/// predicates (no filter counts it).
void set_occurrence(State& state, Counter counter, std::int64_t k) {
  state.batch_in_epoch = k;
  state.update_skipped = false;
  switch (counter) {
    case Counter::Epoch:
      state.epoch = k - 1;
      break;
    case Counter::StepStart:
      state.step = k - 1;
      break;
    case Counter::StepEnd:
    case Counter::StepEndWithSkips:
      state.step = k;
      break;
    case Counter::GlobalBatch:
      state.global_batch = k - 1;
      break;
    case Counter::EvalBatch:
      state.eval_batch = k - 1;
      break;
    case Counter::Own:
      break;
  }
}

std::optional<Event> event_of(Counter counter) {
  switch (counter) {
    case Counter::Epoch:
      return Event::EpochEnd;
    case Counter::StepStart:
      return Event::StepStart;
    case Counter::StepEnd:
    case Counter::StepEndWithSkips:
      return Event::StepEnd;
    case Counter::GlobalBatch:
      return Event::BatchEnd;
    case Counter::EvalBatch:
      return Event::EvalBatchEnd;
    case Counter::Own:
      return std::nullopt;  // a custom event
  }
  return std::nullopt;
}

/// The occurrences 1..last that `filter` lets through, calling it once per occurrence (and, with
/// skips, once more before each step at a StepEnd that made no update, which must never pass).
Occurrences passing(Filter filter, Counter counter, std::int64_t last = 100) {
  State state;
  Occurrences passed;
  for (std::int64_t k = 1; k <= last; ++k) {
    if (counter == Counter::StepEndWithSkips) {
      state.step = k - 1;
      state.update_skipped = true;
      state.batch_in_epoch = 0;  // k of `when` predicates: none of the rules below holds at 0
      if (filter.passes(Event::StepEnd, state)) passed.push_back(-k);  // never expected
    }
    set_occurrence(state, counter, k);
    if (filter.passes(event_of(counter), state)) passed.push_back(k);
  }
  return passed;
}

/// The occurrences 1..last for which `rule(k)` holds: the independent computation.
Occurrences expected(const std::function<bool(std::int64_t)>& rule, std::int64_t last = 100) {
  Occurrences out;
  for (std::int64_t k = 1; k <= last; ++k) {
    if (rule(k)) out.push_back(k);
  }
  return out;
}

/// Checks `filter` against `rule` for every kind of counter.
void check_on_every_counter(const Filter& filter, const std::function<bool(std::int64_t)>& rule) {
  const Occurrences want = expected(rule);
  for (const Counter counter : kAllCounters) {
    BOOST_TEST_CONTEXT("counter: " << name_of(counter)) {
      BOOST_TEST(passing(filter, counter) == want, boost::test_tools::per_element());
    }
  }
}

/// `k` as carried by State for `when` predicates.
std::int64_t k_of(const State& state) {
  return state.batch_in_epoch;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(filters)

BOOST_AUTO_TEST_CASE(leaves_on_every_counter) {
  // Filter{} also passes at a skipped update (it does not count): every counter but that one.
  for (const Counter counter : kAllCounters) {
    if (counter == Counter::StepEndWithSkips) continue;
    BOOST_TEST_CONTEXT("counter: " << name_of(counter)) {
      BOOST_TEST(passing(Filter{}, counter) == expected([](std::int64_t) { return true; }),
                 boost::test_tools::per_element());
    }
  }
  check_on_every_counter(every(7), [](std::int64_t k) { return k % 7 == 0; });
  check_on_every_counter(once(13), [](std::int64_t k) { return k == 13; });
  check_on_every_counter(once(), [](std::int64_t k) { return k == 1; });
  check_on_every_counter(once({50, 5, 1, 5, 200}),
                         [](std::int64_t k) { return k == 1 || k == 5 || k == 50; });
  check_on_every_counter(once({9}), [](std::int64_t k) { return k == 9; });
  check_on_every_counter(once(Occurrences{2, 4}), [](std::int64_t k) { return k == 2 || k == 4; });
  check_on_every_counter(before(7), [](std::int64_t k) { return k < 7; });
  check_on_every_counter(after(95), [](std::int64_t k) { return k > 95; });
  check_on_every_counter(after(0), [](std::int64_t) { return true; });
  check_on_every_counter(when([](const State& s) { return k_of(s) % 4 == 1; }),
                         [](std::int64_t k) { return k % 4 == 1; });
}

BOOST_AUTO_TEST_CASE(compositions_on_every_counter) {
  check_on_every_counter(every(3) | once(4), [](std::int64_t k) { return k % 3 == 0 || k == 4; });
  check_on_every_counter(every(2) & after(10), [](std::int64_t k) { return k % 2 == 0 && k > 10; });
  check_on_every_counter(!every(5), [](std::int64_t k) { return k % 5 != 0; });
  check_on_every_counter(!once(1), [](std::int64_t k) { return k != 1; });
  check_on_every_counter(!Filter{}, [](std::int64_t) { return false; });
  check_on_every_counter(Filter{} & every(4), [](std::int64_t k) { return k % 4 == 0; });
  check_on_every_counter(after(20) & before(30) & !once({25}),
                         [](std::int64_t k) { return k > 20 && k < 30 && k != 25; });
  check_on_every_counter((every(2) | every(3)) & !once({6, 12}) & before(40), [](std::int64_t k) {
    return (k % 2 == 0 || k % 3 == 0) && k != 6 && k != 12 && k < 40;
  });
  check_on_every_counter(every(10) | when([](const State& s) { return k_of(s) == 7; }),
                         [](std::int64_t k) { return k % 10 == 0 || k == 7; });
  check_on_every_counter(!(every(2) & when([](const State& s) { return k_of(s) > 50; })),
                         [](std::int64_t k) { return !(k % 2 == 0 && k > 50); });
}

BOOST_AUTO_TEST_CASE(a_composed_filter_counts_each_call_once) {
  // On an event without a counter every leaf sees the root's one call count: 2, 3, 4, 6, 8, ...
  Filter filter = every(2) | once(3);
  const Occurrences passed = passing(filter, Counter::Own);
  BOOST_TEST(passed == expected([](std::int64_t k) { return k % 2 == 0 || k == 3; }),
             boost::test_tools::per_element());

  State state;
  for (int call = 0; call < 10; ++call) filter.passes(Event::ActionStart, state);
  BOOST_TEST(filter.own_count() == 10);
  // Short-circuiting does not skip counting: the count advances on every call.
  Filter never = (!Filter{}) & every(1);
  for (int call = 0; call < 4; ++call) BOOST_TEST(!never.passes(std::nullopt, state));
  BOOST_TEST(never.own_count() == 4);
  // A pure `when` does not count; a filter on a counted event does not touch its own count.
  Filter predicate = when([](const State&) { return true; });
  Filter stepped = every(2) | once(3);
  for (int call = 0; call < 3; ++call) {
    predicate.passes(std::nullopt, state);
    stepped.passes(Event::StepStart, state);
  }
  BOOST_TEST(predicate.own_count() == 0);
  BOOST_TEST(stepped.own_count() == 0);
}

BOOST_AUTO_TEST_CASE(restored_own_count_continues_where_it_left) {
  // A run interrupted after 7 calls and resumed with the saved count passes the same calls.
  const Filter original = every(3) | once(4);
  Filter first = original;
  Occurrences passed;
  State state;
  for (std::int64_t k = 1; k <= 7; ++k) {
    if (first.passes(std::nullopt, state)) passed.push_back(k);
  }
  Filter resumed = original;
  resumed.set_own_count(first.own_count());
  for (std::int64_t k = 8; k <= 20; ++k) {
    if (resumed.passes(std::nullopt, state)) passed.push_back(k);
  }
  BOOST_TEST(passed == passing(original, Counter::Own, 20), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_step_without_update_never_passes_a_counting_filter) {
  State state;
  state.step = 4;
  state.update_skipped = true;
  BOOST_TEST(occurrence(Event::StepEnd, state) == 0);
  const auto at_skip = [&](Filter filter) { return filter.passes(Event::StepEnd, state); };
  BOOST_TEST(!at_skip(every(1)));
  BOOST_TEST(!at_skip(!every(3)));
  BOOST_TEST(!at_skip(!once(1)));
  BOOST_TEST(!at_skip(!once({4})));
  BOOST_TEST(!at_skip(before(10)));
  BOOST_TEST(!at_skip(after(0)));
  BOOST_TEST(!at_skip(every(2) | !every(2)));
  // Any counting part makes the whole filter a counting one.
  BOOST_TEST(!at_skip(when([](const State&) { return true; }) | every(2)));
  // A pure `when` decides by its predicate; the filter that passes everything passes.
  BOOST_TEST(at_skip(when([](const State& s) { return s.update_skipped; })));
  BOOST_TEST(!at_skip(!when([](const State& s) { return s.update_skipped; })));
  BOOST_TEST(at_skip(Filter{}));
}

BOOST_AUTO_TEST_CASE(copies_keep_their_own_count_and_share_the_tree) {
  Filter original = every(2) | once(3);
  State state;
  for (int call = 0; call < 3; ++call) original.passes(std::nullopt, state);
  Filter copy = original;
  BOOST_TEST(copy.own_count() == 3);
  BOOST_TEST(copy.passes(std::nullopt, state));  // call 4 of the copy
  BOOST_TEST(copy.own_count() == 4);
  BOOST_TEST(original.own_count() == 3);  // the original did not advance
  BOOST_TEST(original.passes(std::nullopt, state));

  // The tree (with its predicate object) is shared, not copied: a stateful predicate sees the calls
  // of both copies.
  int predicate_calls = 0;
  Filter counted = when([&predicate_calls](const State&) { return ++predicate_calls % 2 == 0; });
  Filter counted_copy = counted;
  BOOST_TEST(!counted.passes(std::nullopt, state));
  BOOST_TEST(counted_copy.passes(std::nullopt, state));
  BOOST_TEST(predicate_calls == 2);

  // Composing leaves the operands unchanged and starts a new count.
  Filter left = every(2);
  left.set_own_count(41);
  Filter composed = left | once(1);
  BOOST_TEST(composed.own_count() == 0);
  BOOST_TEST(left.own_count() == 41);
  BOOST_TEST(left.passes(std::nullopt, state));  // call 42
  BOOST_TEST(left.passes_everything() == false);
  BOOST_TEST(Filter{}.passes_everything());
  BOOST_TEST(!(Filter{} | Filter{}).passes_everything());
}

BOOST_AUTO_TEST_CASE(passes_allocates_nothing) {
  Filter composed = (every(2) | once({3, 5})) & after(1) & !before(3);
  Filter plain = every(5);
  State state;
  const auto before_calls = torchbus::testing::allocations();
  int passed = 0;
  for (std::int64_t k = 1; k <= 1000; ++k) {
    state.step = k;
    passed += composed.passes(Event::StepEnd, state);
    passed += composed.passes(std::nullopt, state);
    passed += plain.passes(Event::StepEnd, state);
    passed += plain.passes(std::nullopt, state);
  }
  BOOST_TEST(torchbus::testing::allocations() - before_calls == 0u);
  BOOST_TEST(passed > 0);
  const auto before_copy = torchbus::testing::allocations();
  Filter copy = composed;  // shares the tree
  BOOST_TEST(torchbus::testing::allocations() - before_copy == 0u);
  BOOST_TEST(copy.passes(Event::StepEnd, state) == composed.passes(Event::StepEnd, state));
}

BOOST_AUTO_TEST_CASE(bad_filters_are_config_errors_naming_the_value) {
  BOOST_TEST(has(message_of<ConfigError>([] { every(0); }),
                 "every(n) needs n >= 1 (run at occurrences n, 2n, ...), got 0"));
  BOOST_TEST(has(message_of<ConfigError>([] { once(0); }), "once(n) needs n >= 1"));
  BOOST_TEST(has(message_of<ConfigError>([] { once({}); }),
                 "once({n1, n2, ...}) needs at least one occurrence, got an empty list"));
  BOOST_TEST(has(message_of<ConfigError>([] { once(Occurrences{}); }), "got an empty list"));
  BOOST_TEST(has(message_of<ConfigError>([] {
                   once({1, 0, 3});
                 }),
                 "once({n1, n2, ...}) needs occurrences >= 1 (1-based), got 0 in {1, 0, 3}"));
  BOOST_TEST(has(message_of<ConfigError>([] { once({4, -2}); }), "got -2 in {4, -2}"));
  BOOST_TEST(has(message_of<ConfigError>([] { before(1); }),
                 "before(n) needs n >= 2 (run at occurrences 1 .. n-1; before(1) never runs), "
                 "got 1"));
  BOOST_TEST(has(message_of<ConfigError>([] { before(-5); }), "got -5"));
  BOOST_TEST(has(message_of<ConfigError>([] { after(-1); }),
                 "after(n) needs n >= 0 (run at occurrences n+1, n+2, ...), got -1"));
  BOOST_TEST(has(message_of<ConfigError>([] { when(nullptr); }), "needs a callable predicate"));
}

BOOST_AUTO_TEST_SUITE_END()
