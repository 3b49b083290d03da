#include <boost/test/unit_test.hpp>
#include <torchbus/callbacks/callbacks.hpp>

BOOST_AUTO_TEST_CASE(umbrella_header_brings_the_framework) {
  torchbus::EventBus bus;
  BOOST_TEST(bus.subscriber_count(torchbus::Event::StepEnd) == 0u);
}
