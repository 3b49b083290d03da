// A trainer's checkpoints: the list of their sections, how everything is validated before anything
// is applied, how a fit resumes from a file or a directory.

#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <torchbus/atomic_file.hpp>
#include <torchbus/checkpoint.hpp>
#include <torchbus/logging.hpp>

#include "bus/plumbing.hpp"
#include "checkpoint/format.hpp"
#include "checkpoint/sections.hpp"
#include "trainer/checkpoint_connector.hpp"

#include <memory>
#include <sstream>
#include <utility>
#include <vector>

namespace torchbus {
namespace {

namespace fs = std::filesystem;
using detail::CheckpointReader;
using torch::serialize::OutputArchive;

/// Version of the payload's entries (the framing has its own, kCheckpointFormatVersion).
constexpr std::int64_t kPayloadFormatVersion = 1;

/// Every section of a trainer's checkpoint, in the order a load reads them: the optimizer phases
/// first (a checkpoint of other phases is of another kind of run), the callbacks last (reading
/// their states loads them). Applying the fit's progress sets `*loaded` (when given) to the
/// position the checkpoint held.
std::vector<CheckpointSection> sections_of(const CheckpointParts& parts,
                                           FitProgress* loaded = nullptr) {
  const auto& options = parts.options;
  return {
      {"optimizer phases",
       [&parts](OutputArchive& archive, const SectionCapture&) { parts.step.save(archive); },
       [&parts](CheckpointReader& reader) -> CheckpointSection::Apply {
         return [&parts, progress = parts.step.read(reader)] { parts.step.restore(progress); };
       }},
      model_section(parts.module),
      optimizers_section(parts.phases),
      {"fit progress",
       [&parts, &options](OutputArchive& archive, const SectionCapture&) {
         parts.fit.save(archive, options);
       },
       [&parts, &options, loaded](CheckpointReader& reader) -> CheckpointSection::Apply {
         return [&parts, loaded, progress = parts.fit.read(reader, options)] {
           parts.fit.restore(progress);
           if (loaded != nullptr) *loaded = progress;
         };
       }},
      generators_section(),
      options_section(options),
      metrics_section(parts.state.metrics),
      filter_counts_section(parts.bus),
      callbacks_section(parts.bus),
  };
}

Checkpoint checkpoint_of(const fs::path& path, const FitProgress& progress) {
  return {path,
          progress.step,
          progress.epoch,
          progress.batch_in_epoch,
          progress.stop_reason,
          progress.world_size,
          progress.accumulate_grad_batches};
}

/// Reads, validates and applies the checkpoint at `path`; returns the position it held.
FitProgress apply_checkpoint(const CheckpointParts& parts, const fs::path& path) {
  // Its tensors on the device the model trains on, whatever device wrote them (also when loaded
  // before fit() has moved the model there: fit() moves the parameters, not the optimizer state).
  CheckpointReader reader(path, parts.options.device());
  // 1. Read and validate everything; nothing changes yet (but the callbacks' states, read last).
  const auto& identity = parts.options.run_identity();
  if (!identity.empty() && reader.header().identity != identity) {
    reader.fail("belongs to another run (",
                reader.header().identity.empty()
                    ? std::string("it has no run identity")
                    : identity_differences(reader.header().identity, identity),
                ")");
  }
  const auto version = reader.value("format_version").toInt();
  if (version != kPayloadFormatVersion) {
    reader.fail("has payload format version ", version, "; expected ", kPayloadFormatVersion);
  }
  FitProgress loaded;
  const auto sections = sections_of(parts, &loaded);
  std::vector<std::pair<const CheckpointSection*, CheckpointSection::Apply>> reads;
  for (const auto& section : sections) {
    try {
      reads.emplace_back(&section, section.read(reader));
    } catch (const CheckpointError&) {
      throw;
    } catch (const std::exception& error) {  // what LibTorch cannot read, see load_checkpoint
      reader.fail("cannot be loaded (its ", section.name, " section): ", detail::reason_of(error));
    }
  }
  // 2. Validated: apply, the one section whose applying can fail first (it then puts back what
  // it changed).
  for (auto& [section, apply] : reads) {
    if (section->apply_may_fail) apply();
  }
  for (auto& [section, apply] : reads) {
    if (!section->apply_may_fail) apply();
  }
  return loaded;
}

}  // namespace

CheckpointSnapshot capture_checkpoint(const CheckpointParts& parts, const fs::path& path,
                                      TensorCapture capture) {
  TORCHBUS_CHECK(!parts.step.in_window(), ConfigError,
                 "a checkpoint can only be taken at a step boundary (StepEnd, EpochEnd, between "
                 "runs), not between StepStart and the end of the optimizer step");
  const auto checkpoint = checkpoint_of(path, parts.fit.progress());
  // One that fails here (a logger flushing to a full disk) is disabled by its error policy like a
  // failure during an event. A disabled one is still told (a logger then flushes what it wrote
  // before it failed), as its state still goes into the checkpoint.
  for (const auto& callback : parts.bus.callbacks()) {
    if (!callback->runs_on(parts.state.rank)) continue;
    detail::run_callback_hook(parts.bus, *callback, "on_save_checkpoint",
                              [&] { callback->on_save_checkpoint(checkpoint); });
  }
  const SectionCapture section_capture{capture == TensorCapture::Copies ? &parts.copies : nullptr};
  if (section_capture.copies != nullptr) section_capture.copies->begin_capture();
  auto archive = std::make_shared<OutputArchive>();
  archive->write("format_version", c10::IValue(kPayloadFormatVersion));
  for (const auto& section : sections_of(parts)) section.save(*archive, section_capture);
  if (section_capture.copies != nullptr) section_capture.copies->end_capture();
  return CheckpointSnapshot(
      path, [archive, step = parts.state.step, identity = parts.options.run_identity()] {
        std::ostringstream payload;
        archive->save_to(payload);
        return frame_checkpoint(payload.str(), step, identity);
      });
}

void load_checkpoint(const CheckpointParts& parts, const fs::path& path) {
  FitProgress progress;
  try {
    progress = apply_checkpoint(parts, path);
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& error) {
    // A payload that passed its CRC but holds what LibTorch cannot read (a forged or damaged
    // file): the file is named, so that a resume skips it for an older one.
    throw CheckpointError(detail::concat("checkpoint ", path.string(),
                                         " cannot be loaded: ", detail::reason_of(error)));
  }
  const auto checkpoint = checkpoint_of(path, progress);
  for (const auto& callback : parts.bus.callbacks()) {
    if (callback->runs_on(parts.state.rank)) callback->on_load_checkpoint(checkpoint);
  }
}

void resume_from_checkpoint(const CheckpointParts& parts, const fs::path& path) {
  auto loaded_path = path;
  if (!fs::is_directory(path)) {
    load_checkpoint(parts, path);
  } else {
    remove_stale_temporaries(path);
    // The newest checkpoint this trainer can continue: of the run's identity, and loadable (a
    // checkpoint of another model is skipped, not a reason to stop).
    std::string skipped;
    bool loaded = false;
    for (const auto& candidate : valid_checkpoints(path)) {
      try {
        load_checkpoint(parts, candidate.path);
        loaded_path = candidate.path;
        loaded = true;
        break;
      } catch (const CheckpointError& error) {
        logger()->warn("not resuming from it: {}", error.what());
        skipped += detail::concat("\n  ", error.what());
      }
    }
    TORCHBUS_CHECK(loaded, CheckpointError, "cannot resume: ", path.string(),
                   " holds no valid checkpoint (*", kCheckpointExtension, ") this run can continue",
                   skipped.empty() ? std::string() : "; skipped:" + skipped);
  }
  const auto& state = parts.state;
  logger()->info("resumed from {} at epoch {}, step {}, batch {} of the epoch",
                 loaded_path.string(), state.epoch, state.step, state.batch_in_epoch);
  if (state.stop_requested()) {
    logger()->info("the run had already finished there ({}): nothing to train",
                   state.stop_reason());
  }
}

Checkpoint read_checkpoint_position(const fs::path& path) {
  try {
    CheckpointReader reader(path);
    return checkpoint_of(path, read_fit_position(reader));
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& error) {
    throw CheckpointError(detail::concat("checkpoint ", path.string(),
                                         " cannot be read: ", detail::reason_of(error)));
  }
}

}  // namespace torchbus
