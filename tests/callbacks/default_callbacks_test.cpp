// add_default_callbacks: each switch adds (or leaves out) its callback and its file; the profiler's
// table reaches the report of the same run; bad options.

#include <boost/test/unit_test.hpp>
#include <support/errors.hpp>
#include <support/fixtures.hpp>
#include <support/scratch.hpp>
#include <support/tfrecord_reader.hpp>
#include <support/xml_check.hpp>
#include <torchbus/callbacks/callbacks.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

using namespace torchbus;
using namespace torchbus::testing;
namespace fs = std::filesystem;

BOOST_AUTO_TEST_SUITE(default_callbacks)

BOOST_AUTO_TEST_CASE(the_default_set_writes_every_file_of_the_run_directory) {
  TempDir dir("default_callbacks");
  Run run(TrainerOptions().max_epochs(2));
  const auto added = add_default_callbacks(
      run.trainer,
      DefaultCallbacksOptions().run_dir(dir.path.string()).log_every(2).progress_bar(false));
  BOOST_TEST(added.terminate_on_nan != nullptr);
  BOOST_TEST(added.simple_logger != nullptr);
  BOOST_TEST(added.csv_logger != nullptr);
  BOOST_TEST(added.tensorboard_logger != nullptr);
  BOOST_TEST(added.run_report != nullptr);
  BOOST_TEST(added.progress_bar == nullptr);
  BOOST_TEST(added.profiler == nullptr);  // off unless asked
  BOOST_TEST(added.connections.size() == 5u);
  run.trainer.fit(make_batches(8, 4));

  BOOST_TEST(read_text(dir.path / "metrics.csv").find("kind,step,epoch") == 0u);
  const auto files = event_files(dir.path / "tensorboard");
  BOOST_TEST_REQUIRE(files.size() == 1u);
  BOOST_TEST(scalars_of(read_events(files.front()), "train/step_loss").size() ==
             8u);  // 16 steps / 2
  const auto report = read_text(dir.path / "report.html");
  BOOST_TEST(xml_problem(report) == "");
  BOOST_TEST(report.find("data-metric=\"train_loss\"") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(without_a_run_directory_nothing_is_written_to_files) {
  Run run;
  const auto added =
      add_default_callbacks(run.trainer, DefaultCallbacksOptions().progress_bar(false));
  BOOST_TEST(added.csv_logger == nullptr);
  BOOST_TEST(added.tensorboard_logger == nullptr);
  BOOST_TEST(added.run_report == nullptr);
  BOOST_TEST(added.simple_logger != nullptr);
  BOOST_TEST(run.trainer.bus().find_callback("terminate_on_nan") != nullptr);
}

BOOST_AUTO_TEST_CASE(every_switch_turns_its_callback_off) {
  TempDir dir("default_callbacks");
  Run run;
  const auto added = add_default_callbacks(run.trainer, DefaultCallbacksOptions()
                                                            .run_dir(dir.path.string())
                                                            .terminate_on_nan(false)
                                                            .simple_logger(false)
                                                            .progress_bar(false)
                                                            .csv(false)
                                                            .tensorboard(false)
                                                            .report(false));
  BOOST_TEST(added.connections.empty());
  BOOST_TEST(run.trainer.bus().callbacks().empty());
  run.trainer.fit(make_batches(2, 4));
  BOOST_TEST(fs::is_empty(dir.path));
}

BOOST_AUTO_TEST_CASE(the_profile_of_a_run_is_a_section_of_its_report) {
  TempDir dir("default_callbacks");
  Run run;
  const auto added = add_default_callbacks(
      run.trainer,
      DefaultCallbacksOptions().run_dir(dir.path.string()).profiler(true).progress_bar(false));
  BOOST_TEST_REQUIRE(added.profiler != nullptr);
  run.trainer.fit(make_batches(6, 4));
  const auto report = read_text(dir.path / "report.html");
  BOOST_TEST(xml_problem(report) == "");
  const auto section = report.find("<h2>Profile</h2>");
  BOOST_TEST_REQUIRE(section != std::string::npos);
  // The forward phase of this run's 6 batches, not an empty table from before the run.
  BOOST_TEST(report.find("<td>forward</td><td>BatchStart..BeforeBackward</td><td>6</td>",
                         section) != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_bad_frequency_is_rejected) {
  Run run;
  BOOST_TEST(has(message_of<ConfigError>([&] {
                   add_default_callbacks(run.trainer, DefaultCallbacksOptions().log_every(0));
                 }),
                 "log_every must be >= 1, got 0"));
  BOOST_TEST(run.trainer.bus().callbacks().empty());
}

BOOST_AUTO_TEST_SUITE_END()
