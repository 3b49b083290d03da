// Atomic file replacement (atomic_file.hpp) and errno texts (system_error_text.hpp): what is on
// disk after a write, after a failing write and after an abandoned one.

#include <sys/resource.h>
#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/fsync_count.hpp>
#include <support/scratch.hpp>
#include <torchbus/atomic_file.hpp>
#include <torchbus/error.hpp>
#include <torchbus/system_error_text.hpp>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

using namespace torchbus;
using namespace torchbus::testing;
namespace fs = std::filesystem;

namespace {

/// While it lives, files this process writes may not grow beyond `bytes` (writes past it fail with
/// EFBIG instead of raising SIGXFSZ).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    previous_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &previous_);
    rlimit limited = previous_;
    limited.rlim_cur = bytes;
    BOOST_TEST_REQUIRE(setrlimit(RLIMIT_FSIZE, &limited) == 0);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &previous_);
    std::signal(SIGXFSZ, previous_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit previous_{};
  void (*previous_handler_)(int) = nullptr;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(atomic_file)

BOOST_AUTO_TEST_CASE(a_write_leaves_the_whole_file_and_nothing_else) {
  TempDir dir("atomic_file");
  const auto path = dir.path / "data.bin";
  std::string bytes(300000, '\0');  // larger than the write buffer, with every byte value
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7 % 256);
  write_file_atomically(path, bytes);
  BOOST_TEST(read_text(path) == bytes);
  BOOST_TEST(entry_names(dir.path) == std::set<std::string>{"data.bin"},
             boost::test_tools::per_element());

  write_file_atomically(path, "shorter");  // replaces, does not overwrite in place
  BOOST_TEST(read_text(path) == "shorter");
  BOOST_TEST(entry_names(dir.path).size() == 1u);
}

BOOST_AUTO_TEST_CASE(a_replacement_durable_until_a_process_crash_makes_no_fsync) {
  TempDir dir("atomic_file");
  const auto path = dir.path / "report.html";
  const auto before = fsyncs();
  write_file_atomically(path, "first", Durability::kProcessCrash);
  write_file_atomically(path, "second", Durability::kProcessCrash);
  BOOST_TEST(fsyncs() - before == 0u);
  BOOST_TEST(read_text(path) == "second");
  BOOST_TEST(entry_names(dir.path) == std::set<std::string>{"report.html"},
             boost::test_tools::per_element());

  write_file_atomically(path, "third");  // durable through a power loss: the file, the directory
  BOOST_TEST(fsyncs() - before == 2u);
  BOOST_TEST(read_text(path) == "third");
}

BOOST_AUTO_TEST_CASE(pieces_written_to_an_atomic_file_appear_at_commit_only) {
  TempDir dir("atomic_file");
  const auto path = dir.path / "table.csv";
  std::ofstream(path) << "old\n";
  AtomicFile file(path);
  std::string expected;
  for (int row = 0; row < 5000; ++row) {
    const auto line = "row," + std::to_string(row) + "\n";
    file.write(line);
    expected += line;
  }
  BOOST_TEST(read_text(path) == "old\n");  // readers still see the old file
  file.commit();
  BOOST_TEST(read_text(path) == expected);
  BOOST_TEST(entry_names(dir.path) == std::set<std::string>{"table.csv"},
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(an_abandoned_atomic_file_leaves_the_old_file_and_no_temporary) {
  TempDir dir("atomic_file");
  const auto path = dir.path / "report.html";
  std::ofstream(path) << "old";
  {
    AtomicFile file(path);
    file.write("new");
    BOOST_TEST(entry_names(dir.path).size() == 2u);  // the temporary exists while it is written
  }
  BOOST_TEST(read_text(path) == "old");
  BOOST_TEST(entry_names(dir.path) == std::set<std::string>{"report.html"},
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_failing_write_keeps_the_old_file_and_names_the_path_and_the_reason) {
  TempDir dir("atomic_file");
  const auto path = dir.path / "checkpoint.bin";
  std::ofstream(path) << "the old checkpoint";
  std::string message;
  {
    const FileSizeLimit limit(4096);
    try {
      write_file_atomically(path, std::string(1 << 20, 'x'));
    } catch (const Error& error) {
      message = error.what();
    }
  }
  BOOST_TEST_REQUIRE(!message.empty(), "the write did not fail");
  BOOST_TEST(contains(message, path.string()), message);
  BOOST_TEST(contains(message, std::strerror(EFBIG)), message);
  BOOST_TEST(read_text(path) == "the old checkpoint");
  BOOST_TEST(entry_names(dir.path) == std::set<std::string>{"checkpoint.bin"},
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_write_into_a_missing_directory_names_it_and_creates_nothing) {
  TempDir dir("atomic_file");
  const auto path = dir.path / "missing" / "file.txt";
  try {
    write_file_atomically(path, "text");
    BOOST_FAIL("the write did not fail");
  } catch (const Error& error) {
    BOOST_TEST(contains(error.what(), path.string()), error.what());
    BOOST_TEST(contains(error.what(), std::strerror(ENOENT)), error.what());
  }
  BOOST_TEST(entry_names(dir.path).empty());
}

BOOST_AUTO_TEST_CASE(a_symlink_is_replaced_atomically) {
  TempDir dir("atomic_file");
  std::ofstream(dir.path / "a") << "first";
  std::ofstream(dir.path / "b") << "second";
  const auto link = dir.path / "last";
  replace_with_symlink(link, "a");
  BOOST_TEST(fs::read_symlink(link) == fs::path("a"));
  BOOST_TEST(read_text(link) == "first");
  replace_with_symlink(link, "b");
  BOOST_TEST(fs::read_symlink(link) == fs::path("b"));
  BOOST_TEST(read_text(link) == "second");
  BOOST_TEST(entry_names(dir.path) == (std::set<std::string>{"a", "b", "last"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(stale_temporaries_are_removed_and_nothing_else) {
  TempDir dir("atomic_file");
  std::ofstream(dir.path / "kept.txt") << "kept";
  std::ofstream(dir.path / "kept.txt.tmp-4242") << "partial";
  fs::create_symlink("kept.txt", dir.path / "last.tmp-4242");
  BOOST_TEST(remove_stale_temporaries(dir.path) == 2);
  BOOST_TEST(entry_names(dir.path) == std::set<std::string>{"kept.txt"},
             boost::test_tools::per_element());
  BOOST_TEST(remove_stale_temporaries(dir.path / "missing") == 0);
}

BOOST_AUTO_TEST_CASE(system_error_text_is_strerrors_text) {
  BOOST_TEST(system_error_text(ENOENT) == std::string(std::strerror(ENOENT)));
  BOOST_TEST(system_error_text(ENOSPC) == std::string(std::strerror(ENOSPC)));
  BOOST_TEST(system_error_text(0) == "unknown error");
}

BOOST_AUTO_TEST_SUITE_END()
