// torchbus-train given bad flag values and bad data (issue 31): each is refused at once with a
// message naming the flag (with its accepted range) or the file (with the row and column), before
// the run directory is created. Every run is under a time limit, so a hang fails instead of
// stalling the suite.

#include "idx_file.hpp"
#include "run_train.hpp"
#include "summary_json.hpp"

#include <torch/cuda.h>
#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/scratch.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using torchbus::testing::has;
using torchbus::testing::json_number;
using torchbus::testing::json_string;
using torchbus::testing::json_value;
using torchbus::testing::read_text;
using torchbus::testing::scratch;
using torchbus::testing::scratch_path;
using torchbus::testing::TrainResult;

using torchbus::testing::write_big_endian;

namespace {

/// Seconds a run may take before it is killed: each of these ends in a few.
constexpr int kTimeLimitSeconds = 20;

/// Runs torchbus-train with `arguments`, killed after kTimeLimitSeconds.
TrainResult run_briefly(const std::string& arguments) {
  return torchbus::testing::run_train(arguments, "", kTimeLimitSeconds);
}

int lines(const std::string& text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

/// Checks that `arguments` (with --out `out`) exit 1 with a message holding each of `parts`, in a
/// few short lines, without creating `out`.
void expect_data_error(const std::string& arguments, const fs::path& out,
                       const std::vector<std::string>& parts) {
  const auto result = run_briefly(arguments + " --no-progress --out " + out.string());
  BOOST_TEST(result.status == 1, arguments << ": " << result.output);
  for (const auto& part : parts) BOOST_TEST(has(result.output, part), arguments);
  BOOST_TEST(!has(result.output, "--help"), result.output);
  BOOST_TEST(lines(result.output) <= 3, result.output);
  BOOST_TEST(result.output.size() < 800u, result.output.size());
  BOOST_TEST(!fs::exists(out), arguments << ": " << out << " was created");
}

/// Writes an IDX file of unsigned bytes: magic 0x800 + dimensions, the sizes, then `data`.
void write_idx(const fs::path& path, const std::vector<std::uint32_t>& sizes,
               const std::string& data) {
  std::ofstream file(path, std::ios::binary);
  write_big_endian(file, 0x800 + static_cast<std::uint32_t>(sizes.size()));
  for (const auto size : sizes) write_big_endian(file, size);
  file << data;
}

/// An MNIST directory of `train` and `test` images of `side`x`side` pixels (labels i % 10).
fs::path make_idx_mnist(const std::string& name, std::uint32_t train, std::uint32_t test,
                        std::uint32_t side) {
  const auto dir = scratch("bad_input_test", name);
  const auto pair = [&](const std::string& prefix, std::uint32_t count) {
    std::string labels;
    for (std::uint32_t i = 0; i < count; ++i) labels += char(i % 10);
    write_idx(dir / (prefix + "-images-idx3-ubyte"), {count, side, side},
              std::string(std::size_t{count} * side * side, char(100)));
    write_idx(dir / (prefix + "-labels-idx1-ubyte"), {count}, labels);
  };
  pair("train", train);
  pair("t10k", test);
  return dir;
}

fs::path make_csv_file(const std::string& name, const std::string& content) {
  const auto path = scratch("bad_input_test", name) / "data.csv";
  std::ofstream(path, std::ios::binary) << content;
  return path;
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
      {"--ema 1", "--ema", ">= 0 and < 1, got '1'"},
      {"--lr ' 0.1'", "--lr", "got ' 0.1'"},
      {"--epochs ' 2'", "--epochs", ">= 1, got ' 2'"},
      {"--init-from ''", "--init-from", "expected a state_dict file, got ''"},
      {"--task ranking", "--task", "ranking not in {classification,regression}"},
  };
  for (const auto& c : cases) {
    const auto result = run_briefly(c.arguments + " --out " + out.string());
    BOOST_TEST(result.status == 2, c.arguments << ": " << result.output);
    BOOST_TEST(has(result.output, c.flag), c.arguments);
    BOOST_TEST(has(result.output, c.range), c.arguments);
    BOOST_TEST(lines(result.output) <= 3, result.output);
    BOOST_TEST(!fs::exists(out), c.arguments << ": " << out << " was created");
  }
  // A number too small for a normal double is read as what it is, not refused.
  const auto tiny_out = scratch_path("bad_input_test", "subnormal_lr");
  const auto tiny = run_briefly("--lr 4.9e-324 --epochs 1 --max-steps 1 --no-progress --out " +
                                tiny_out.string());
  BOOST_TEST(tiny.status == 0, tiny.output);
}

// --device names a device this machine has: a malformed one, or CUDA where there is none, is a
// usage error naming what is visible, before OUT is created; auto trains on the CPU and says why.
BOOST_AUTO_TEST_CASE(devices_that_are_not_there_are_usage_errors_naming_what_is_visible) {
  const auto out = scratch_path("bad_input_test", "device_out");
  std::vector<std::pair<std::string, std::string>> cases = {
      {"--device gpu", "expected auto, cpu, cuda or cuda:N (N a device index), got 'gpu'"},
      {"--device cuda:x", "expected auto, cpu, cuda or cuda:N (N a device index), got 'cuda:x'"},
      {"--device cpu --precision 16-mixed", "needs a CUDA device, got cpu"},
  };
  if (!torch::cuda::is_available()) {
    for (const auto* device : {"cuda", "cuda:0", "cuda:3"}) {
      cases.emplace_back(std::string("--device ") + device,
                         std::string("--device ") + device +
                             ": CUDA is not available: a LibTorch without CUDA, or no GPU "
                             "visible; visible: cpu");
    }
  } else {
    const auto missing = std::to_string(torch::cuda::device_count());
    cases.emplace_back("--device cuda:" + missing, "there is no CUDA device " + missing);
  }
  for (const auto& [arguments, message] : cases) {
    const auto result = run_briefly(arguments + " --out " + out.string());
    BOOST_TEST(result.status == 2, arguments << ": " << result.output);
    BOOST_TEST(has(result.output, message), arguments << ": " << result.output);
    BOOST_TEST(lines(result.output) <= 3, result.output);
    BOOST_TEST(!fs::exists(out), arguments << ": " << out << " was created");
  }
  if (torch::cuda::is_available()) return;
  const auto cpu = scratch("bad_input_test", "device_auto");
  const auto result = run_briefly("--epochs 1 --max-steps 2 --no-progress --out " + cpu.string());
  BOOST_TEST_REQUIRE(result.status == 0, result.output);
  BOOST_TEST(has(result.output,
                 "device: cpu (auto: CUDA is not available: a LibTorch without CUDA, or no GPU "
                 "visible)"),
             result.output);
  BOOST_TEST(json_string(read_text(cpu / "summary.json"), "device") == "cpu");
}

// --lr's bound is what the run can really do: Adam's first step, 10 lr, is a float32 in LibTorch
// (the tightest of the optimizers). At the bound the run trains, and stops at the non-finite loss
// it soon reaches, instead of failing on a conversion.
BOOST_AUTO_TEST_CASE(the_largest_learning_rate_trains) {
  const auto out = scratch_path("bad_input_test", "lr_bound");
  const auto result =
      run_briefly("--lr 1e37 --optimizer adam --max-steps 3 --no-progress --out " + out.string());
  BOOST_TEST(result.status == 0, result.output);
  BOOST_TEST(!has(result.output, "overflow"), result.output);
  BOOST_TEST(has(json_string(read_text(out / "summary.json"), "stop_reason"), "TerminateOnNaN"));
}

// planned_steps() counted the steps epoch by epoch: 10^12 epochs hung before training. A batch
// size near 2^63 overflowed the batches per epoch (0 batches, said the log), and SWA's first
// epoch, floor(1.0 * 2^63), overflowed to a negative one: its learning rate from the start.
BOOST_AUTO_TEST_CASE(huge_epoch_counts_and_batch_sizes_train_at_once) {
  const auto out = scratch_path("bad_input_test", "huge_epochs");
  const auto result = run_briefly(
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

// Integers are decimal, whatever their leading zeros: CLI11 alone would read --epochs 010 as
// octal 8.
BOOST_AUTO_TEST_CASE(integers_with_leading_zeros_are_read_in_decimal) {
  const auto out = scratch_path("bad_input_test", "leading_zeros");
  const auto result = run_briefly(
      "--epochs 010 --limit-train-batches 01 --limit-val-batches 1 --seed 011 "
      "--no-progress --out " +
      out.string());
  BOOST_TEST_REQUIRE(result.status == 0, result.output);
  const auto options = json_value(read_text(out / "summary.json"), "options");
  BOOST_TEST(options["epochs"].get<std::int64_t>() == 10);
  BOOST_TEST(options["seed"].get<std::int64_t>() == 11);
  BOOST_TEST(json_number(read_text(out / "summary.json"), "steps") == 10);
}

// --hidden shapes the MLP only: with the CNN it is a usage error, not silently ignored.
BOOST_AUTO_TEST_CASE(hidden_widths_with_the_cnn_are_a_usage_error) {
  const auto out = scratch_path("bad_input_test", "hidden_cnn");
  const auto images = make_idx_mnist("hidden_cnn_images", 20, 10, 8);
  for (const std::string model : {"", " --model cnn"}) {
    const auto result = run_briefly("--data mnist:" + images.string() + model +
                                    " --hidden 16 --out " + out.string());
    BOOST_TEST(result.status == 2, result.output);
    BOOST_TEST(has(result.output, "--hidden sets the MLP's hidden widths"), result.output);
    BOOST_TEST(!fs::exists(out), model << ": " << out << " was created");
  }
  const auto mlp =
      run_briefly("--data mnist:" + images.string() +
                  " --model mlp --hidden 16 --epochs 1 --no-progress --out " + out.string());
  BOOST_TEST_REQUIRE(mlp.status == 0, mlp.output);
  const auto options = json_value(read_text(out / "summary.json"), "options");
  BOOST_TEST(options["hidden"] == nlohmann::json::array({16}), options.dump());
  BOOST_TEST(options["channels_last"] == false, options.dump());
}

// --channels-last lays out the CNN's tensors: with the MLP it trains, and says it changes nothing.
BOOST_AUTO_TEST_CASE(channels_last_with_the_mlp_is_said_to_change_nothing) {
  const auto out = scratch_path("bad_input_test", "channels_last_mlp");
  const auto result = run_briefly(
      "--channels-last --epochs 1 --limit-train-batches 2 --limit-val-batches 1 "
      "--no-progress --out " +
      out.string());
  BOOST_TEST_REQUIRE(result.status == 0, result.output);
  BOOST_TEST(has(result.output, "--channels-last changes nothing for the MLP"), result.output);
  BOOST_TEST(has(read_text(out / "train.log"), "--channels-last changes nothing for the MLP"));
}

BOOST_AUTO_TEST_CASE(images_too_small_for_the_cnn_are_refused_naming_the_file) {
  const auto out = scratch_path("bad_input_test", "tiny_out");
  const auto tiny = make_idx_mnist("tiny", 20, 10, 3);
  expect_data_error(
      "--data mnist:" + tiny.string(), out,
      {(tiny / "train-images-idx3-ubyte").string(), "3x3 pixels", "at least 4x4", "--model mlp"});
  // An MLP takes them.
  const auto mlp = run_briefly("--data mnist:" + tiny.string() + " --model mlp --epochs 1 --out " +
                               out.string());
  BOOST_TEST(mlp.status == 0, mlp.output);
}

// The header is checked against the file's size before anything is allocated; bytes after the
// announced data (a file of another shape) are refused as well, as torchvision's reader does.
BOOST_AUTO_TEST_CASE(an_idx_header_announcing_another_size_than_the_file_holds_is_refused) {
  const auto out = scratch_path("bad_input_test", "idx_out");
  for (const std::vector<std::uint32_t>& sizes :
       {std::vector<std::uint32_t>{0x7fffffff, 28, 28}, {0xffffffff, 0xffffffff, 0xffffffff}}) {
    const auto dir = make_idx_mnist("idx_header", 20, 10, 28);
    const auto images = dir / "train-images-idx3-ubyte";
    write_idx(images, sizes, std::string(1000, char(1)));
    expect_data_error("--data mnist:" + dir.string(), out,
                      {images.string(), "holds 1000 bytes of data", "its header announces"});
  }
  const auto dir = make_idx_mnist("idx_trailing", 20, 10, 28);
  const auto images = dir / "train-images-idx3-ubyte";
  write_idx(images, {20, 28, 28}, std::string(20 * 28 * 28 + 5, char(1)));
  expect_data_error(
      "--data mnist:" + dir.string(), out,
      {images.string(), "holds 15685 bytes of data; its header announces 20 x 28 x 28 bytes"});
}

BOOST_AUTO_TEST_CASE(empty_or_degenerate_idx_files_are_refused_naming_the_file) {
  const auto out = scratch_path("bad_input_test", "empty_out");
  const auto no_train = make_idx_mnist("no_train", 0, 10, 28);
  expect_data_error("--data mnist:" + no_train.string(), out,
                    {(no_train / "train-images-idx3-ubyte").string(), "holds no images"});
  const auto no_test = make_idx_mnist("no_test", 20, 0, 28);
  expect_data_error("--data mnist:" + no_test.string(), out,
                    {(no_test / "t10k-images-idx3-ubyte").string(), "holds no images"});
  const auto no_pixels = make_idx_mnist("no_pixels", 20, 10, 0);
  expect_data_error("--data mnist:" + no_pixels.string(), out,
                    {(no_pixels / "train-images-idx3-ubyte").string(), "0x0 pixels"});
}

// A device or a FIFO (or a directory) is refused by name before it is read: /dev/zero never
// ends, a FIFO without a writer blocks.
BOOST_AUTO_TEST_CASE(data_that_is_not_a_regular_file_is_refused_naming_it) {
  const auto out = scratch_path("bad_input_test", "special_out");
  const auto dir = scratch("bad_input_test", "special");
  const auto fifo = dir / "data.csv";
  BOOST_TEST_REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  expect_data_error("--data csv:/dev/zero", out, {"'/dev/zero' is a character device"});
  expect_data_error("--data csv:" + fifo.string(), out, {fifo.string() + "' is a FIFO"});
  const auto mnist = make_idx_mnist("fifo_mnist", 20, 10, 28);
  const auto images = mnist / "t10k-images-idx3-ubyte";
  fs::remove(images);
  BOOST_TEST_REQUIRE(mkfifo(images.c_str(), 0600) == 0);
  expect_data_error("--data mnist:" + mnist.string(), out, {images.string() + "' is a FIFO"});
}

BOOST_AUTO_TEST_CASE(a_binary_file_given_as_csv_is_quoted_briefly) {
  const auto out = scratch_path("bad_input_test", "binary_out");
  std::string bytes;  // 5000 bytes of every value but CSV's line breaks, comma and quote
  for (int i = 0; bytes.size() < 5000; ++i) {
    const char byte = char(i * 7919 % 256);
    if (byte != '\n' && byte != '\r' && byte != ',' && byte != '"') bytes += byte;
  }
  const auto header = make_csv_file("binary", bytes + "\n1\n");
  expect_data_error("--data csv:" + header.string(), out,
                    {header.string(), "has no column 'label'; its columns are: ", "..."});
  const auto cell = make_csv_file("binary_cell", "x,label\n" + bytes + ",0\n");
  expect_data_error("--data csv:" + cell.string(), out,
                    {cell.string(), "row 2 column 'x': '", "...' is not a number"});
}

// Features are float32: nan, inf and magnitudes beyond 3.4e38 are refused as bad labels are,
// instead of stopping the run later on a non-finite loss.
BOOST_AUTO_TEST_CASE(non_finite_csv_features_are_refused_naming_the_row_and_column) {
  const auto out = scratch_path("bad_input_test", "finite_out");
  for (const auto* cell : {"nan", "-inf", "1e39"}) {
    const auto csv =
        make_csv_file("finite", std::string("x,y,label\n1,2,0\n3,") + cell + ",1\n5,6,0\n7,8,1\n");
    expect_data_error("--data csv:" + csv.string(), out,
                      {csv.string(), std::string("row 3 column 'y': '") + cell + "'",
                       "not a finite float32 number"});
  }
}

// Cells read as Python's float() reads them, hexadecimal aside: float32's largest as numpy
// writes it and magnitudes below double's smallest (read as 0 or a subnormal) are features;
// magnitudes beyond float32's or double's are named as such, not as "not a number".
BOOST_AUTO_TEST_CASE(csv_cells_at_the_ends_of_the_float_range_are_read_as_python_reads_them) {
  const auto out = scratch_path("bad_input_test", "range_out");
  const auto csv =
      make_csv_file("range", "x,y,label\n3.4028235e38,1e-310,0\n-3.4028235e38,1e-400,1\n1,2,0\n");
  const auto read = run_briefly("--data csv:" + csv.string() +
                                " --epochs 1 --no-progress --overwrite --out " + out.string());
  BOOST_TEST(read.status == 0, read.output);
  const auto refused = scratch_path("bad_input_test", "wide_out");
  for (const auto* cell : {"1e999", "-3.40282357e38"}) {
    const auto wide =
        make_csv_file("wide_cell", std::string("x,label\n1,0\n") + cell + ",1\n5,0\n");
    expect_data_error("--data csv:" + wide.string(), refused,
                      {std::string("row 3 column 'x': '") + cell + "'",
                       "not a finite float32 number (magnitude at most 3.4028235e38)"});
  }
  const auto label = make_csv_file("wide_label", "x,label\n1,0\n2,1e400\n5,0\n");
  expect_data_error("--data csv:" + label.string(), refused,
                    {"row 3 column 'label': label '1e400' is not a class index"});
  const auto hex = make_csv_file("hex", "x,label\n1,0\n-0x10,1\n5,0\n");
  expect_data_error("--data csv:" + hex.string(), refused,
                    {"row 3 column 'x': '-0x10' is not a number"});
}

// Every column is named once: an unnamed one (pandas' index) is refused with the way out, and a
// header of 200,000 columns is checked at once (each name against the ones before it took a
// minute), its repeated name found.
BOOST_AUTO_TEST_CASE(csv_column_names_are_checked_in_one_pass) {
  const auto out = scratch_path("bad_input_test", "names_out");
  const auto unnamed = make_csv_file("unnamed", ",x,label\n0,1,0\n1,2,1\n");
  expect_data_error("--data csv:" + unnamed.string(), out,
                    {unnamed.string() + "' column 1 has no name", "index=False"});
  std::string header;
  for (int i = 0; i < 200'000; ++i) header += "c" + std::to_string(i) + ",";
  const auto repeated = make_csv_file("repeated", header + "label,c7\n");
  expect_data_error("--data csv:" + repeated.string(), out,
                    {"names column 8 and column 200002 'c7'"});
  // A blank line before the header is skipped, as blank lines between rows are.
  const auto blank = make_csv_file("blank_first", "\n \nx,label\n1,0\n2,1\n");
  const auto read = run_briefly("--data csv:" + blank.string() +
                                " --epochs 1 --no-progress --overwrite --out " + out.string());
  BOOST_TEST(read.status == 0, read.output);
}

// `csv:FILE:` (a label spec left empty) is a usage error, not a run on an unnamed column.
BOOST_AUTO_TEST_CASE(an_empty_csv_label_spec_is_a_usage_error) {
  const auto out = scratch_path("bad_input_test", "label_spec_out");
  const auto csv = make_csv_file("label_spec", "x,label\n1,0\n2,1\n");
  const auto result = run_briefly("--data csv:" + csv.string() + ": --out " + out.string());
  BOOST_TEST(result.status == 2, result.output);
  BOOST_TEST(has(result.output, "names no label column after its last ':'"), result.output);
  BOOST_TEST(!fs::exists(out));
}

// A path the file system cannot resolve, and a file whose reading fails, are data errors naming
// the reason (not a filesystem_error, not "empty").
BOOST_AUTO_TEST_CASE(unreadable_data_paths_are_refused_with_the_reason) {
  const auto out = scratch_path("bad_input_test", "unreadable_out");
  const auto loop = scratch("bad_input_test", "link_loop") / "loop";
  fs::remove(loop);
  fs::create_symlink(loop.filename(), loop);
  expect_data_error(
      "--data mnist:" + loop.string(), out,
      {"MNIST: cannot open '" + loop.string() + "': Too many levels of symbolic links",
       "expected a directory holding train-images-idx3-ubyte"});
  // /proc/self/mem is a regular file whose first page cannot be read (EIO).
  expect_data_error("--data csv:/proc/self/mem", out,
                    {"reading '/proc/self/mem' failed after line 0: Input/output error"});
}

// Labels are class indices: ones that leave classes without a sample, or a single class, train,
// and the log warns.
BOOST_AUTO_TEST_CASE(sparse_or_single_csv_labels_are_warned_about) {
  const auto out = scratch_path("bad_input_test", "labels_out");
  const auto train = [&](const fs::path& csv) {
    const auto result = run_briefly("--data csv:" + csv.string() +
                                    " --epochs 1 --no-progress --overwrite --out " + out.string());
    BOOST_TEST(result.status == 0, result.output);
    return result.output;
  };
  const auto sparse = make_csv_file("sparse", "x,label\n1,999\n2,0\n3,999\n4,0\n");
  const auto sparse_log = train(sparse);
  BOOST_TEST(has(sparse_log, "[warning] data: CSV " + sparse.string() +
                                 ": the labels run up to 999, so the model has 1000 outputs, "
                                 "but only 2 of these classes occur"),
             sparse_log);
  const auto single_log = train(make_csv_file("single", "x,label\n1,0\n2,0\n3,0\n"));
  BOOST_TEST(has(single_log, "every label is 0: the model learns a single class"), single_log);
  const auto dense_log = train(make_csv_file("dense", "x,label\n1,1\n2,0\n3,1\n"));
  BOOST_TEST(!has(dense_log, "[warning] data:"), dense_log);
}

// --test and --predict: flags that cannot go with them are usage errors; data that does not fit
// the model, or a test file without labels, is a data error naming both; nothing is written.
BOOST_AUTO_TEST_CASE(test_and_predict_refuse_what_cannot_work_before_writing) {
  const auto out = scratch_path("bad_input_test", "stages_out");
  struct Case {
    std::string arguments, message;
  };
  const std::vector<Case> usage = {
      {"--predict synthetic", "--predict uses given weights: it needs --weights FILE"},
      {"--predict synthetic --weights w.pt --resume", "--predict trains nothing: drop --resume"},
      {"--predict synthetic --weights w.pt --test synthetic",
       "--predict trains nothing: drop --test"},
      {"--test synthetic --validate --init-from w.pt", "--test tests the weights a run trained"},
      {"--predict ''", "--predict: expected a data source, got ''"},
      {"--test cifar", "--test cifar: --data 'cifar' is not a data source"},
  };
  for (const auto& c : usage) {
    const auto result = run_briefly(c.arguments + " --no-progress --out " + out.string());
    BOOST_TEST(result.status == 2, c.arguments << ": " << result.output);
    BOOST_TEST(has(result.output, c.message), c.arguments << ": " << result.output);
    BOOST_TEST(!fs::exists(out), c.arguments << ": " << out << " was created");
  }
  const auto train = make_csv_file("stages_train", "a,b,label\n1,2,0\n2,1,1\n3,3,0\n4,1,1\n");
  const auto three = make_csv_file("stages_three", "a,b,c,label\n1,2,3,0\n");
  const auto unlabelled = make_csv_file("stages_unlabelled", "a,b\n1,2\n");
  const auto labels = make_csv_file("stages_labels", "a,b,label\n1,2,7\n");
  const auto csv = "--data csv:" + train.string() + " --epochs 1 ";
  expect_data_error(csv + "--test csv:" + three.string(), out,
                    {"--test csv:" + three.string(), "its samples have shape [3]",
                     "the model, made for --data's, takes [2]"});
  const auto swapped = make_csv_file("stages_swapped", "b,a,label\n1,2,0\n");
  expect_data_error(
      csv + "--test csv:" + swapped.string(), out,
      {"its feature columns are b, a; the model was trained on a, b (in this order)"});
  expect_data_error(csv + "--test csv:" + unlabelled.string(), out,
                    {"has no column 'label'; its columns are: a, b"});
  expect_data_error(csv + "--test csv:" + labels.string(), out,
                    {"label 7 is not one of the model's 2 classes (0 to 1)"});
}

BOOST_AUTO_TEST_SUITE_END()
