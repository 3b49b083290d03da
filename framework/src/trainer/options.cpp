#include <torchbus/error.hpp>
#include <torchbus/trainer_options.hpp>

namespace torchbus {

std::string_view to_string(Determinism determinism) noexcept {
  switch (determinism) {
    case Determinism::On:
      return "on";
    case Determinism::WarnOnly:
      return "warn_only";
    case Determinism::Off:
      return "off";
    case Determinism::Unchanged:
      break;
  }
  return "unchanged";
}

void TrainerOptions::validate() const {
  TORCHBUS_CHECK(accumulate_grad_batches_ >= 1, ConfigError,
                 "accumulate_grad_batches must be >= 1 (batches per optimizer step), got ",
                 accumulate_grad_batches_);
  TORCHBUS_CHECK(max_epochs_ >= -1, ConfigError,
                 "max_epochs must be >= 1, or -1 for no limit, got ", max_epochs_);
  TORCHBUS_CHECK(max_steps_ >= -1, ConfigError, "max_steps must be >= 1, or -1 for no limit, got ",
                 max_steps_);
  TORCHBUS_CHECK(max_epochs_ != 0 && max_steps_ != 0, ConfigError, "max_epochs is ", max_epochs_,
                 " and max_steps is ", max_steps_,
                 ": the run ends at the first limit reached, so a 0 trains nothing; expected "
                 "limits above 0, or -1 for no limit");
  TORCHBUS_CHECK(!(max_epochs_ == -1 && max_steps_ == -1), ConfigError,
                 "max_epochs and max_steps are both -1 (no limit): the run would never end; "
                 "set at least one of them");
  TORCHBUS_CHECK(min_epochs_ >= 0, ConfigError, "min_epochs must be >= 0 (0: none), got ",
                 min_epochs_);
  TORCHBUS_CHECK(min_steps_ >= 0, ConfigError, "min_steps must be >= 0 (0: none), got ",
                 min_steps_);
  TORCHBUS_CHECK(max_epochs_ < 0 || min_epochs_ <= max_epochs_, ConfigError, "min_epochs is ",
                 min_epochs_, " and max_epochs ", max_epochs_,
                 "; expected min_epochs <= max_epochs (the run ends at max_epochs)");
  TORCHBUS_CHECK(max_steps_ < 0 || min_steps_ <= max_steps_, ConfigError, "min_steps is ",
                 min_steps_, " and max_steps ", max_steps_,
                 "; expected min_steps <= max_steps (the run ends at max_steps)");
  TORCHBUS_CHECK(val_every_n_epochs_ >= 0, ConfigError,
                 "val_every_n_epochs must be >= 0 (0: never), got ", val_every_n_epochs_);
  TORCHBUS_CHECK(val_every_n_steps_ >= 0, ConfigError,
                 "val_every_n_steps must be >= 0 (0: never), got ", val_every_n_steps_);
  TORCHBUS_CHECK(val_every_epoch_fraction_ >= 0.0 && val_every_epoch_fraction_ <= 1.0, ConfigError,
                 "val_every_epoch_fraction must be in (0, 1] (a fraction of an epoch), or 0 for "
                 "never, got ",
                 val_every_epoch_fraction_);
  TORCHBUS_CHECK(gradient_clip_norm_ >= 0.0, ConfigError,
                 "gradient_clip_norm must be >= 0 (0: off), got ", gradient_clip_norm_);
  TORCHBUS_CHECK(gradient_clip_value_ >= 0.0, ConfigError,
                 "gradient_clip_value must be >= 0 (0: off), got ", gradient_clip_value_);
  loss_scaler_.validate();
  TORCHBUS_CHECK(gradient_clip_norm_ == 0.0 || gradient_clip_value_ == 0.0, ConfigError,
                 "choose one of gradient_clip_norm (", gradient_clip_norm_,
                 ") and gradient_clip_value (", gradient_clip_value_, "), not both");
  for (const auto& [epoch, k] : accumulation_schedule_) {
    TORCHBUS_CHECK(epoch >= 0, ConfigError, "accumulation_schedule has the negative epoch ", epoch,
                   "; expected epochs >= 0 (0: the first)");
    TORCHBUS_CHECK(k >= 1, ConfigError, "accumulation_schedule gives epoch ", epoch, " k = ", k,
                   "; expected batches per optimizer step >= 1");
  }
  limit_train_batches_.validate("limit_train_batches");
  limit_val_batches_.validate("limit_val_batches");
  limit_test_batches_.validate("limit_test_batches");
  limit_predict_batches_.validate("limit_predict_batches");
  TORCHBUS_CHECK(fast_dev_run_ >= 0, ConfigError,
                 "fast_dev_run must be >= 0 (batches of training and of validation; 0: off), got ",
                 fast_dev_run_);
  TORCHBUS_CHECK(num_sanity_val_steps_ >= -1, ConfigError,
                 "num_sanity_val_steps must be >= 0 (0: none), or -1 for a whole validation "
                 "pass, got ",
                 num_sanity_val_steps_);
}

std::int64_t TrainerOptions::accumulate_grad_batches_at(std::int64_t epoch) const {
  auto entry = accumulation_schedule_.upper_bound(epoch);
  if (entry == accumulation_schedule_.begin()) return accumulate_grad_batches_;
  return (--entry)->second;
}

TrainerOptions TrainerOptions::effective() const {
  if (fast_dev_run_ == 0) return *this;
  auto options = *this;
  options.max_epochs(1)
      .max_steps(-1)
      .min_epochs(0)
      .min_steps(0)
      .val_every_n_epochs(1)
      .val_every_n_steps(0)
      .val_every_epoch_fraction(0.0)
      .limit_train_batches(BatchLimit::count(fast_dev_run_))
      .limit_val_batches(BatchLimit::count(fast_dev_run_))
      .limit_test_batches(BatchLimit::count(fast_dev_run_))
      .limit_predict_batches(BatchLimit::count(fast_dev_run_))
      .num_sanity_val_steps(0);
  return options;
}

}  // namespace torchbus
