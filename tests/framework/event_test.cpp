#include <boost/test/unit_test.hpp>
#include <torchbus/torchbus.hpp>

using namespace torchbus;

BOOST_AUTO_TEST_SUITE(event)

BOOST_AUTO_TEST_CASE(names_round_trip_for_every_event) {
  for (std::size_t i = 0; i < kEventCount; ++i) {
    const auto event = static_cast<Event>(i);
    BOOST_TEST(index_of(event_from_string(to_string(event))) == i);
    BOOST_TEST(index_of(event_from_string(snake_name(event))) == i);
  }
  BOOST_TEST(to_string(Event::BeforeOptimizerStep) == "BeforeOptimizerStep");
  BOOST_TEST(snake_name(Event::BeforeOptimizerStep) == "before_optimizer_step");
}

BOOST_AUTO_TEST_CASE(unknown_name_lists_the_valid_ones) {
  try {
    event_from_string("StepEnded");
    BOOST_FAIL("no error for an unknown event name");
  } catch (const ConfigError& error) {
    const std::string message = error.what();
    BOOST_TEST(message.find("unknown event 'StepEnded'") != std::string::npos);
    BOOST_TEST(message.find("ActionStart, ProcessGroupStart, EpochStart, StepStart") !=
               std::string::npos);
  }
  BOOST_TEST(!find_event("").has_value());
}

BOOST_AUTO_TEST_SUITE_END()
