#define BOOST_TEST_MODULE torchbus callbacks
#include <boost/test/unit_test.hpp>
