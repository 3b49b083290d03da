#include "run_identity.hpp"

#include "csv_records.hpp"

#include <fmt/format.h>
#include <torchbus/error.hpp>

#include <filesystem>
#include <fstream>
#include <system_error>

namespace train {
namespace {

namespace fs = std::filesystem;

/// The data source with file paths made absolute, so that a resume from elsewhere matches.
std::string canonical_data(const std::string& spec) {
  const auto colon = spec.find(':');
  if (colon == std::string::npos) return spec;
  std::error_code error;
  const auto path = fs::absolute(spec.substr(colon + 1), error);
  return spec.substr(0, colon + 1) +
         (error ? spec.substr(colon + 1) : path.lexically_normal().string());
}

}  // namespace

JsonObject describe_run(const Flags& flags, bool cnn) {
  return {{"data", flags.data},
          {"csv_delimiter", flags.csv_delimiter},
          {"task", flags.task},
          {"model", flags.model},
          {"hidden", cnn ? JsonObject() : JsonObject(flags.hidden)},
          {"epochs", flags.epochs},
          {"max_steps", flags.max_steps},
          {"batch_size", flags.batch_size},
          {"accumulate", flags.accumulate},
          {"accumulate_schedule", flags.accumulate_schedule},
          {"limit_train_batches",
           flags.limit_train_batches.empty() ? "all" : flags.limit_train_batches},
          {"limit_val_batches", flags.limit_val_batches.empty() ? "all" : flags.limit_val_batches},
          {"sanity_val_steps", flags.sanity_val_steps},
          {"lr", flags.lr},
          {"optimizer", flags.optimizer},
          {"precision", flags.precision},
          {"device", flags.device},
          {"channels_last", flags.channels_last},
          {"scheduler", flags.scheduler},
          {"ema", flags.ema},
          {"swa_start", flags.swa_start},
          {"swa_lr", flags.swa_lr},
          {"early_stopping", flags.early_stopping},
          {"min_epochs", flags.min_epochs},
          {"terminate_on_nan", flags.terminate_on_nan},
          {"time_limit", flags.time_limit},
          {"seed", static_cast<std::int64_t>(flags.seed)},
          {"val_every", flags.val_every},
          {"val_every_steps", flags.val_every_steps},
          {"threads", flags.threads},
          {"init_from", flags.init_from}};
}

std::string run_identity(const Flags& flags, bool cnn, int world_size,
                         const std::string& init_from_sha256, BatchInIdentity batch) {
  std::string hidden;
  for (const auto width : flags.hidden)
    hidden += (hidden.empty() ? "" : ",") + std::to_string(width);
  const auto global = batch == BatchInIdentity::Global && flags.accumulate_schedule.empty();
  auto identity = fmt::format(
      "data={}\nmodel={}\nhidden={}\n{}optimizer={}\nlr={}\n"
      "scheduler={}\nseed={}\nepochs={}\nmax_steps={}\nval_every={}\nval_every_steps={}\n"
      "early_stopping={}\nterminate_on_nan={}\nprecision={}\nchannels_last={}\n{}",
      canonical_data(flags.data), cnn ? "cnn" : "mlp", cnn ? "-" : hidden,
      global ? fmt::format("global_batch={}\n", flags.batch_size * flags.accumulate * world_size)
             : fmt::format("batch_size={}\naccumulate={}\n", flags.batch_size, flags.accumulate),
      flags.optimizer, flags.lr, flags.scheduler, flags.seed, flags.epochs, flags.max_steps,
      flags.val_every, flags.val_every_steps, flags.early_stopping, flags.terminate_on_nan ? 1 : 0,
      flags.precision, flags.channels_last ? 1 : 0,
      global ? std::string() : fmt::format("world_size={}\n", world_size));
  if (flags.ema > 0) identity += fmt::format("ema={}\n", flags.ema);
  if (flags.min_epochs > 0) identity += fmt::format("min_epochs={}\n", flags.min_epochs);
  if (flags.task != "classification") identity += fmt::format("task={}\n", flags.task);
  // A CSV file read with another delimiter is other data (a comma file's identity stays as it was).
  const auto delimiter = *parse_csv_delimiter(flags.csv_delimiter);
  if (flags.data.rfind("csv:", 0) == 0 && delimiter != ',') {
    identity += fmt::format("csv_delimiter={}\n", describe_csv_delimiter(delimiter));
  }
  if (!flags.accumulate_schedule.empty()) {
    identity += fmt::format("accumulate_schedule={}\n",
                            schedule_text(*parse_accumulation_schedule(flags.accumulate_schedule)));
  }
  if (!flags.limit_train_batches.empty()) {
    identity += fmt::format("limit_train_batches={}\n",
                            parse_batch_limit(flags.limit_train_batches)->to_string());
  }
  if (!flags.limit_val_batches.empty()) {
    identity += fmt::format("limit_val_batches={}\n",
                            parse_batch_limit(flags.limit_val_batches)->to_string());
  }
  if (flags.swa_start > 0) {
    identity += fmt::format("swa_start={}\nswa_lr={}\n", flags.swa_start, flags.swa_lr);
  }
  if (!init_from_sha256.empty()) identity += fmt::format("init_from_sha256={}\n", init_from_sha256);
  return identity;
}

RunStart take_run_directory(const Flags& flags, const std::string& identity,
                            const std::string& split_identity, int world_size,
                            std::optional<RunLock>& lock) {
  const fs::path out(flags.out);
  std::error_code error;
  fs::create_directories(out, error);
  TORCHBUS_CHECK(!error && fs::is_directory(out), torchbus::Error,
                 "cannot create the run directory '", flags.out,
                 "': ", error ? error.message() : "a file of that name exists");
  lock.emplace(out);
  RunDirectoryRequest::Split split;
  split.by_global_batch = flags.accumulate_schedule.empty();
  split.world_size = world_size;
  split.accumulate = flags.accumulate;
  split.limit_counts_batches = !flags.limit_train_batches.empty() &&
                               !parse_batch_limit(flags.limit_train_batches)->needs_size();
  auto start = prepare_run_directory({out, flags.resume, flags.overwrite, identity, split_identity,
                                      split, flags.epochs, flags.max_steps, flags.validate});
  std::ofstream probe(out / "train.log", std::ios::app);
  TORCHBUS_CHECK(probe.good(), torchbus::Error, "the run directory '", flags.out,
                 "' is not writable");
  return start;
}

}  // namespace train
