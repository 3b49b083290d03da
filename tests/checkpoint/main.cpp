#define BOOST_TEST_MODULE torchbus checkpoint
#include <boost/test/unit_test.hpp>
