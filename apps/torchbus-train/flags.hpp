#pragma once

// torchbus-train's flags: their values, their description for --help and CLI11, the parsers of the
// values that have a syntax of their own, and the combinations that cannot work.

#include <c10/core/Device.h>
#include <torchbus/batch_limit.hpp>
#include <torchbus/trainer_options.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace train {

/// Every flag of torchbus-train, with its default.
struct Flags {
  std::string data = "synthetic";
  std::string csv_delimiter = ",";      // as given: parse_csv_delimiter reads it (csv_records.hpp)
  std::string task = "classification";  // or "regression"
  std::string model = "auto";
  std::vector<std::int64_t> hidden = {128, 64};
  bool hidden_given = false;  // --hidden was on the command line
  std::int64_t epochs = 5;
  std::int64_t max_steps = -1;
  std::int64_t batch_size = 64;
  std::int64_t accumulate = 1;
  std::string accumulate_schedule;  // EPOCH:K,... (empty: none)
  std::int64_t fast_dev_run = 0;
  std::string limit_train_batches;  // a count, or a fraction with a decimal point (empty: all)
  std::string limit_val_batches;
  std::int64_t sanity_val_steps = 2;
  double lr = 1e-3;
  std::string optimizer = "adam";
  std::string precision = "32";
  std::string device = "auto";
  bool channels_last = false;
  std::uint64_t seed = 42;
  std::int64_t val_every = 1;
  std::int64_t val_every_steps = 0;
  std::string out = "runs/torchbus-train";
  int threads = 0;
  std::int64_t log_every = 50;
  std::int64_t checkpoint_every = 0;
  bool checkpoints = true;
  bool resume = false;
  bool overwrite = false;
  bool csv = true;
  bool tensorboard = true;
  bool report = true;
  bool profile = false;
  bool progress = true;
  std::string scheduler = "none";
  std::int64_t early_stopping = 0;
  std::int64_t min_epochs = 0;  // epochs before which early stopping may not end the run
  double ema = 0.0;
  double swa_start = 0.0;
  double swa_lr = 0.0;
  bool terminate_on_nan = true;
  double time_limit = 0.0;
  bool find_lr = false;
  std::string init_from;  // a state_dict file (empty: none)
  bool validate = false;
  std::string test;     // data to test on after training (empty: none)
  std::string predict;  // data to predict on, training nothing (empty: none)
};

/// Adds every flag to `app`, each writing into `flags`, with its help text and its check.
void describe_flags(CLI::App& app, Flags& flags);

/// A --limit-*-batches value: a count (digits only), or a fraction with a decimal point
/// (nullopt: malformed).
std::optional<torchbus::BatchLimit> parse_batch_limit(const std::string& text);
/// An --accumulate-schedule value, "EPOCH:K,EPOCH:K,..." (nullopt: malformed).
std::optional<torchbus::AccumulationSchedule> parse_accumulation_schedule(const std::string& text);
/// The schedule as --accumulate-schedule spells it, in epoch order ("0:1,2:4").
std::string schedule_text(const torchbus::AccumulationSchedule& schedule);

/// Whether the flags schedule validations (--val-every or --val-every-steps).
bool validates(const Flags& flags);
/// Whether the trainer gets the validation data: when the flags validate, and in a --fast-dev-run
/// (which validates whatever --val-every* say).
bool gets_validation_data(const Flags& flags);
/// Flag combinations that cannot work (on `device`), found before anything is written: a
/// UsageError naming them.
void check_flag_combinations(const Flags& flags, const c10::Device& device);

}  // namespace train
