// A checkpoint is the composition of the trainer's parts' states: saved from one trainer, loaded
// into another and saved again, every part's entries come back equal (the fit loop's position,
// generators and run end, the model's tensors, the optimizer's state, the metric history, the
// callbacks' states and the filters' counts).

#include "resume_setup.hpp"
#include "step_counter.hpp"

#include <boost/test/unit_test.hpp>
#include <support/scratch.hpp>

#include <sstream>

using namespace torchbus;
using namespace torchbus::testing;
namespace fs = std::filesystem;

namespace {

torch::serialize::InputArchive payload_of(const fs::path& path, CheckpointHeader& header) {
  std::istringstream in(read_checkpoint_payload(path, &header));
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  return archive;
}

/// Checks that every entry of `expected` but `skipped` is in `actual` with an equal value, sections
/// included.
void check_same_entries(torch::serialize::InputArchive& expected,
                        torch::serialize::InputArchive& actual, const std::string& where,
                        const std::string& skipped = {}) {
  for (const auto& key : expected.keys()) {
    if (key == skipped) continue;
    BOOST_TEST_CONTEXT("entry " << where << key) {
      torch::serialize::InputArchive expected_section, actual_section;
      if (expected.try_read(key, expected_section)) {
        BOOST_REQUIRE(actual.try_read(key, actual_section));
        check_same_entries(expected_section, actual_section, where + key + "/");
        continue;
      }
      c10::IValue expected_value, actual_value;
      BOOST_REQUIRE(expected.try_read(key, expected_value));
      BOOST_REQUIRE(actual.try_read(key, actual_value));
      if (expected_value.isTensor()) {
        BOOST_TEST(torch::equal(expected_value.toTensor(), actual_value.toTensor()));
      } else if (expected_value.isTensorList()) {
        const auto a = expected_value.toTensorVector();
        const auto b = actual_value.toTensorVector();
        BOOST_REQUIRE(a.size() == b.size());
        for (std::size_t i = 0; i < a.size(); ++i) BOOST_TEST(torch::equal(a[i], b[i]));
      } else {
        BOOST_TEST(expected_value == actual_value);
      }
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(round_trip)

BOOST_AUTO_TEST_CASE(every_part_comes_back_equal_after_a_save_and_a_load) {
  const auto folder = scratch("round_trip", "parts");
  const auto first_file = folder / "first.tbckpt";
  const auto second_file = folder / "second.tbckpt";
  // Mid-epoch (after batch 4 of epoch 2), with metrics, a callback's state and a filter's count.
  ResumeRun first;
  first.trainer.add(std::make_shared<StepCounter>());
  int filtered = 0;
  first.trainer.on(Event::BatchEnd, every(3), [&](State&) { ++filtered; });
  first.trainer.on(Event::StepEnd, [&](State& s) {
    if (s.epoch == 1 && s.batch_in_epoch == 4) {
      first.trainer.save_checkpoint(first_file);
      s.request_stop("saved", StopKind::Interrupted);
    }
  });
  first.fit();
  BOOST_REQUIRE(fs::exists(first_file));
  BOOST_REQUIRE(filtered > 0);

  ResumeRun second(/*init_seed=*/77);  // other weights, other optimizer state
  second.trainer.add(std::make_shared<StepCounter>());
  second.trainer.on(Event::BatchEnd, every(3), [](State&) {});
  torch::manual_seed(999);  // other generators
  second.trainer.load_checkpoint(first_file);
  // The whole optimizer state, compared tensor by tensor (its archive names parameters by
  // address, which differs between the two trainers).
  const auto adam_first = adam_state(first.optimizer);
  const auto adam_second = adam_state(second.optimizer);
  BOOST_REQUIRE(adam_first.size() == adam_second.size());
  for (std::size_t i = 0; i < adam_first.size(); ++i) {
    BOOST_TEST(torch::equal(adam_first[i], adam_second[i]));
  }
  second.trainer.save_checkpoint(second_file);

  CheckpointHeader first_header, second_header;
  auto first_payload = payload_of(first_file, first_header);
  auto second_payload = payload_of(second_file, second_header);
  BOOST_TEST(first_header.step == second_header.step);
  BOOST_TEST(first_header.identity == second_header.identity);
  const auto keys = first_payload.keys();
  for (const auto* part : {"position", "rng", "epoch_start_rng", "parameters", "buffers",
                           "metric_names", "callback_names", "filter_counts"}) {
    BOOST_TEST_CONTEXT("entry " << part) {
      BOOST_TEST(std::count(keys.begin(), keys.end(), part) == 1);
    }
  }
  BOOST_TEST(second_payload.keys() == keys);
  // The optimizer's archive names parameters by address, which differs between the two trainers:
  // its state was compared above.
  check_same_entries(first_payload, second_payload, "", "optimizer");
}

BOOST_AUTO_TEST_SUITE_END()
