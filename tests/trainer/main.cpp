#define BOOST_TEST_MODULE torchbus trainer
#include <boost/test/unit_test.hpp>
