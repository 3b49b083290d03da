#define BOOST_TEST_MODULE torchbus - cuda
#include <boost/test/unit_test.hpp>
