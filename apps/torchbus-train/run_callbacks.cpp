#include "run_callbacks.hpp"

#include "lr_sweep.hpp"
#include "stop_signals.hpp"

#include <torchbus/callbacks/callbacks.hpp>

#include <filesystem>

namespace train {

namespace fs = std::filesystem;

void add_outputs(torchbus::Trainer& trainer, const Flags& flags, bool resuming,
                 const JsonObject& run_options, int world_size, const LrSweep& lr_sweep) {
  const fs::path out(flags.out);
  const auto outputs =
      torchbus::add_default_callbacks(trainer, torchbus::DefaultCallbacksOptions()
                                                   .run_dir(out.string())
                                                   .log_every(flags.log_every)
                                                   .terminate_on_nan(flags.terminate_on_nan)
                                                   .csv(flags.csv)
                                                   .tensorboard(flags.tensorboard)
                                                   .report(flags.report)
                                                   .profiler(flags.profile)
                                                   .progress_bar(flags.progress)
                                                   .append(resuming)
                                                   .metrics_to_show({"val_loss", "val_accuracy"})
                                                   .title("torchbus-train: " + flags.data));
  if (outputs.run_report) {
    for (const auto& [key, value] : text_members(run_options)) {
      outputs.run_report->add_option(key, value);
    }
    outputs.run_report->add_option("world_size", std::to_string(world_size));
    outputs.run_report->add_option(
        "model.pt",
        "the final weights, written at the end: a state_dict Python's torch.load "
        "reads; --init-from starts a run from one, --validate evaluates one "
        "(docs/interop.md)");
  }
  if (lr_sweep.found && lr_sweep.writes_outputs) {
    report_lr_found(*lr_sweep.found, lr_sweep.recorded, out, outputs.run_report.get());
  }
  if (outputs.tensorboard_logger) {  // the run's options in TensorBoard's Text tab
    for (const auto& [key, value] : text_members(run_options)) {
      outputs.tensorboard_logger->add_option(key, value);
    }
    outputs.tensorboard_logger->add_option("world_size", std::to_string(world_size));
  }
  if (flags.checkpoints) {
    trainer.add(std::make_shared<torchbus::ModelCheckpoint>(
        torchbus::ModelCheckpointOptions(out / "checkpoints")
            .every_n_steps(flags.checkpoint_every)
            .monitor(validates(flags) ? "val_loss" : "")));
  }
}

void stop_at_signals(torchbus::Trainer& trainer) {
  trainer.on(torchbus::Event::StepEnd, [](torchbus::State& s) {
    if (const int signal = received_stop_signal()) {
      s.request_stop(interrupted_reason(signal), torchbus::StopKind::Interrupted);
    }
  });
}

void subscribe_run(torchbus::Trainer& trainer, std::int64_t& samples) {
  trainer.on(torchbus::Event::BatchEnd, [&samples](torchbus::State& s) {
    if (!s.cancelled) samples += s.batch_target().size(0);
  });
  stop_at_signals(trainer);
  trainer.on(torchbus::Event::EpochEnd, [](torchbus::State& s) {
    if (s.error || s.rank != 0) return;  // the failure is reported instead; rank 0 speaks for all
    if (!s.metrics.contains("train_accuracy") && s.metrics.contains("val_mae")) {  // regression
      torchbus::logger()->info("epoch {} ended: train loss {:.4f} | val loss {:.4f} mae {:.4f}",
                               s.epoch + 1, latest_or_nan(s.metrics, "train_loss_epoch"),
                               latest_or_nan(s.metrics, "val_loss"),
                               latest_or_nan(s.metrics, "val_mae"));
      return;
    }
    torchbus::logger()->info(
        "epoch {} ended: train loss {:.4f} accuracy {:.3f} | val loss {:.4f} accuracy {:.3f}",
        s.epoch + 1, latest_or_nan(s.metrics, "train_loss_epoch"),
        latest_or_nan(s.metrics, "train_accuracy"), latest_or_nan(s.metrics, "val_loss"),
        latest_or_nan(s.metrics, "val_accuracy"));
  });
}

}  // namespace train
