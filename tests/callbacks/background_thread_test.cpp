// BackgroundThread (callbacks/src, the thread CsvFileWriter writes on): every task runs on one
// thread other than the caller's, in the order handed over; what a task throws reaches the caller
// once, by `wait` or by the next `start` (whose task then does not run); destruction waits for the
// task in flight.

#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>

#include "support/background_thread.hpp"

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

using torchbus::detail::BackgroundThread;
using torchbus::testing::message_of;

BOOST_AUTO_TEST_SUITE(background_thread)

BOOST_AUTO_TEST_CASE(tasks_run_in_order_on_one_thread_that_is_not_the_callers) {
  BackgroundThread thread;
  std::vector<int> order;  // written by the tasks only, read after `wait`
  std::vector<std::thread::id> runners;
  for (int task = 0; task < 5; ++task) {
    thread.start([&, task] {
      order.push_back(task);
      runners.push_back(std::this_thread::get_id());
    });
  }
  thread.wait();
  BOOST_TEST(order == (std::vector<int>{0, 1, 2, 3, 4}), boost::test_tools::per_element());
  BOOST_REQUIRE_EQUAL(runners.size(), 5u);
  BOOST_TEST((runners.front() != std::this_thread::get_id()));
  for (const auto& runner : runners) BOOST_TEST((runner == runners.front()));
}

BOOST_AUTO_TEST_CASE(start_returns_before_its_task_ends_and_wait_after) {
  BackgroundThread thread;
  std::atomic<bool> release{false};
  std::atomic<bool> ended{false};
  thread.start([&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ended = true;
  });
  BOOST_TEST(!ended.load());  // the task cannot end before `release`
  release = true;
  thread.wait();
  BOOST_TEST(ended.load());
}

BOOST_AUTO_TEST_CASE(what_a_task_throws_reaches_wait_once) {
  BackgroundThread thread;
  thread.start([] { throw std::runtime_error("disk full"); });
  BOOST_TEST(message_of<std::runtime_error>([&] { thread.wait(); }) == "disk full");
  thread.wait();  // thrown once: nothing now
  int runs = 0;
  thread.start([&] { ++runs; });  // the thread goes on with later tasks
  thread.wait();
  BOOST_TEST(runs == 1);
}

BOOST_AUTO_TEST_CASE(what_a_task_throws_reaches_the_next_start_whose_task_does_not_run) {
  BackgroundThread thread;
  thread.start([] { throw std::runtime_error("disk full"); });
  bool ran = false;
  BOOST_TEST(message_of<std::runtime_error>([&] { thread.start([&] { ran = true; }); }) ==
             "disk full");
  thread.wait();
  BOOST_TEST(!ran);
}

BOOST_AUTO_TEST_CASE(destruction_waits_for_the_task_in_flight_and_drops_its_error) {
  std::atomic<bool> ended{false};
  {
    BackgroundThread thread;
    thread.start([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      ended = true;
      throw std::runtime_error("after the caller left");
    });
  }
  BOOST_TEST(ended.load());
}

BOOST_AUTO_TEST_CASE(a_thread_given_no_task_ends_at_once) {
  BackgroundThread thread;
  thread.wait();  // nothing in flight, no thread started
}

BOOST_AUTO_TEST_SUITE_END()
