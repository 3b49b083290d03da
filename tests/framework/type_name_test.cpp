// The framework's demangled type names (framework/src/support/type_name.hpp), and the default
// callback name that uses them.

#include <boost/test/unit_test.hpp>
#include <torchbus/callback.hpp>

#include "support/type_name.hpp"

#include <map>
#include <string>
#include <vector>

using namespace torchbus;

namespace {
namespace inner {
struct Unnamed : Callback {};
}  // namespace inner
}  // namespace

BOOST_AUTO_TEST_SUITE(type_names)

BOOST_AUTO_TEST_CASE(names_are_written_as_in_source) {
  BOOST_TEST(type_name(typeid(int)) == "int");
  BOOST_TEST(type_name(typeid(std::vector<int>)) == "std::vector<int, std::allocator<int> >");
  BOOST_TEST(type_name(typeid(std::map<int, double>)).rfind("std::map<int, double, ", 0) == 0u);
  BOOST_TEST(type_name(typeid(Callback)) == "torchbus::Callback");
}

BOOST_AUTO_TEST_CASE(a_callback_without_a_name_is_named_after_its_type) {
  const inner::Unnamed callback;
  BOOST_TEST(callback.name() == "(anonymous namespace)::inner::Unnamed");
}

BOOST_AUTO_TEST_SUITE_END()
