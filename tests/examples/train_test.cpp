// torchbus-train end to end: it is run as a user would run it, and its outputs are read back.

#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/scratch.hpp>
#include <support/tfrecord_reader.hpp>
#include <support/xml_check.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

namespace fs = std::filesystem;
using torchbus::testing::has;
using torchbus::testing::read_text;
using torchbus::testing::scratch;

namespace {

struct Result {
  int status = -1;
  std::string output;  // stdout and stderr
};

Result run_train(const std::string& arguments) {
  const std::string command = std::string(TORCHBUS_TRAIN_PATH) + " " + arguments + " 2>&1";
  Result result;
  FILE* pipe = popen(command.c_str(), "r");
  BOOST_REQUIRE(pipe != nullptr);
  std::array<char, 4096> buffer{};
  while (fgets(buffer.data(), buffer.size(), pipe) != nullptr) result.output += buffer.data();
  const int status = pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

/// Starts torchbus-train with `arguments`, sends SIGINT once `log` contains `marker`, and returns
/// the exit status.
int interrupt_train(const std::vector<std::string>& arguments, const fs::path& log,
                    const std::string& marker);

int interrupt_train(const std::vector<std::string>& arguments, const fs::path& log,
                    const std::string& marker) {
  const pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> argv{const_cast<char*>(TORCHBUS_TRAIN_PATH)};
    for (const auto& argument : arguments) argv.push_back(const_cast<char*>(argument.c_str()));
    argv.push_back(nullptr);
    std::freopen("/dev/null", "w", stdout);
    execv(TORCHBUS_TRAIN_PATH, argv.data());
    _exit(127);
  }
  for (int i = 0; i < 2000 && read_text(log).find(marker) == std::string::npos; ++i) usleep(5000);
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/// The number stored under `key` in a flat JSON text (NaN when absent or null).
double json_number(const std::string& json, const std::string& key) {
  std::smatch match;
  const std::regex pattern("\"" + key + "\": (-?[0-9.eE+-]+)");
  return std::regex_search(json, match, pattern) ? std::stod(match[1]) : std::nan("");
}

std::string json_string(const std::string& json, const std::string& key) {
  std::smatch match;
  const std::regex pattern("\"" + key + "\": \"([^\"]*)\"");
  return std::regex_search(json, match, pattern) ? std::string(match[1]) : std::string();
}

void write_big_endian(std::ofstream& out, std::uint32_t value) {
  const char bytes[4] = {char(value >> 24), char(value >> 16), char(value >> 8), char(value)};
  out.write(bytes, 4);
}

/// Writes an IDX image file (magic 2051) and label file (2049) with `count` 28x28 images whose
/// label is encoded in their brightness, so a model can learn it.
void write_idx_pair(const fs::path& images, const fs::path& labels, int count,
                    std::uint32_t image_magic = 2051) {
  std::ofstream image_file(images, std::ios::binary), label_file(labels, std::ios::binary);
  write_big_endian(image_file, image_magic);
  write_big_endian(image_file, count);
  write_big_endian(image_file, 28);
  write_big_endian(image_file, 28);
  write_big_endian(label_file, 2049);
  write_big_endian(label_file, count);
  for (int i = 0; i < count; ++i) {
    const int label = i % 10;
    for (int pixel = 0; pixel < 28 * 28; ++pixel) image_file.put(char(label * 25 + (pixel % 3)));
    label_file.put(char(label));
  }
}

fs::path make_mnist(const std::string& name, std::uint32_t image_magic = 2051) {
  const auto dir = scratch("train_test", name);
  write_idx_pair(dir / "train-images-idx3-ubyte", dir / "train-labels-idx1-ubyte", 200,
                 image_magic);
  write_idx_pair(dir / "t10k-images-idx3-ubyte", dir / "t10k-labels-idx1-ubyte", 50);
  return dir;
}

fs::path make_csv(const std::string& name, const std::string& header, const std::string& rows) {
  const auto path = scratch("train_test", name) / "data.csv";
  std::ofstream(path) << header << "\n" << rows;
  return path;
}

std::string learnable_csv_rows(int count) {
  std::string rows;
  for (int i = 0; i < count; ++i) {
    const int label = i % 2;
    rows += std::to_string(label * 2.0 + (i % 7) * 0.1) + "," + std::to_string(1.0 - label) + "," +
            std::to_string(label) + "\n";
  }
  return rows;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(train)

BOOST_AUTO_TEST_CASE(synthetic_run_learns_and_writes_its_outputs) {
  const auto out = scratch("train_test", "synthetic");
  const auto result = run_train("--epochs 3 --out " + out.string());
  BOOST_TEST_REQUIRE(result.status == 0, result.output);
  const auto summary = read_text(out / "summary.json");
  for (const auto* key : {"steps", "epochs", "final_train_loss", "final_val_loss",
                          "final_val_accuracy", "wall_seconds", "samples_per_second"}) {
    BOOST_TEST(!std::isnan(json_number(summary, key)), key);
  }
  BOOST_TEST(json_number(summary, "steps") == 384);  // 8192 / 64 * 3
  BOOST_TEST(json_number(summary, "epochs") == 3);
  BOOST_TEST(json_number(summary, "final_val_accuracy") > 0.5);  // chance is 0.1
  BOOST_TEST(json_string(summary, "params_sha256").size() == 64u);
  const auto log = read_text(out / "train.log");
  BOOST_TEST(has(log, "epoch 3 ended"));
  // TensorBoard: one event file whose records all pass their CRC checks (read_events throws
  // otherwise), with the loss every 50 steps and the validation accuracy per epoch.
  const auto tensorboard = torchbus::testing::event_files(out / "tensorboard");
  BOOST_TEST_REQUIRE(tensorboard.size() == 1u);
  const auto events = torchbus::testing::read_events(tensorboard.front());
  BOOST_TEST(torchbus::testing::scalars_of(events, "train/loss").size() == 7u);  // 50, ..., 350
  BOOST_TEST(torchbus::testing::scalars_of(events, "metrics/val_accuracy").size() == 3u);
  // The report: well-formed, a chart per metric, the run's options.
  const auto report = read_text(out / "report.html");
  BOOST_TEST(torchbus::testing::xml_problem(report) == "");
  for (const auto* metric : {"train_loss", "val_loss", "val_accuracy", "lr"}) {
    BOOST_TEST(has(report, std::string("data-metric=\"") + metric + "\""), metric);
  }
  BOOST_TEST(has(report, "batch_size"));
  BOOST_TEST(has(report, "finished"));
  for (const auto& entry : fs::directory_iterator(out)) {
    BOOST_TEST(entry.path().filename().string().find(".tmp") == std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(output_switches_and_the_profiler) {
  const auto out = scratch("train_test", "switches");
  const auto result = run_train(
      "--epochs 1 --max-steps 20 --no-tensorboard --no-csv --profile --out " + out.string());
  BOOST_TEST_REQUIRE(result.status == 0, result.output);
  BOOST_TEST(!fs::exists(out / "tensorboard"));
  BOOST_TEST(!fs::exists(out / "metrics.csv"));
  const auto report = read_text(out / "report.html");
  BOOST_TEST(torchbus::testing::xml_problem(report) == "");
  BOOST_TEST(has(report, "Profile"));  // the profiler's table, of this run
  BOOST_TEST(has(report, "forward"));
  BOOST_TEST(has(read_text(out / "train.log"), "forward"));
  const auto without = scratch("train_test", "no_report");
  BOOST_TEST_REQUIRE(
      run_train("--epochs 1 --max-steps 5 --no-report --out " + without.string()).status == 0);
  BOOST_TEST(!fs::exists(without / "report.html"));
}

BOOST_AUTO_TEST_CASE(same_seed_gives_bitwise_equal_parameters) {
  const auto first = scratch("train_test", "seed_a"), second = scratch("train_test", "seed_b");
  BOOST_TEST_REQUIRE(
      run_train("--epochs 1 --max-steps 40 --accumulate 3 --out " + first.string()).status == 0);
  BOOST_TEST_REQUIRE(
      run_train("--epochs 1 --max-steps 40 --accumulate 3 --out " + second.string()).status == 0);
  const auto a = json_string(read_text(first / "summary.json"), "params_sha256");
  const auto b = json_string(read_text(second / "summary.json"), "params_sha256");
  BOOST_TEST(a == b);
  const auto other = scratch("train_test", "seed_c");
  BOOST_TEST_REQUIRE(
      run_train("--epochs 1 --max-steps 40 --seed 7 --out " + other.string()).status == 0);
  BOOST_TEST(json_string(read_text(other / "summary.json"), "params_sha256") != a);
}

BOOST_AUTO_TEST_CASE(ctrl_c_saves_a_checkpoint_and_resume_ends_bitwise_equal) {
  const auto reference = scratch("train_test", "uninterrupted");
  const std::string common = " --epochs 3 --no-progress --log-every 20 --out ";
  BOOST_TEST_REQUIRE(run_train(common + reference.string()).status == 0);
  const auto expected = json_string(read_text(reference / "summary.json"), "params_sha256");

  const auto out = scratch("train_test", "interrupted");
  const std::vector<std::string> arguments{"--epochs", "3",     "--no-progress", "--log-every",
                                           "20",       "--out", out.string()};
  BOOST_TEST(interrupt_train(arguments, out / "train.log", "step 160 ") == 130);
  const auto interrupted = read_text(out / "summary.json");  // says it did not finish
  BOOST_TEST(json_string(interrupted, "stop_reason") == "interrupted (SIGINT)");
  BOOST_TEST(json_number(interrupted, "steps") < 384);
  BOOST_TEST(fs::exists(out / "checkpoints" / "last.tbckpt"));
  const auto resumed = run_train(common + out.string() + " --resume");
  BOOST_TEST_REQUIRE(resumed.status == 0, resumed.output);
  BOOST_TEST(has(read_text(out / "train.log"), "resumed from"));
  const auto summary = read_text(out / "summary.json");
  BOOST_TEST(json_number(summary, "steps") == 384);
  BOOST_TEST(json_string(summary, "params_sha256") == expected);
  // The CSV continues the interrupted run's rows without duplicates.
  const auto csv = read_text(out / "metrics.csv");
  BOOST_TEST(csv.find("step,160,") != std::string::npos);
  BOOST_TEST(csv.find("step,160,") == csv.rfind("step,160,"));
  BOOST_TEST(
      run_train("--resume --out " + scratch("train_test", "nothing_to_resume").string()).status ==
      1);
}

BOOST_AUTO_TEST_CASE(tiny_idx_dataset_with_the_cnn) {
  const auto data = make_mnist("mnist");
  const auto out = scratch("train_test", "mnist_run");
  const auto result = run_train("--data mnist:" + data.string() +
                                " --epochs 2 --batch-size 20 --out " + out.string());
  BOOST_TEST_REQUIRE(result.status == 0, result.output);
  const auto summary = read_text(out / "summary.json");
  BOOST_TEST(json_number(summary, "steps") == 20);
  BOOST_TEST(has(read_text(out / "train.log"), "MNIST from"));
}

BOOST_AUTO_TEST_CASE(tiny_csv_file_with_a_named_label) {
  const auto csv = make_csv("csv", "x,y,class", learnable_csv_rows(100));
  const auto out = scratch("train_test", "csv_run");
  const auto result =
      run_train("--data csv:" + csv.string() +
                ":class --epochs 20 --batch-size 16 --lr 0.01 --out " + out.string());
  BOOST_TEST_REQUIRE(result.status == 0, result.output);
  const auto summary = read_text(out / "summary.json");
  BOOST_TEST(json_number(summary, "final_val_accuracy") > 0.8);
}

BOOST_AUTO_TEST_CASE(usage_errors_exit_2_with_a_hint) {
  for (const auto* arguments :
       {"--bogus", "--epochs -1", "--batch-size 0", "--optimizer rmsprop", "--data parquet:file"}) {
    const auto result = run_train(arguments);
    BOOST_TEST(result.status == 2, arguments);
    BOOST_TEST(has(result.output, "--help"));
    BOOST_TEST(!has(result.output, "terminate called"));
  }
  BOOST_TEST(has(run_train("--epochs -1").output, "expected an integer >= 1, got '-1'"));
}

BOOST_AUTO_TEST_CASE(failed_runs_exit_1_with_the_reason_and_no_summary) {
  const auto out = scratch("train_test", "failures");
  auto expect_failure = [&](const std::string& arguments, const std::string& reason) {
    const auto result = run_train(arguments + " --out " + out.string());
    BOOST_TEST(result.status == 1, arguments);
    BOOST_TEST(has(result.output, reason));
    BOOST_TEST(!has(result.output, "terminate called"));
    BOOST_TEST(!fs::exists(out / "summary.json"));
  };
  expect_failure("--data mnist:/no/such/dir", "'/no/such/dir' is not a directory");
  const auto bad_magic = make_mnist("bad_magic", 1234);
  expect_failure("--data mnist:" + bad_magic.string(), "has IDX magic number 1234; expected 2051");
  const auto no_label = make_csv("no_label", "a,b,c", "1,2,3\n4,5,6\n");
  expect_failure("--data csv:" + no_label.string(),
                 "has no column 'label'; its columns are: a, b, c");
  const auto bad_cell = make_csv("bad_cell", "a,label", "1,0\n2,1\nseven,0\n");
  expect_failure("--data csv:" + bad_cell.string(), "row 4 column 'a': 'seven' is not a number");
  expect_failure("--data csv:/no/such.csv", "cannot open '/no/such.csv'");
}

BOOST_AUTO_TEST_CASE(unwritable_output_directory) {
  const auto file = scratch("train_test", "blocked") / "a_file";
  std::ofstream(file) << "x";
  const auto result = run_train("--out " + (file / "run").string());
  BOOST_TEST(result.status == 1);
  BOOST_TEST(has(result.output, "cannot create the run directory"));
}

BOOST_AUTO_TEST_CASE(a_successful_run_replaces_a_stale_summary_only_at_its_end) {
  const auto out = scratch("train_test", "stale");
  std::ofstream(out / "summary.json") << "{\"stale\": true}";
  const auto csv = make_csv("stale_csv", "a,label", "1,0\n2,x\n");
  BOOST_TEST(run_train("--data csv:" + csv.string() + " --out " + out.string()).status == 1);
  BOOST_TEST(!fs::exists(out / "summary.json"));  // the failed run does not look finished
}

BOOST_AUTO_TEST_SUITE_END()
