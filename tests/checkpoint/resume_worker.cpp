// Worker for kill_test.cpp: trains the ResumeRun, checkpointing into DIR after every step and
// resuming from DIR when it holds a checkpoint. Appends "global_batch:rows" per batch to LOG and
// prints "saving N" / "saved N" around each checkpoint; at the end saves the model and optimizer
// to DIR/final-model.pt and DIR/final-optimizer.pt. A CsvLogger writes every step to
// DIR/metrics.csv, buffering rows until a checkpoint or an epoch end.
// Usage: resume_worker DIR LOG [wait]
// With "wait", after each "saving N" / "saved N" line it waits for a line on its standard input
// (or its end) before it goes on: the test that kills it at one of those lines then knows where
// it is, however fast the machine.

#include "resume_setup.hpp"

#include <torchbus/callbacks/csv_logger.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
  if (argc != 3 && !(argc == 4 && std::string(argv[3]) == "wait")) {
    std::cerr << "usage: resume_worker DIR LOG [wait]\n";
    return 2;
  }
  namespace fs = std::filesystem;
  const fs::path directory(argv[1]);
  std::ofstream log(argv[2], std::ios::app);
  const bool wait = argc == 4;
  const auto tell = [wait](const std::string& line) {
    std::cout << line << std::endl;
    std::string go_on;
    if (wait) std::getline(std::cin, go_on);
  };
  torchbus::testing::ResumeRun run;
  run.trainer.on(torchbus::Event::BatchEnd, [&](torchbus::State&) {
    log << run.seen.back() << "\n" << std::flush;
  });
  run.trainer.add(
      std::make_shared<torchbus::CsvLogger>(torchbus::CsvLoggerOptions(directory / "metrics.csv")
                                                .step_freq(1)
                                                .append(true)
                                                .flush_secs(3600)));
  // After the loggers, as ModelCheckpoint.
  run.trainer.on(
      torchbus::Event::StepEnd,
      [&](torchbus::State& state) {
        tell("saving " + std::to_string(state.step));
        run.trainer.save_checkpoint(directory / ("step-" + std::to_string(state.step) + ".tbckpt"));
        tell("saved " + std::to_string(state.step));
      },
      200);
  bool has_checkpoint = false;
  for (const auto& entry : fs::directory_iterator(directory)) {
    has_checkpoint = has_checkpoint || entry.path().extension() == ".tbckpt";
  }
  if (has_checkpoint) run.trainer.resume_from(directory);
  run.fit();
  torch::save(run.model, (directory / "final-model.pt").string());
  torch::save(run.optimizer, (directory / "final-optimizer.pt").string());
  std::cout << "finished" << std::endl;
}
