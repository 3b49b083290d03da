#define BOOST_TEST_MODULE torchbus - train
#include <boost/test/unit_test.hpp>
