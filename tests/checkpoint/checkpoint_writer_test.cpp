// CheckpointWriter: background writes in the order given, with at most `max_pending` pending, and
// the error of a failed write rethrown later on the caller's thread. The snapshots here make their
// bytes by hand: one waits for the test to release it, so that a write is known to be in flight.

#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/scratch.hpp>
#include <torchbus/checkpoint_file.hpp>
#include <torchbus/error.hpp>

#include <chrono>
#include <fstream>
#include <future>
#include <iterator>
#include <mutex>
#include <string>
#include <vector>

using namespace torchbus;
using namespace torchbus::testing;

namespace {

std::string contents(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// The order in which the writes' `after_durable` ran.
struct Finished {
  std::mutex mutex;
  std::vector<std::string> names;
  std::function<void()> note(std::string name) {
    return [this, name = std::move(name)] {
      const std::lock_guard<std::mutex> lock(mutex);
      names.push_back(name);
    };
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_writer)

BOOST_AUTO_TEST_CASE(a_second_write_is_queued_behind_the_first_and_a_third_waits_for_room) {
  TempDir dir("checkpoint_writer_queue");
  std::promise<void> release;
  auto released = release.get_future().share();
  Finished finished;
  CheckpointWriter writer(2);
  writer.write(CheckpointSnapshot(dir.path / "a",
                                  [released] {
                                    released.wait();  // in flight until the test releases it
                                    return std::string("first");
                                  }),
               finished.note("a"));
  // Room for one more: the second is copied and queued while the first is written.
  writer.write(CheckpointSnapshot(dir.path / "b", [] { return std::string("second"); }),
               finished.note("b"));
  auto room = std::async(std::launch::async, [&] { writer.wait_for_room(); });
  BOOST_TEST((room.wait_for(std::chrono::milliseconds(100)) == std::future_status::timeout));
  BOOST_TEST(!std::filesystem::exists(dir.path / "b"));  // it waits for the first
  release.set_value();
  room.get();
  writer.flush();
  BOOST_TEST(contents(dir.path / "a") == "first");
  BOOST_TEST(contents(dir.path / "b") == "second");
  BOOST_TEST(finished.names == (std::vector<std::string>{"a", "b"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(with_room_for_one_a_write_waits_for_the_one_before) {
  TempDir dir("checkpoint_writer_one");
  std::promise<void> release;
  auto released = release.get_future().share();
  CheckpointWriter writer(1);
  writer.write(CheckpointSnapshot(dir.path / "a", [released] {
    released.wait();
    return std::string("first");
  }));
  auto second = std::async(std::launch::async, [&] {
    writer.write(CheckpointSnapshot(dir.path / "b", [] { return std::string("second"); }));
  });
  BOOST_TEST((second.wait_for(std::chrono::milliseconds(100)) == std::future_status::timeout));
  release.set_value();
  second.get();
  writer.flush();
  BOOST_TEST(contents(dir.path / "b") == "second");
}

BOOST_AUTO_TEST_CASE(a_failed_write_is_rethrown_later_and_the_next_one_is_still_written) {
  TempDir dir("checkpoint_writer_failure");
  Finished finished;
  CheckpointWriter writer(2);
  writer.write(CheckpointSnapshot(dir.path / "a",
                                  []() -> std::string { throw std::runtime_error("no bytes"); }),
               finished.note("a"));
  writer.write(CheckpointSnapshot(dir.path / "b", [] { return std::string("second"); }),
               finished.note("b"));
  const auto message = message_of<CheckpointError>([&] { writer.flush(); });
  BOOST_TEST(message.find("the background write of checkpoint " + (dir.path / "a").string() +
                          " failed: no bytes") != std::string::npos,
             message);
  writer.flush();  // the failed write was reported once; the next one was written
  BOOST_TEST(contents(dir.path / "b") == "second");
  BOOST_TEST(finished.names == (std::vector<std::string>{"b"}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(room_for_no_write_is_a_config_error) {
  const auto message = message_of<ConfigError>([] { CheckpointWriter writer(0); });
  BOOST_TEST(message.find("at least one pending write, got 0") != std::string::npos, message);
}

BOOST_AUTO_TEST_SUITE_END()
