#include <boost/test/unit_test.hpp>
#include <support/fixtures.hpp>
#include <support/scratch.hpp>
#include <torchbus/callbacks/model_checkpoint.hpp>

#include <filesystem>
#include <fstream>
#include <set>

using namespace torchbus;
using namespace torchbus::testing;
namespace fs = std::filesystem;

namespace {

std::set<std::string> checkpoint_files(const fs::path& folder) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(folder))
    names.insert(entry.path().filename().string());
  return names;
}

struct CheckpointRun : Run {
  explicit CheckpointRun(TrainerOptions options = TrainerOptions().max_epochs(2))
      : Run(std::move(options)) {}
  void fit(int batches = 4) {
    auto data = make_batches(batches, 4);
    trainer.fit(data);
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(model_checkpoint)

BOOST_AUTO_TEST_CASE(saves_at_the_expected_steps_and_links_last) {
  const auto folder = scratch_path("model_checkpoint", "steps");
  CheckpointRun run;
  auto checkpoint = std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions(folder).every_n_steps(3).every_n_epochs(0).save_top_k(-1));
  run.trainer.add(checkpoint);
  run.fit();
  BOOST_TEST(checkpoint_files(folder) ==
                 (std::set<std::string>{"epoch-000-step-000003.tbckpt",
                                        "epoch-001-step-000006.tbckpt", "last.tbckpt"}),
             boost::test_tools::per_element());
  BOOST_TEST(fs::read_symlink(folder / "last.tbckpt") == "epoch-001-step-000006.tbckpt");
  CheckpointHeader header;
  read_checkpoint_payload(folder / "last.tbckpt", &header);
  BOOST_TEST(header.step == 6);
}

BOOST_AUTO_TEST_CASE(keeps_the_best_k_by_a_monitored_metric) {
  const auto folder = scratch_path("model_checkpoint", "best");
  CheckpointRun run(TrainerOptions().max_epochs(1));
  // A scripted metric, recorded before the checkpoint runs: best at steps 2 and 4.
  const std::vector<double> scores{0.9, 0.2, 0.8, 0.1, 0.7, 0.6};
  run.trainer.on(Event::StepEnd, [&](State& s) { s.record_metric("score", scores[s.step - 1]); });
  auto checkpoint = std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions(folder).every_n_steps(1).every_n_epochs(0).monitor("score").save_top_k(
          2));
  run.trainer.add(checkpoint);
  run.fit(6);
  // The two best, plus the newest that `last` points to.
  BOOST_TEST(
      checkpoint_files(folder) ==
          (std::set<std::string>{"epoch-000-step-000002.tbckpt", "epoch-000-step-000004.tbckpt",
                                 "epoch-000-step-000006.tbckpt", "last.tbckpt"}),
      boost::test_tools::per_element());
  BOOST_TEST(checkpoint->kept().front().filename() == "epoch-000-step-000004.tbckpt");
  for (const auto& path : checkpoint->kept()) BOOST_CHECK_NO_THROW(read_checkpoint_payload(path));
}

BOOST_AUTO_TEST_CASE(saves_when_stopped_and_resumes_from_its_folder) {
  const auto folder = scratch_path("model_checkpoint", "stop");
  {
    CheckpointRun run(TrainerOptions().max_epochs(3));
    run.trainer.on(Event::StepEnd, [](State& s) {
      if (s.step == 5) s.request_stop("enough for now");
    });
    run.trainer.add(
        std::make_shared<ModelCheckpoint>(ModelCheckpointOptions(folder).every_n_epochs(0)));
    run.fit();
  }
  BOOST_TEST(checkpoint_files(folder).count("epoch-001-step-000005.tbckpt") == 1u);
  CheckpointRun resumed(TrainerOptions().max_epochs(3));
  std::int64_t step_at_start = -1;
  resumed.trainer.on(Event::ActionStart, [&](State& s) { step_at_start = s.step; });
  resumed.trainer.add(std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions(folder).every_n_epochs(0).resume(true)));
  resumed.fit();
  BOOST_TEST(step_at_start == 5);
  BOOST_TEST(resumed.trainer.state().step == 12);
}

BOOST_AUTO_TEST_CASE(state_round_trips_through_save_and_load) {
  const auto folder = scratch_path("model_checkpoint", "state");
  CheckpointRun run(TrainerOptions().max_epochs(1));
  run.trainer.on(Event::StepEnd, [](State& s) { s.record_metric("score", 1.0 / s.step); });
  auto checkpoint = std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions(folder).every_n_steps(1).every_n_epochs(0).monitor("score").mode(
          Mode::Max));
  run.trainer.add(checkpoint);
  run.fit(4);
  torch::serialize::OutputArchive out;
  checkpoint->save_state(out);
  std::stringstream bytes;
  out.save_to(bytes);
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  ModelCheckpoint restored{ModelCheckpointOptions(folder)};
  restored.load_state(in);
  BOOST_TEST(restored.kept() == checkpoint->kept(), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(bad_input) {
  const auto file = scratch_path("model_checkpoint", "is_a_file");
  std::ofstream(file) << "x";
  CheckpointRun run;
  run.trainer.add(std::make_shared<ModelCheckpoint>(ModelCheckpointOptions(file)));
  BOOST_CHECK_EXCEPTION(run.fit(), ConfigError, [](const ConfigError& e) {
    return std::string(e.what()).find("exists and is not a directory") != std::string::npos;
  });
  CheckpointRun missing_metric;
  missing_metric.trainer.add(std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions(scratch_path("model_checkpoint", "metric")).monitor("val_acc")));
  BOOST_CHECK_EXCEPTION(missing_metric.fit(), ConfigError, [](const ConfigError& e) {
    const std::string message = e.what();
    return message.find("monitors 'val_acc'") != std::string::npos &&
           message.find("recorded: train_loss, train_loss_epoch") != std::string::npos;
  });
  BOOST_CHECK_THROW(ModelCheckpoint(ModelCheckpointOptions("x").save_top_k(-2)), ConfigError);
  BOOST_CHECK_THROW(ModelCheckpoint(ModelCheckpointOptions("")), ConfigError);
}

BOOST_AUTO_TEST_SUITE_END()
