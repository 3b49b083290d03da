// Callback state goes into checkpoints by the callback's name and comes back on resume.

#include "resume_setup.hpp"
#include "step_counter.hpp"

#include <boost/test/unit_test.hpp>

#include <filesystem>

using namespace torchbus;
using namespace torchbus::testing;
namespace fs = std::filesystem;

namespace {

class Refuses : public Callback {
 public:
  Refuses() : Callback("refuses") {}
  void load_state(torch::serialize::InputArchive&) override {
    throw std::runtime_error("bad state");
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(callback_state)

BOOST_AUTO_TEST_CASE(round_trip_through_a_resume) {
  const auto folder = fs::temp_directory_path() / "torchbus_callback_state";
  fs::remove_all(folder);
  fs::create_directories(folder);
  ResumeRun first;
  auto counter = std::make_shared<StepCounter>();
  first.trainer.add(counter);
  first.trainer.on(
      Event::StepEnd,
      [&](State& s) {
        if (s.step == 5) {
          first.trainer.save_checkpoint(folder / "c.tbckpt");
          throw std::runtime_error("stop here");
        }
      },
      10);
  BOOST_CHECK_THROW(first.fit(), std::runtime_error);
  BOOST_TEST(counter->count == 5);

  ResumeRun second;
  auto restored = std::make_shared<StepCounter>();
  second.trainer.add(restored);
  second.trainer.resume_from(folder / "c.tbckpt");
  second.fit();
  BOOST_TEST(restored->count == 12);  // 5 before the checkpoint + 7 after
}

BOOST_AUTO_TEST_CASE(a_callback_that_cannot_load_its_state_leaves_the_model_untouched) {
  const auto folder = fs::temp_directory_path() / "torchbus_callback_refuses";
  fs::remove_all(folder);
  fs::create_directories(folder);
  ResumeRun writer;
  writer.trainer.add(std::make_shared<Refuses>());
  writer.trainer.save_checkpoint(folder / "r.tbckpt");

  ResumeRun reader(31);
  reader.trainer.add(std::make_shared<Refuses>());
  const auto before = snapshot_parameters(*reader.model);
  BOOST_CHECK_EXCEPTION(
      reader.trainer.load_checkpoint(folder / "r.tbckpt"), CheckpointError,
      [](const CheckpointError& e) {
        return std::string(e.what()).find("callback 'refuses' it cannot load: bad state") !=
               std::string::npos;
      });
  const auto after = snapshot_parameters(*reader.model);
  for (std::size_t i = 0; i < before.size(); ++i) BOOST_TEST(torch::equal(before[i], after[i]));
}

BOOST_AUTO_TEST_SUITE_END()
