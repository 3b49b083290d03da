#pragma once

/// \file
/// A Boost.Test check that two metric histories hold the same points of a series.

#include <boost/test/unit_test.hpp>
#include <torchbus/metric_history.hpp>

#include <string>

namespace torchbus::testing {

/// Checks that the series `name` of `got` holds the points of `expected`'s (step, epoch, value).
inline void check_same_series(const MetricHistory& expected, const MetricHistory& got,
                              const std::string& name) {
  const auto& want = expected.series(name);
  const auto& have = got.series(name);
  BOOST_TEST_REQUIRE(have.size() == want.size(), name);
  for (std::size_t i = 0; i < have.size(); ++i) {
    BOOST_TEST(have[i].step == want[i].step, name);
    BOOST_TEST(have[i].epoch == want[i].epoch, name);
    BOOST_TEST(have[i].value == want[i].value, name);
  }
}

}  // namespace torchbus::testing
