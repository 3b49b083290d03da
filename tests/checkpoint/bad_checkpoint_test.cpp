// A bad checkpoint is a clear CheckpointError naming the file, and never a partly loaded model.

#include "resume_setup.hpp"

#include <boost/test/unit_test.hpp>
#include <support/crc32c.hpp>
#include <support/scratch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>

using namespace torchbus;
using namespace torchbus::testing;
namespace fs = std::filesystem;

namespace {

/// A valid checkpoint of a short run.
fs::path good_checkpoint(const fs::path& folder) {
  ResumeRun run;
  run.trainer.on(Event::StepEnd, [&](State& s) {
    if (s.step == 2) run.trainer.save_checkpoint(folder / "good.tbckpt");
  });
  run.fit();
  return folder / "good.tbckpt";
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

/// Loading `file` throws a CheckpointError containing `part`, and leaves the model as it was.
void expect_rejected(const fs::path& file, const std::string& part) {
  ResumeRun target(77);
  const auto before = snapshot_parameters(*target.model);
  try {
    target.trainer.load_checkpoint(file);
    BOOST_FAIL("no error loading " << file);
  } catch (const CheckpointError& error) {
    const std::string message = error.what();
    BOOST_TEST(message.find(part) != std::string::npos, message);
    BOOST_TEST(message.find(file.string()) != std::string::npos, message);
  }
  const auto after = snapshot_parameters(*target.model);
  for (std::size_t i = 0; i < before.size(); ++i) BOOST_TEST(torch::equal(before[i], after[i]));
  BOOST_TEST(target.trainer.state().step == 0);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(bad_checkpoint)

BOOST_AUTO_TEST_CASE(truncated_at_several_offsets) {
  const auto folder = scratch("bad_checkpoint", "truncated");
  const auto bytes = read_text(good_checkpoint(folder));
  for (const std::size_t length : {std::size_t{0}, std::size_t{7}, std::size_t{31}, std::size_t{40},
                                   bytes.size() / 2, bytes.size() - 1}) {
    const auto file = folder / ("cut-" + std::to_string(length) + ".tbckpt");
    write_bytes(file, bytes.substr(0, length));
    expect_rejected(file, length < 32 ? "is not a torchbus checkpoint" : "is truncated");
  }
}

BOOST_AUTO_TEST_CASE(flipped_bytes) {
  const auto folder = scratch("bad_checkpoint", "flipped");
  auto bytes = read_text(good_checkpoint(folder));
  for (const std::size_t offset : {bytes.size() / 3, bytes.size() / 2, bytes.size() - 5}) {
    auto corrupt = bytes;
    corrupt[offset] = static_cast<char>(corrupt[offset] ^ 0x10);
    const auto file = folder / ("flip-" + std::to_string(offset) + ".tbckpt");
    write_bytes(file, corrupt);
    expect_rejected(file, "is corrupt");
  }
  for (const std::size_t header_field :
       {std::size_t{12}, std::size_t{20}}) {  // step, identity size
    auto corrupt = bytes;
    corrupt[header_field] = static_cast<char>(corrupt[header_field] ^ 0x01);
    const auto file = folder / ("header-" + std::to_string(header_field) + ".tbckpt");
    write_bytes(file, corrupt);
    BOOST_CHECK_THROW(read_checkpoint_payload(file), CheckpointError);
    expect_rejected(file, header_field == 12 ? "is corrupt" : "checkpoint");
  }
  bytes[9] = 7;  // the format version field
  write_bytes(folder / "version.tbckpt", bytes);
  expect_rejected(folder / "version.tbckpt", "format version");
}

BOOST_AUTO_TEST_CASE(checkpoint_of_another_model) {
  const auto folder = scratch("bad_checkpoint", "other_model");
  torch::manual_seed(1);
  auto wide = torch::nn::Sequential(torch::nn::Linear(5, 32), torch::nn::ReLU(),
                                    torch::nn::Dropout(0.2), torch::nn::Linear(32, 3));
  torch::optim::Adam adam(wide->parameters());
  Trainer trainer(wide, adam, ResumeRun::loss, TrainerOptions().accumulate_grad_batches(2));
  trainer.save_checkpoint(folder / "wide.tbckpt");
  expect_rejected(folder / "wide.tbckpt",
                  "holds parameter '0.weight' as [32, 5] float; the model's is [16, 5] float");
}

BOOST_AUTO_TEST_CASE(checkpoint_of_another_optimizer_or_accumulation) {
  const auto folder = scratch("bad_checkpoint", "other_optimizer");
  auto model = ResumeRun::make_model(5);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  Trainer trainer(model, sgd, ResumeRun::loss, TrainerOptions().accumulate_grad_batches(2));
  trainer.save_checkpoint(folder / "sgd.tbckpt");
  expect_rejected(
      folder / "sgd.tbckpt",
      "was written with optimizer torch::optim::SGD; this trainer uses torch::optim::Adam");

  auto model2 = ResumeRun::make_model(5);
  torch::optim::Adam adam(model2->parameters());
  Trainer trainer2(model2, adam, ResumeRun::loss, TrainerOptions().accumulate_grad_batches(3));
  trainer2.save_checkpoint(folder / "k3.tbckpt");
  expect_rejected(folder / "k3.tbckpt", "accumulate_grad_batches 3; this trainer uses 2");
}

BOOST_AUTO_TEST_CASE(missing_file_and_folder_without_a_valid_checkpoint) {
  ResumeRun run;
  BOOST_CHECK_EXCEPTION(run.trainer.resume_from("/no/such/checkpoint.tbckpt"), CheckpointError,
                        [](const CheckpointError& e) {
                          return std::string(e.what()).find("no such file") != std::string::npos;
                        });
  expect_rejected("/no/such/checkpoint.tbckpt", "no such file");
  const auto folder = scratch("bad_checkpoint", "no_valid");
  write_bytes(folder / "broken.tbckpt", "not a checkpoint");
  run.trainer.resume_from(folder);
  BOOST_CHECK_EXCEPTION(run.fit(), CheckpointError, [](const CheckpointError& e) {
    return std::string(e.what()).find("holds no valid checkpoint") != std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE(checkpoint_of_another_run_identity) {
  const auto folder = scratch("bad_checkpoint", "other_identity");
  ResumeRun seven(5, "data=synthetic\nseed=7\n");
  seven.trainer.save_checkpoint(folder / "seven.tbckpt");
  CheckpointHeader header;
  read_checkpoint_payload(folder / "seven.tbckpt", &header);
  BOOST_TEST(header.identity == "data=synthetic\nseed=7\n");
  ResumeRun eight(77, "data=synthetic\nseed=8\n");
  const auto before = snapshot_parameters(*eight.model);
  BOOST_CHECK_EXCEPTION(eight.trainer.load_checkpoint(folder / "seven.tbckpt"), CheckpointError,
                        [](const CheckpointError& e) {
                          return std::string(e.what()).find(
                                     "belongs to another run (seed: 7 -> 8)") != std::string::npos;
                        });
  const auto after = snapshot_parameters(*eight.model);
  for (std::size_t i = 0; i < before.size(); ++i) BOOST_TEST(torch::equal(before[i], after[i]));
  // A trainer without an identity checks none.
  ResumeRun anonymous(77);
  BOOST_CHECK_NO_THROW(anonymous.trainer.load_checkpoint(folder / "seven.tbckpt"));
}

// Version 1 files (CRC over the payload only, no identity) still load.
BOOST_AUTO_TEST_CASE(a_version_1_checkpoint_still_loads) {
  const auto folder = scratch("bad_checkpoint", "version_1");
  const auto payload = read_checkpoint_payload(good_checkpoint(folder));
  std::string v1("TBCKPT\r\n", 8);
  auto put = [&](std::uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) v1.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
  };
  put(1, 4);
  put(2, 8);
  put(payload.size(), 8);
  put(crc32c(payload.data(), payload.size()), 4);
  write_bytes(folder / "v1.tbckpt", v1 + payload);
  CheckpointHeader header;
  BOOST_TEST(read_checkpoint_payload(folder / "v1.tbckpt", &header) == payload);
  BOOST_TEST(header.format_version == 1u);
  BOOST_TEST(header.step == 2);
  ResumeRun target(77);
  target.trainer.load_checkpoint(folder / "v1.tbckpt");
  BOOST_TEST(target.trainer.state().step == 2);
}

BOOST_AUTO_TEST_CASE(checkpoint_inside_a_window_is_refused) {
  ResumeRun run;
  run.trainer.on(Event::AfterBackward, [&](State&) {
    run.trainer.save_checkpoint(scratch("bad_checkpoint", "window") / "x.tbckpt");
  });
  BOOST_CHECK_EXCEPTION(run.fit(), ConfigError, [](const ConfigError& e) {
    return std::string(e.what()).find("only be taken at a step boundary") != std::string::npos;
  });
}

BOOST_AUTO_TEST_SUITE_END()
