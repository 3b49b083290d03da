#define BOOST_TEST_MODULE torchbus distributed
#include <boost/test/unit_test.hpp>
