// torchbus-train given bad flag values and bad data (issue 31): each is refused at once with a
// message naming the flag (with its accepted range) or the file (with the row and column), before
// the run directory is created. Every run is under a time limit, so a hang fails instead of
// stalling the suite.

#include "summary_json.hpp"

#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/scratch.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using torchbus::testing::has;
using torchbus::testing::json_number;
using torchbus::testing::json_string;
using torchbus::testing::read_text;
using torchbus::testing::scratch;
using torchbus::testing::scratch_path;

namespace {

/// Seconds a run may take before it is killed: each of these ends in a few.
constexpr int kTimeLimitSeconds = 20;

struct Result {
  int status = -1;     // the exit code; -1 when killed (the time limit ran out)
  std::string output;  // stdout and stderr
};

/// Runs torchbus-train with `arguments` (shell words), killed after kTimeLimitSeconds.
Result run_train(const std::string& arguments) {
  const std::string command = "exec timeout -s KILL " + std::to_string(kTimeLimitSeconds) + " " +
                              std::string(TORCHBUS_TRAIN_PATH) + " " + arguments + " 2>&1";
  Result result;
  FILE* pipe = popen(command.c_str(), "r");
  BOOST_REQUIRE(pipe != nullptr);
  std::array<char, 4096> buffer{};
  while (fgets(buffer.data(), buffer.size(), pipe) != nullptr) result.output += buffer.data();
  const int status = pclose(pipe);
  result.status = WIFEXITED(status) && WEXITSTATUS(status) != 128 + 9 ? WEXITSTATUS(status) : -1;
  return result;
}

int lines(const std::string& text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(bad_input)

// Each bad value is a usage error (exit 2) naming the flag and its accepted range, found before
// OUT is created.
BOOST_AUTO_TEST_CASE(bad_flag_values_are_usage_errors_naming_the_flag_and_its_range) {
  const auto out = scratch_path("bad_input_test", "flags_out");
  struct Case {
    std::string arguments, flag, range;
  };
  // The cases of issue 31; train_test.cpp's bad_values_are_named_with_their_flag has more.
  const std::vector<Case> cases = {
      {"--seed -1", "--seed", ">= 0 and <= 9223372036854775807"},
      {"--seed 18446744073709551616", "--seed", ">= 0 and <= 9223372036854775807"},
      {"--lr 1e38", "--lr", "> 0 and <= 1e+37"},
      {"--swa-start 0.5 --swa-lr 1e38", "--swa-lr", ">= 0 and <= 1e+37"},
      {"--out ''", "--out", "expected a directory path, got ''"},
      {"--epochs 99999999999999999999", "--epochs", ">= 1, got '99999999999999999999' (outside"},
      {"--time-limit 1e10", "--time-limit", ">= 0 and <= 1e+09"},
  };
  for (const auto& c : cases) {
    const auto result = run_train(c.arguments + " --out " + out.string());
    BOOST_TEST(result.status == 2, c.arguments << ": " << result.output);
    BOOST_TEST(has(result.output, c.flag), c.arguments);
    BOOST_TEST(has(result.output, c.range), c.arguments);
    BOOST_TEST(lines(result.output) <= 3, result.output);
    BOOST_TEST(!fs::exists(out), c.arguments << ": " << out << " was created");
  }
}

// --lr's bound is what the run can really do: Adam's first step, 10 lr, is a float32 in LibTorch
// (the tightest of the optimizers). At the bound the run trains, and stops at the non-finite loss
// it soon reaches, instead of failing on a conversion.
BOOST_AUTO_TEST_CASE(the_largest_learning_rate_trains) {
  const auto out = scratch_path("bad_input_test", "lr_bound");
  const auto result =
      run_train("--lr 1e37 --optimizer adam --max-steps 3 --no-progress --out " + out.string());
  BOOST_TEST(result.status == 0, result.output);
  BOOST_TEST(!has(result.output, "overflow"), result.output);
  BOOST_TEST(has(json_string(read_text(out / "summary.json"), "stop_reason"), "TerminateOnNaN"));
}

// planned_steps() counted the steps epoch by epoch: 10^12 epochs hung before training. A batch
// size near 2^63 overflowed the batches per epoch (0 batches, said the log), and SWA's first
// epoch, floor(1.0 * 2^63), overflowed to a negative one: its learning rate from the start.
BOOST_AUTO_TEST_CASE(huge_epoch_counts_and_batch_sizes_train_at_once) {
  const auto out = scratch_path("bad_input_test", "huge_epochs");
  const auto result = run_train(
      "--epochs 9223372036854775807 --max-steps 5 --batch-size 9223372036854775807 "
      "--accumulate-schedule 0:1,3:2 --swa-start 1 --swa-lr 0.5 --log-every 1 --no-progress "
      "--out " +
      out.string());
  BOOST_TEST_REQUIRE(result.status == 0, result.output);
  const auto summary = read_text(out / "summary.json");
  BOOST_TEST(json_number(summary, "steps") == 5);
  BOOST_TEST(json_string(summary, "stop_reason") == "max_steps reached");
  BOOST_TEST(has(result.output, "epochs of 1 batches of 9223372036854775807"));
  std::size_t logged_at_the_run_lr = 0;
  for (auto at = result.output.find(" lr=0.001 "); at != std::string::npos;
       at = result.output.find(" lr=0.001 ", at + 1)) {
    ++logged_at_the_run_lr;
  }
  BOOST_TEST(logged_at_the_run_lr == 5u, result.output);
}

BOOST_AUTO_TEST_SUITE_END()
