#define BOOST_TEST_MODULE torchbus framework
#include <boost/test/unit_test.hpp>
