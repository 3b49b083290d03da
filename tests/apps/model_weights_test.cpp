// torchbus-train's weights files: OUT/model.pt (the final weights), --init-from FILE and
// --validate. Against Python PyTorch: tests/interop/train_python.py.

#include "run_train.hpp"
#include "summary_json.hpp"

#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/scratch.hpp>
#include <torchbus/state_dict.hpp>

#include <filesystem>
#include <fstream>
#include <string>

namespace fs = std::filesystem;
using torchbus::testing::has;
using torchbus::testing::json_number;
using torchbus::testing::json_string;
using torchbus::testing::read_text;
using torchbus::testing::run_train;
using torchbus::testing::scratch;

namespace {

/// A short synthetic run's flags (without --out).
const std::string kShortRun =
    "--epochs 1 --limit-train-batches 5 --limit-val-batches 4 --no-progress "
    "--no-tensorboard --no-report --no-csv ";

}  // namespace

BOOST_AUTO_TEST_SUITE(model_weights)

// model.pt holds what params_sha256 is of (the EMA average); --init-from model.pt --validate
// evaluates exactly those weights (the same validation loss and accuracy as the run's last
// validation) and trains nothing;
// --validate --resume evaluates the run's checkpoint into validation.json, leaving summary.json.
BOOST_AUTO_TEST_CASE(model_pt_is_the_final_weights_and_validate_evaluates_them) {
  const auto run = scratch("model_weights", "run");
  // With EMA on, the run ends with (and validates, and hashes) the average: model.pt holds it.
  BOOST_TEST_REQUIRE(run_train(kShortRun + "--ema 0.9 --out " + run.string()).status == 0);
  const auto trained = read_text(run / "summary.json");
  BOOST_TEST(torchbus::read_state_dict(run / "model.pt").size() == 6u);  // 3 Linear layers

  const auto validated = scratch("model_weights", "validated");
  const auto result = run_train(kShortRun + "--init-from " + (run / "model.pt").string() +
                                " --validate --out " + validated.string());
  BOOST_TEST_REQUIRE(result.status == 0, result.output);
  const auto summary = read_text(validated / "summary.json");
  BOOST_TEST(json_string(summary, "params_sha256") == json_string(trained, "params_sha256"));
  BOOST_TEST(json_number(summary, "final_val_loss") == json_number(trained, "final_val_loss"));
  BOOST_TEST(json_number(summary, "final_val_accuracy") ==
             json_number(trained, "final_val_accuracy"));
  BOOST_TEST(json_number(summary, "steps") == 0);
  BOOST_TEST(json_string(summary, "stop_reason") == "validated");
  BOOST_TEST(!fs::exists(validated / "model.pt"));
  BOOST_TEST(!fs::exists(validated / "checkpoints"));

  const auto resumed = run_train(kShortRun + "--ema 0.9 --resume --validate --out " + run.string());
  BOOST_TEST_REQUIRE(resumed.status == 0, resumed.output);
  const auto validation = read_text(run / "validation.json");
  BOOST_TEST(json_number(validation, "final_val_loss") == json_number(trained, "final_val_loss"));
  BOOST_TEST(json_number(validation, "steps") == json_number(trained, "steps"));
  BOOST_TEST(read_text(run / "summary.json") == trained);
}

// --init-from is strict (exit 2 naming the file and the keys, or the damaged record), in the
// identity (a --resume with another file is refused), and --validate needs weights to evaluate.
BOOST_AUTO_TEST_CASE(init_from_is_strict_and_part_of_the_identity) {
  const auto source = scratch("model_weights", "source");
  BOOST_TEST_REQUIRE(run_train(kShortRun + "--hidden 16 --out " + source.string()).status == 0);
  const auto weights = (source / "model.pt").string();

  const auto wrong = scratch("model_weights", "wrong");
  auto result =
      run_train(kShortRun + "--hidden 8 --init-from " + weights + " --out " + wrong.string());
  BOOST_TEST(result.status == 2, result.output);
  BOOST_TEST(has(result.output, weights), result.output);
  BOOST_TEST(has(result.output, "size mismatch for 1.weight: [16, 32] in the file, [8, 32]"),
             result.output);

  // A bit flipped in the bytes of a weight: refused by its zip CRC-32, which LibTorch's reader
  // does not check (it would train from the damaged weight).
  const auto damaged = (scratch("model_weights", "damaged") / "model.pt").string();
  {
    auto bytes = read_text(weights);
    const auto tensors = torchbus::read_state_dict(weights);
    const auto& weight = tensors.front().second;
    const std::string data(static_cast<const char*>(weight.data_ptr()),
                           static_cast<std::size_t>(weight.nbytes()));
    const auto at = bytes.find(data);
    BOOST_TEST_REQUIRE(at != std::string::npos);
    bytes[at + data.size() / 2] ^= 0x10;
    std::ofstream(damaged, std::ios::binary) << bytes;
  }
  result = run_train(kShortRun + "--hidden 16 --init-from " + damaged + " --out " +
                     scratch("model_weights", "from_damaged").string());
  BOOST_TEST(result.status == 2, result.output);
  BOOST_TEST(has(result.output, damaged + ": record '"), result.output);
  BOOST_TEST(has(result.output, "' is damaged: its "), result.output);

  const auto started = scratch("model_weights", "started");
  result =
      run_train(kShortRun + "--hidden 16 --init-from " + weights + " --out " + started.string());
  BOOST_TEST_REQUIRE(result.status == 0, result.output);
  const auto identity = read_text(started / "identity.txt");
  const auto sha256_at = identity.find("init_from_sha256=");
  BOOST_TEST_REQUIRE(sha256_at != std::string::npos, identity);
  const auto sha256 = identity.substr(sha256_at + 17, 64);
  // The log says where the weights came from.
  BOOST_TEST(has(read_text(started / "train.log"),
                 "weights: from " + weights + " (SHA-256 " + sha256 + ")"),
             result.output);
  result =
      run_train(kShortRun + "--hidden 16 --resume --out " + started.string());  // without the file
  BOOST_TEST(result.status == 1, result.output);
  BOOST_TEST(has(result.output, "init_from_sha256"), result.output);

  result = run_train(kShortRun + "--validate --out " + scratch("model_weights", "none").string());
  BOOST_TEST(result.status == 2, result.output);
  BOOST_TEST(has(result.output,
                 "--validate evaluates given weights: it needs --init-from FILE "
                 "or --resume"),
             result.output);
  result = run_train(kShortRun + "--validate --resume --out " +
                     scratch("model_weights", "empty").string());
  BOOST_TEST(result.status == 2, result.output);
  BOOST_TEST(has(result.output, "holds no checkpoint of this run to validate"), result.output);
}

BOOST_AUTO_TEST_SUITE_END()
