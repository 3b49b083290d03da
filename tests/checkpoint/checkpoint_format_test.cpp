// The checkpoint file format: its CRC-32C against the standard's check values and an independent
// computation, and a file written by an earlier torchbus (tests/data/old-format-run) that still
// reads and loads.

#include "resume_setup.hpp"

#include <torch/torch.h>
#include <boost/test/unit_test.hpp>
#include <support/crc32c.hpp>
#include <support/scratch.hpp>
#include <torchbus/torchbus.hpp>

#include <filesystem>
#include <string>

using namespace torchbus;
using namespace torchbus::testing;
namespace fs = std::filesystem;

namespace {

/// The run torchbus-train made before CRC-32C moved to Boost.CRC (see tests/data/README.md).
const fs::path kOldRun = fs::path(TORCHBUS_TEST_DATA) / "old-format-run";

std::uint32_t little_endian_u32(const std::string& bytes, std::size_t at) {
  std::uint32_t value = 0;
  for (int i = 0; i < 4; ++i) {
    value |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  }
  return value;
}

/// The CRC field of a version 2 file: after magic, version, step, identity and payload size.
std::size_t crc_offset(const std::string& identity) {
  return 8 + 4 + 8 + 4 + identity.size() + 8;
}

/// `bytes` without the 4 bytes of its CRC field at `offset`.
std::string without_crc(const std::string& bytes, std::size_t offset) {
  return bytes.substr(0, offset) + bytes.substr(offset + 4);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_format)

// The reference CRC of these tests is the standard CRC-32C: its check value and RFC 3720's
// vectors (B.4).
BOOST_AUTO_TEST_CASE(the_reference_crc32c_gives_the_standard_check_values) {
  BOOST_TEST(crc32c("123456789", 9) == 0xE3069283u);
  unsigned char zeros[32] = {}, ones[32], ascending[32], descending[32];
  for (int i = 0; i < 32; ++i) {
    ones[i] = 0xFF;
    ascending[i] = static_cast<unsigned char>(i);
    descending[i] = static_cast<unsigned char>(31 - i);
  }
  BOOST_TEST(crc32c(zeros, 32) == 0x8A9136AAu);
  BOOST_TEST(crc32c(ones, 32) == 0x62A8AB43u);
  BOOST_TEST(crc32c(ascending, 32) == 0x46DD794Eu);
  BOOST_TEST(crc32c(descending, 32) == 0x113FDB5Cu);
}

// The framework's CRC covers the header in one call and continues over the payload in a second:
// together they equal one CRC-32C over both, computed here independently.
BOOST_AUTO_TEST_CASE(the_header_crc_is_the_crc32c_of_header_and_payload) {
  const auto folder = scratch("checkpoint_format", "crc");
  for (const std::string identity : {"", "data=synthetic\nseed=7\n"}) {
    ResumeRun run(5, identity);
    const auto file = folder / ("identity-" + std::to_string(identity.size()) + ".tbckpt");
    run.trainer.save_checkpoint(file);
    const auto bytes = read_text(file);
    const auto offset = crc_offset(identity);
    BOOST_TEST_REQUIRE(bytes.size() > offset + 4);
    BOOST_TEST(little_endian_u32(bytes, offset) ==
               crc32c(without_crc(bytes, offset).data(), bytes.size() - 4));
  }
}

// A checkpoint written before this torchbus (the hand-written CRC-32C) reads with its header
// intact and its CRC verified, and its CRC is the standard one.
BOOST_AUTO_TEST_CASE(a_checkpoint_of_an_earlier_torchbus_reads_and_its_crc_is_standard) {
  const auto file = kOldRun / "checkpoints" / "epoch-000-step-000006.tbckpt";
  const auto bytes = read_text(file);
  BOOST_TEST_REQUIRE(bytes.size() == 32478u, "missing fixture " << file);
  CheckpointHeader header;
  const auto payload = read_checkpoint_payload(file, &header);
  BOOST_TEST(header.format_version == 2u);
  BOOST_TEST(header.step == 6);
  BOOST_TEST(header.identity == read_text(kOldRun / "identity.txt"));
  const auto offset = crc_offset(header.identity);
  BOOST_TEST(payload == bytes.substr(offset + 4));
  BOOST_TEST(little_endian_u32(bytes, offset) ==
             crc32c(without_crc(bytes, offset).data(), bytes.size() - 4));
}

// The same file loads into the model torchbus-train trained (--hidden 4 on 32 features, 10
// classes, Adam): the counters and metrics of step 6, and the weights it trained.
BOOST_AUTO_TEST_CASE(a_checkpoint_of_an_earlier_torchbus_loads_into_its_model) {
  torch::manual_seed(0);
  torch::nn::Sequential model{torch::nn::Flatten(), torch::nn::Linear(32, 4), torch::nn::ReLU(),
                              torch::nn::Linear(4, 10)};
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(1e-3));
  Trainer trainer(
      model, adam,
      [](const at::Tensor& output, const at::Tensor& target) {
        return torch::nn::functional::cross_entropy(output, target);
      },
      TrainerOptions().run_identity(read_text(kOldRun / "identity.txt")));
  const auto initial = model->parameters()[0].clone();
  trainer.load_checkpoint(kOldRun / "checkpoints" / "epoch-000-step-000006.tbckpt");
  BOOST_TEST(trainer.state().step == 6);
  // Validated at steps 3 and 6 (--val-every-steps 3) and at the end of the epoch the run ended
  // at step 6; summary.json holds the last loss.
  const auto& val_loss = trainer.state().metrics.series("val_loss");
  BOOST_TEST_REQUIRE(val_loss.size() == 3u);
  BOOST_TEST(val_loss.front().step == 3);
  BOOST_TEST(val_loss.back().step == 6);
  BOOST_TEST(val_loss.back().value == 2.3434765338897705);
  BOOST_TEST(!torch::equal(model->parameters()[0], initial));
  BOOST_TEST(model->parameters()[0].sizes() == at::IntArrayRef({4, 32}));
  // Adam's state of every parameter, as the run left it: LibTorch 1.13 wrote the file, and 2.x
  // reads 1.13's names of the states as 0 unless they are translated (each parameter would get
  // the last one's state, or none).
  for (const auto& parameter : model->parameters()) {
    const auto* state = optimizer_state_of(adam, parameter);
    BOOST_TEST_REQUIRE(state != nullptr);
    const auto& moments = static_cast<const torch::optim::AdamParamState&>(*state);
    BOOST_TEST(moments.step() == 6);
    BOOST_TEST(moments.exp_avg().sizes() == parameter.sizes());
    BOOST_TEST(moments.exp_avg_sq().sizes() == parameter.sizes());
  }
}

BOOST_AUTO_TEST_SUITE_END()
