// Exact resume in one process: an interrupted run continued from its checkpoint ends with the
// uninterrupted run's weights, optimizer state and batches.

#include "resume_setup.hpp"

#include <boost/test/unit_test.hpp>
#include <support/bf16_support.hpp>
#include <support/scratch.hpp>

#include <filesystem>
#include <fstream>
#include <functional>

using namespace torchbus;
using namespace torchbus::testing;
namespace fs = std::filesystem;

namespace {

struct Killed : std::runtime_error {
  Killed() : std::runtime_error("killed after saving") {}
};

/// Runs until `event` at `count` (state.step for StepEnd, else state.epoch: its first such event),
/// saves, dies.
/// What a test adds to each of its runs.
using Setup = std::function<void(ResumeRun&)>;

std::vector<std::string> interrupted_run(Event event, std::int64_t count, const fs::path& file,
                                         Precision precision = Precision::Float32,
                                         const Setup& setup = {}) {
  ResumeRun run(5, "", precision);
  if (setup) setup(run);
  run.trainer.on(event, [&](State& s) {
    if ((event == Event::StepEnd ? s.step : s.epoch) == count) {
      run.trainer.save_checkpoint(file);
      throw Killed();
    }
  });
  BOOST_CHECK_THROW(run.fit(), Killed);
  return run.seen;
}

void check_resume(Event event, std::int64_t count, const std::string& name,
                  Precision precision = Precision::Float32, const Setup& setup = {}) {
  ResumeRun uninterrupted(5, "", precision);
  if (setup) setup(uninterrupted);
  uninterrupted.fit();
  const auto file = scratch("resume", name) / "checkpoint.tbckpt";
  const auto before = interrupted_run(event, count, file, precision, setup);

  // Other initial weights: the checkpoint must restore them.
  ResumeRun resumed(/*init_seed=*/99, "", precision);
  if (setup) setup(resumed);
  resumed.trainer.resume_from(file);
  resumed.fit();

  BOOST_TEST(resumed.trainer.state().step == 12);
  const auto a = uninterrupted.model->parameters();
  const auto b = resumed.model->parameters();
  for (std::size_t i = 0; i < a.size(); ++i) BOOST_TEST(torch::equal(a[i], b[i]), name);
  const auto state_a = adam_state(uninterrupted.optimizer);
  const auto state_b = adam_state(resumed.optimizer);
  for (std::size_t i = 0; i < state_a.size(); ++i)
    BOOST_TEST(torch::equal(state_a[i], state_b[i]), name);
  BOOST_TEST(stitch(before, resumed.seen) == uninterrupted.seen, boost::test_tools::per_element());
  BOOST_TEST(resumed.trainer.state().metrics.series("train_loss").size() == 12u);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(resume)

BOOST_AUTO_TEST_CASE(after_the_first_step) {
  check_resume(Event::StepEnd, 1, "step1");
}

// Under bfloat16 autocast the forward differs from float32's; a resumed run still ends with the
// uninterrupted bf16 run's weights bit for bit. A CPU without AVX-512 refuses the run before its
// first batch.
BOOST_AUTO_TEST_CASE(mid_epoch_under_bf16_autocast) {
  if (bf16_supported()) {
    check_resume(Event::StepEnd, 6, "mid_epoch_bf16", Precision::BF16Mixed);
    return;
  }
  BOOST_TEST_MESSAGE("this CPU lacks AVX-512: checking that bf16-mixed is refused instead");
  ResumeRun run(5, "", Precision::BF16Mixed);
  try {
    run.fit();
    BOOST_FAIL("expected ConfigError");
  } catch (const ConfigError& error) {
    BOOST_TEST(std::string(error.what()) == kBf16Refusal);
  }
  BOOST_TEST(run.seen.empty());
}

BOOST_AUTO_TEST_CASE(mid_epoch) {
  check_resume(Event::StepEnd, 6, "step6");
}

// Options a run changes on its optimizer itself (no scheduler keeps them): a learning rate halved
// and a weight decay set at each epoch's end. The checkpoint's are the run's (LibTorch 1.13's
// Optimizer::load leaves the optimizer's own; 2.x and Python's load_state_dict take the saved).
BOOST_AUTO_TEST_CASE(with_the_optimizer_options_the_run_changed) {
  const Setup decay = [](ResumeRun& run) {
    run.trainer.on(Event::EpochEnd, [&optimizer = run.optimizer](State&) {
      auto& options =
          static_cast<torch::optim::AdamOptions&>(optimizer.param_groups()[0].options());
      options.lr(options.lr() / 2).weight_decay(options.weight_decay() + 0.01);
    });
  };
  check_resume(Event::StepEnd, 6, "options_changed", Precision::Float32, decay);
  // The options as the checkpoint holds them, loaded into an optimizer made with others.
  ResumeRun resumed(99);
  resumed.trainer.load_checkpoint(fs::temp_directory_path() / "torchbus_resume_options_changed" /
                                  "checkpoint.tbckpt");  // check_resume's (scratch() empties it)
  const auto& options =
      static_cast<const torch::optim::AdamOptions&>(resumed.optimizer.param_groups()[0].options());
  BOOST_TEST(options.lr() == 1e-2 / 2);  // one epoch ended before step 6
  BOOST_TEST(options.weight_decay() == 0.01);
}
BOOST_AUTO_TEST_CASE(after_the_last_step_of_an_epoch) {
  check_resume(Event::StepEnd, 8, "step8");
}
BOOST_AUTO_TEST_CASE(at_epoch_end) {
  check_resume(Event::EpochEnd, 0, "epoch0");
}
// At an epoch's start its order is not drawn yet: the resume draws it from the saved generator.
BOOST_AUTO_TEST_CASE(at_epoch_start) {
  check_resume(Event::EpochStart, 1, "epoch1_start");
}

// A checkpoint at the EpochStart of an epoch a resume continues holds the batches already trained
// (the epoch skips them after EpochStart): resumed from it, the run is the uninterrupted one.
BOOST_AUTO_TEST_CASE(at_the_epoch_start_of_a_resumed_epoch) {
  ResumeRun uninterrupted;
  uninterrupted.fit();
  const auto first = scratch("resume", "resumed_epoch_start") / "mid_epoch.tbckpt";
  const auto second = scratch("resume", "resumed_epoch_start") / "epoch_start.tbckpt";
  const auto before = interrupted_run(Event::StepEnd, 6, first);
  std::vector<std::string> between;
  {
    ResumeRun resumed(/*init_seed=*/77);
    resumed.trainer.resume_from(first);
    resumed.trainer.on(Event::EpochStart, [&](State& s) {
      BOOST_TEST(s.batch_in_epoch == 0);  // as every EpochStart
      resumed.trainer.save_checkpoint(second);
      throw Killed();
    });
    BOOST_CHECK_THROW(resumed.fit(), Killed);
    between = resumed.seen;
  }
  BOOST_TEST(read_checkpoint_position(second).batch_in_epoch == 4);
  ResumeRun resumed(/*init_seed=*/99);
  resumed.trainer.resume_from(second);
  resumed.fit();
  BOOST_TEST(between.empty());
  BOOST_TEST(resumed.trainer.state().step == 12);
  const auto a = uninterrupted.model->parameters();
  const auto b = resumed.model->parameters();
  for (std::size_t i = 0; i < a.size(); ++i) BOOST_TEST(torch::equal(a[i], b[i]));
  BOOST_TEST(stitch(before, resumed.seen) == uninterrupted.seen, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(from_the_newest_valid_checkpoint_of_a_folder) {
  ResumeRun uninterrupted;
  uninterrupted.fit();
  const auto folder = scratch("resume", "folder");
  ResumeRun interrupted;
  interrupted.trainer.on(Event::StepEnd, [&](State& s) {
    interrupted.trainer.save_checkpoint(folder / ("step-" + std::to_string(s.step) + ".tbckpt"));
    if (s.step == 7) throw Killed();
  });
  BOOST_CHECK_THROW(interrupted.fit(), Killed);
  // The newest is corrupt, and an interrupted write left a temporary file.
  std::ofstream(folder / "step-7.tbckpt", std::ios::binary | std::ios::trunc) << "garbage";
  std::ofstream(folder / "step-8.tbckpt.tmp-4242") << "partial";

  ResumeRun resumed(99);
  std::int64_t resumed_step = -1;
  resumed.trainer.on(Event::ActionStart, [&](State& s) { resumed_step = s.step; });
  resumed.trainer.resume_from(folder);
  resumed.fit();
  BOOST_TEST(resumed_step == 6);
  BOOST_TEST(!fs::exists(folder / "step-8.tbckpt.tmp-4242"));
  const auto a = uninterrupted.model->parameters();
  const auto b = resumed.model->parameters();
  for (std::size_t i = 0; i < a.size(); ++i) BOOST_TEST(torch::equal(a[i], b[i]));
}

// A folder also holding newer checkpoints of another run (more steps, another identity) and of
// another model: each is skipped with a warning, and the run's own newest one is resumed.
BOOST_AUTO_TEST_CASE(skips_checkpoints_of_another_run_or_model_in_a_folder) {
  const std::string identity = "data=rows\nseed=11\n";
  ResumeRun uninterrupted(5, identity);
  uninterrupted.fit();
  const auto folder = scratch("resume", "other_runs");
  ResumeRun interrupted(5, identity);
  interrupted.trainer.on(Event::StepEnd, [&](State& s) {
    if (s.step == 5) interrupted.trainer.save_checkpoint(folder / "own-step-5.tbckpt");
    if (s.step == 5) throw Killed();
  });
  BOOST_CHECK_THROW(interrupted.fit(), Killed);
  ResumeRun other_seed(5, "data=rows\nseed=12\n");
  other_seed.fit();  // 12 steps
  other_seed.trainer.save_checkpoint(folder / "other-seed-step-12.tbckpt");
  torch::manual_seed(1);
  auto wide =
      torch::nn::Sequential(torch::nn::Linear(5, 32), torch::nn::ReLU(), torch::nn::Linear(32, 3));
  torch::optim::Adam adam(wide->parameters());
  Trainer wide_trainer(wide, adam, ResumeRun::loss,
                       TrainerOptions().accumulate_grad_batches(2).run_identity(identity));
  wide_trainer.state().step = 20;  // what a longer run of another model would have
  wide_trainer.save_checkpoint(folder / "wide-step-20.tbckpt");

  ResumeRun resumed(99, identity);
  std::int64_t resumed_step = -1;
  resumed.trainer.on(Event::ActionStart, [&](State& s) { resumed_step = s.step; });
  resumed.trainer.resume_from(folder);
  resumed.fit();
  BOOST_TEST(resumed_step == 5);
  const auto a = uninterrupted.model->parameters();
  const auto b = resumed.model->parameters();
  for (std::size_t i = 0; i < a.size(); ++i) BOOST_TEST(torch::equal(a[i], b[i]));

  // Only checkpoints of others: a CheckpointError listing each with what differs.
  fs::remove(folder / "own-step-5.tbckpt");
  ResumeRun refused(99, identity);
  refused.trainer.resume_from(folder);
  BOOST_CHECK_EXCEPTION(refused.fit(), CheckpointError, [](const CheckpointError& e) {
    const std::string message = e.what();
    return message.find("seed: 12 -> 11") != std::string::npos &&
           message.find("wide-step-20.tbckpt holds parameter") != std::string::npos;
  });
}

BOOST_AUTO_TEST_SUITE_END()
