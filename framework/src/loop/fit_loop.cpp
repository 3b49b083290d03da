#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>

#include "loop/fit_loop.hpp"
#include "state/writer.hpp"

#include <algorithm>

namespace torchbus {

void FitLoop::prepare(BatchSource& train, BatchSource* validation) {
  const auto& options = context_.options;
  auto& state = context_.state;
  train_batch_limit_ =
      options.limit_train_batches().batches_per_pass(train.size(), "limit_train_batches");
  val_batch_limit_ = validation ? options.limit_val_batches().batches_per_pass(validation->size(),
                                                                               "limit_val_batches")
                                : -1;
  epoch_batches_ = train.size();
  val_batch_interval_ = 0;
  if (const auto fraction = options.val_every_epoch_fraction(); fraction > 0.0 && validation) {
    auto batches = train_batch_limit_ >= 0 ? std::optional(train_batch_limit_) : epoch_batches_;
    if (batches && epoch_batches_) batches = std::min(*batches, *epoch_batches_);
    TORCHBUS_CHECK(batches.has_value(), ConfigError, "val_every_epoch_fraction ", fraction,
                   " needs the epoch's batches: the training data does not tell its size; give "
                   "limit_train_batches as a count, or val_every_n_steps");
    // As Lightning (loops/fit_loop.py:317-318): int(batches × fraction), at least 1.
    val_batch_interval_ = std::max<std::int64_t>(
        1, static_cast<std::int64_t>(static_cast<double>(*batches) * fraction));
  }
  batch_samples_ = 0;
  resharded_from_ = 0;
  expected_batch_samples_ = 0;
  written_position_.reset();
  check_deferred_in_epoch_ = -1;
  counters_ = FitCounters{};
  context_.events.publish_progress();
  detail::StateWriter::set_validation_follows(state, false);
  state.metrics.clear();
  state.tensors.clear_all();
  detail::StateWriter::clear_all(state);
  detail::StateWriter::set_sanity_checking(state, false);
  detail::StateWriter::set_epoch_cut_short(state, false);
  state.clear_stop();  // a resume restores the stop that ended the run, if one did
  resume_skip_ = 0;    // and the batches of its epoch already trained
  validated_step_ = -1;
  validating_ = false;
  epoch_finished_ = false;
  epoch_trained_ = false;
  series_before_epoch_end_.reset();
  series_after_epoch_end_.reset();
  validated_before_epoch_end_ = -1;
  order_drawn_ = false;
}

void FitLoop::run(BatchSource& train, BatchSource* validation, bool fresh) {
  if (sync_.group() != nullptr) {
    sync_.start(context_.module, step_.phase_parameters());
    context_.events.fire(Event::ProcessGroupStart);
  }
  if (fresh && validation && context_.options.num_sanity_val_steps() != 0) {
    run_sanity_check(*validation);
  }
  while (!finished()) run_epoch(train, validation);
}

bool FitLoop::step_limit_reached() const noexcept {
  const auto max_steps = context_.options.max_steps();
  return max_steps >= 0 && counters_.step >= max_steps;
}

bool FitLoop::finished() const noexcept {
  const auto max_epochs = context_.options.max_epochs();
  return sync_.stopping() || step_limit_reached() ||
         (max_epochs >= 0 && counters_.epoch >= max_epochs);
}

// A validation of num_sanity_val_steps batches before training. Nothing of it remains: the metric
// history and the generators are put back, and subscribers that do not run during it skip its
// events. An exception escaping it leaves state.sanity_checking set for Exception's subscribers.
void FitLoop::run_sanity_check(BatchSource& validation) {
  auto& state = context_.state;
  const auto steps = context_.options.num_sanity_val_steps();
  const auto limit = steps < 0              ? val_batch_limit_
                     : val_batch_limit_ < 0 ? steps
                                            : std::min(steps, val_batch_limit_);
  const MetricHistory metrics = state.metrics;
  const auto generators = RngState::capture();
  detail::StateWriter::set_sanity_checking(state, true);
  evaluation_.run(validation, limit);
  detail::StateWriter::set_sanity_checking(state, false);
  detail::StateWriter::restore_metrics(state, metrics);
  state.tensors.clear(Scope::Step);
  state.tensors.clear(Scope::Epoch);
  generators.restore();
}

void FitLoop::run_epoch(BatchSource& train, BatchSource* validation) {
  auto& state = context_.state;
  const auto& options = context_.options;
  drop_unfinished_epoch_end();
  counters_.batch_in_epoch = 0;
  detail::StateWriter::set_training(state, true);
  epoch_finished_ = false;
  detail::StateWriter::set_accumulation(state, options.accumulate_grad_batches_at(counters_.epoch));
  context_.events.open(Event::EpochStart, Event::EpochEnd);
  start_epoch(train);
  bool more = true;  // the data has batches left
  while (more && !sync_.stopping() && !step_limit_reached() && !state.epoch_end_requested()) {
    more = fill_window(train);
    if (window_used_ == 0) {
      TORCHBUS_CHECK(counters_.batch_in_epoch > 0, DataError,
                     "the training data yielded no batches in epoch ", counters_.epoch,
                     "; expected at least one batch per epoch");
      break;
    }
    const auto steps_before = counters_.step;
    run_step(validation != nullptr);
    if (state.validation_follows) {
      validate(*validation);
      detail::StateWriter::set_validation_follows(state, false);
      sync_.agree_on_stop();
    } else if (counters_.step != steps_before && counters_.step == options.min_steps()) {
      // The step that reaches min_steps may have released a held early stop: agreed at once (a
      // collective every rank makes at this step), so that every rank stops after it as one
      // process does, not after the next step's gradients.
      sync_.agree_on_stop();
    }
  }
  // Ended by its data or by request; a stop or max_steps leaves it unfinished.
  const bool completed = !more || state.epoch_end_requested();
  if (!completed) mark_unfinished_epoch_end();
  epoch_trained_ = completed;  // State::epochs_completed counts it from here
  detail::StateWriter::set_epoch_cut_short(state, !completed);
  context_.events.publish_progress();  // the metrics are recorded at the loop's step and epoch
  for (const auto& loss : step_.loss_metrics()) {
    if (state.metrics.contains(loss.step) &&
        state.metrics.latest(loss.step).epoch == counters_.epoch) {
      state.record_metric(loss.epoch, state.metrics.epoch_mean(loss.step, counters_.epoch));
    }
  }
  // One validation per step's weights: the epoch's is not run when no step changed them since the
  // last validation (one after the epoch's last step, or an epoch that made no step), as Lightning
  // validates at most once after a batch.
  const auto every = options.val_every_n_epochs();
  if (validation && every > 0 && !sync_.stopping() && (counters_.epoch + 1) % every == 0 &&
      validated_step_ != counters_.step) {
    validate(*validation);
  }
  // An early stop held for min_epochs ends the run once the epoch that reaches them has been
  // validated (as Lightning's fit loop stops after it).
  detail::StateWriter::release_held_stop(state);
  // An epoch cut short by a stop or max_steps is not completed: a checkpoint taken now or at
  // ActionEnd continues it where it stopped.
  epoch_finished_ = completed;
  context_.events.close();  // EpochEnd
  detail::StateWriter::set_epoch_cut_short(state, false);
  sync_.agree_on_stop();
  epoch_finished_ = false;
  state.clear_epoch_end();
  state.tensors.clear(Scope::Epoch);
  if (completed) {
    ++counters_.epoch;
    counters_.batch_in_epoch = 0;
    order_drawn_ = false;
  }
  epoch_trained_ = false;
}

void FitLoop::validate(BatchSource& validation) {
  validating_ = true;
  evaluation_.run(validation, val_batch_limit_);
  validating_ = false;
  validated_step_ = counters_.step;
}

namespace {

/// The length of every series of `metrics`.
SeriesLengths lengths_of(const MetricHistory& metrics) {
  SeriesLengths lengths;
  for (auto& name : metrics.names()) {
    const auto length = static_cast<std::int64_t>(metrics.length(name));
    lengths.emplace_back(std::move(name), length);
  }
  return lengths;
}

}  // namespace

void FitLoop::mark_unfinished_epoch_end() {
  series_before_epoch_end_ = lengths_of(context_.state.metrics);
  series_after_epoch_end_.reset();
  validated_before_epoch_end_ = validated_step_;
}

void FitLoop::end_run() {
  if (series_before_epoch_end_ && !series_after_epoch_end_) {
    series_after_epoch_end_ = lengths_of(context_.state.metrics);
  }
}

std::vector<SeriesRange> FitLoop::epoch_end_points() const {
  const auto after =
      series_after_epoch_end_ ? *series_after_epoch_end_ : lengths_of(context_.state.metrics);
  std::vector<SeriesRange> points;
  for (const auto& [name, end] : after) {
    std::int64_t begin = 0;  // a series the end began has no point before it
    for (const auto& [marked, length] : *series_before_epoch_end_) {
      if (marked == name) begin = length;
    }
    if (end > begin) points.push_back(SeriesRange{name, begin, end});
  }
  return points;
}

void FitLoop::drop_unfinished_epoch_end() {
  if (!series_before_epoch_end_) return;
  // What the cut-short end recorded (its epoch means, a validation, what EpochEnd's and ActionEnd's
  // subscribers recorded) is recorded again by the continued epoch's end: CsvLogger drops its rows
  // alike. Points recorded since the resume (at ActionStart) stay.
  auto& metrics = context_.state.metrics;
  for (const auto& range : epoch_end_points()) {
    metrics.erase(range.name, static_cast<std::size_t>(range.begin),
                  static_cast<std::size_t>(range.end));
  }
  validated_step_ = validated_before_epoch_end_;
  series_before_epoch_end_.reset();
  series_after_epoch_end_.reset();
}

void FitLoop::start_epoch(BatchSource& train) {
  written_position_.reset();  // the rescaled position holds from here on
  if (!order_drawn_) {
    // Every rank draws the epoch's order (e.g. a DistributedSampler's permutation) from rank 0's
    // generator, so that the shards stay disjoint.
    sync_.share_cpu_generator();
    epoch_start_rng_ = RngState::capture_cpu();
    train.start_epoch(counters_.epoch);
    order_drawn_ = true;
    return;
  }
  // Resuming an epoch whose order was drawn (mid-epoch, or stopped before its first batch): draw
  // it as the interrupted run did, skip what it trained, then continue with the generator where
  // the checkpoint left it.
  const auto rng_now = RngState::capture_cpu();
  RngState::restore_cpu(epoch_start_rng_);
  train.start_epoch(counters_.epoch);
  const auto skipped = train.skip(resume_skip_);
  RngState::restore_cpu(rng_now);
  // Rescaled for another number of ranks, the position may pass the end of a shorter epoch: it
  // ends there, and the batches since the run began count only those the epoch has.
  TORCHBUS_CHECK(skipped == resume_skip_ || resharded_from_ > 0, DataError,
                 "cannot resume at batch ", resume_skip_, " of epoch ", counters_.epoch,
                 ": the training data yields only ", skipped, " batches now");
  counters_.global_batch -= resume_skip_ - skipped;
  counters_.batch_in_epoch = skipped;
  resume_skip_ = 0;
}

bool FitLoop::fill_window(BatchSource& train) {
  const auto& state = context_.state;
  window_used_ = 0;
  auto k = static_cast<std::size_t>(state.accumulate_grad_batches);
  // limit_train_batches ends the epoch like the end of the data: the last window may be short.
  bool limit_reached = false;
  if (train_batch_limit_ >= 0) {
    const auto left = static_cast<std::size_t>(
        std::max<std::int64_t>(0, train_batch_limit_ - counters_.batch_in_epoch));
    limit_reached = left <= k;
    k = std::min(k, left);
  }
  while (window_used_ < k) {
    if (window_.size() <= window_used_) window_.emplace_back();
    if (!train.next(window_[window_used_])) return false;
    ++window_used_;
  }
  return !limit_reached;
}

void FitLoop::count_batch_samples() {
  const auto& state = context_.state;
  std::int64_t per_rank = 0;  // the window's largest batch on this rank
  for (std::size_t i = 0; i < window_used_; ++i) {
    per_rank = std::max(per_rank, window_[i].samples(context_.options.sample_field()));
  }
  const auto samples = per_rank * state.world_size;
  if (expected_batch_samples_ > 0 && samples != expected_batch_samples_) {
    // A smaller batch may be its epoch's last (the check waits for the next batch once); a larger
    // one, or a smaller one known not to be the last, changes the global batch.
    const auto limit =
        train_batch_limit_ >= 0 ? std::optional<std::int64_t>(train_batch_limit_) : epoch_batches_;
    const auto window = static_cast<std::int64_t>(window_used_);
    const bool may_be_last = !limit || counters_.batch_in_epoch + window >= *limit;
    if (samples < expected_batch_samples_ && may_be_last &&
        check_deferred_in_epoch_ != counters_.epoch) {
      check_deferred_in_epoch_ = counters_.epoch;
      return;
    }
    const auto k = state.accumulate_grad_batches;
    TORCHBUS_CHECK(samples == expected_batch_samples_, DataError, "resumed on ",
                   detail::count_of(state.world_size, "rank"), " from a checkpoint of ",
                   resharded_from_, ": a step here takes ", samples * k, " samples (",
                   detail::count_of(state.world_size, "rank"), " x ", per_rank, " per batch x ", k,
                   " batches per step), the checkpoint's run took ", expected_batch_samples_ * k,
                   "; resuming on another number of ranks needs the same global batch (per-rank "
                   "batch x ranks x accumulate_grad_batches)");
  }
  expected_batch_samples_ = 0;
  batch_samples_ = std::max(batch_samples_, samples);
}

void FitLoop::run_step(bool can_validate) {
  auto& state = context_.state;
  const auto first_batch = counters_.batch_in_epoch;
  count_batch_samples();
  counters_.window_position = 0;
  step_.begin(window_used_, counters_.global_batch);
  context_.events.open(Event::StepStart, Event::StepEnd);
  for (std::size_t i = 0; i < window_used_; ++i) {
    counters_.window_position = static_cast<std::int64_t>(i);
    step_.run_batch(window_[i]);
    ++counters_.batch_in_epoch;
    ++counters_.global_batch;
    // An epoch end is honoured at the batch boundary: the window steps with what it has.
    if (state.epoch_end_requested() && i + 1 < window_used_) {
      step_.shorten(i + 1);
      break;
    }
  }
  const bool update = step_.finish();
  if (update) {
    ++counters_.step;
    context_.events.publish_progress();  // the losses are recorded at this step
    step_.record_losses();
    // An early stop held for min_steps is requested at the step that reaches them (StepEnd's
    // subscribers, a checkpoint, see it).
    detail::StateWriter::release_held_stop(state);
  }
  detail::StateWriter::set_update_skipped(state, !update);
  // Decided before StepEnd, so that its subscribers (checkpoints) know a validation follows. It
  // runs even if a stop was asked for: it belongs to this step, and every rank decides alike.
  const auto every = context_.options.val_every_n_steps();
  // A fraction of the epoch: the window held a batch whose 1-based index in the epoch is a
  // multiple of the interval (Lightning's (batch_idx + 1) % val_check_batch == 0,
  // loops/training_epoch_loop.py:560, decided per batch; here at the step that trains it).
  const auto interval = val_batch_interval_;
  const bool fraction_due =
      interval > 0 && counters_.batch_in_epoch / interval > first_batch / interval;
  detail::StateWriter::set_validation_follows(
      state,
      can_validate && update && ((every > 0 && counters_.step % every == 0) || fraction_due));
  context_.events.close();  // StepEnd
  detail::StateWriter::set_update_skipped(state, false);
  state.tensors.clear(Scope::Step);
  detail::StateWriter::set_step(state, at::Tensor());
  // Distributed, a stop requested from here on rides with the next step's gradients (or is agreed
  // after the next validation or EpochEnd): one collective per bucket and step, none else.
}

void FitLoop::publish(State& state) const noexcept {
  detail::StateWriter::publish_fit(state, counters_.epoch, counters_.step, counters_.batch_in_epoch,
                                   counters_.global_batch, counters_.window_position,
                                   counters_.epoch + (epoch_trained_ ? 1 : 0));
  step_.publish(state);
  evaluation_.publish(state);
}

FitProgress FitLoop::progress() const {
  const auto& state = context_.state;
  const bool next_epoch = epoch_finished_;
  const bool finished = state.stop_requested() && state.stop_kind() == StopKind::Finished;
  FitProgress progress;
  progress.epoch = next_epoch ? counters_.epoch + 1 : counters_.epoch;
  progress.step = counters_.step;
  // At the EpochStart of a resumed epoch, its batches trained are still to be skipped.
  progress.batch_in_epoch = next_epoch         ? 0
                            : resume_skip_ > 0 ? resume_skip_
                                               : counters_.batch_in_epoch;
  progress.global_batch = counters_.global_batch;
  progress.stop_reason = finished ? state.stop_reason() : std::string();
  progress.held_stop_reason = state.held_stop_reason();
  progress.world_size = state.world_size;
  progress.accumulate_grad_batches = state.accumulate_grad_batches;
  progress.batch_samples = batch_samples_;
  progress.order_drawn = order_drawn_ && !next_epoch;
  progress.epoch_start_rng = progress.order_drawn ? epoch_start_rng_ : RngState::capture_cpu();
  // A validation counts from its EvalEnd on, where its metrics are recorded: a checkpoint taken
  // earlier in it resumes to run it.
  progress.validated_step = validating_ && evaluation_.ended() ? counters_.step : validated_step_;
  // The end of an epoch cut short runs again when a resume continues the epoch.
  if (series_before_epoch_end_ && !next_epoch) {
    progress.epoch_end_points = epoch_end_points();
    progress.validated_step = validated_before_epoch_end_;
  }
  if (written_position_ && !next_epoch) {
    progress.batch_in_epoch = written_position_->batch_in_epoch;
    progress.global_batch = written_position_->global_batch;
    progress.world_size = written_position_->world_size;
    progress.batch_samples = written_position_->batch_samples;
    progress.accumulate_grad_batches = written_position_->accumulate_grad_batches;
    progress.written = written_position_;
  }
  return progress;
}

void FitLoop::save(torch::serialize::OutputArchive& archive,
                   const TrainerOptions& configured) const {
  const auto saved = progress();
  // k of the last epoch trained (mid-epoch: the current one), which a resume must agree on; before
  // a resume on other ranks continued its epoch, the checkpoint's own.
  const auto k_epoch =
      std::max<std::int64_t>(0, saved.batch_in_epoch > 0 ? saved.epoch : saved.epoch - 1);
  write_fit_position(archive, saved,
                     saved.written ? saved.written->accumulate_grad_batches
                                   : configured.accumulate_grad_batches_at(k_epoch),
                     k_epoch);
}

FitProgress FitLoop::read(detail::CheckpointReader& reader,
                          const TrainerOptions& configured) const {
  auto progress = read_fit_position(reader);
  // The k of the checkpoint's last epoch must agree; later epochs may change it (the schedule
  // says so). Checkpoints written before accumulation schedules had one k for every epoch.
  const auto k = progress.accumulate_grad_batches;
  const auto k_epoch = reader.optional_value("accumulate_grad_batches_epoch");
  // The epoch of that k: the checkpoint's own or the one before it (absent in older checkpoints).
  if (!k_epoch.isNone() &&
      (!k_epoch.isInt() || k_epoch.toInt() < 0 || k_epoch.toInt() > progress.epoch)) {
    reader.fail("has a malformed 'accumulate_grad_batches_epoch' entry: ", k_epoch,
                " (expected an epoch from 0 to the checkpoint's, ", progress.epoch, ")");
  }
  const auto k_here = k_epoch.isInt() ? configured.accumulate_grad_batches_at(k_epoch.toInt())
                                      : configured.accumulate_grad_batches();
  // Another number of ranks may step on the same global batch with another k.
  const auto ranks = progress.world_size;
  const auto ranks_here = static_cast<std::int64_t>(context_.state.world_size);
  const bool resharded = ranks > 0 && ranks != ranks_here;
  if (k != k_here && !resharded) {
    reader.fail("was written with accumulate_grad_batches ", k, "; this trainer uses ", k_here,
                k_epoch.isInt() ? detail::concat(" in epoch ", k_epoch.toInt(), " (counted from 0)")
                                : std::string(),
                " (the accumulation windows would differ; an accumulation_schedule may change k "
                "only for epochs after the checkpoint's)");
  }
  if (resharded) {
    // A batch count per rank means other samples once a step is split otherwise.
    if (k != k_here && !configured.limit_train_batches().is_all() &&
        !configured.limit_train_batches().needs_size()) {
      reader.fail("was written with accumulate_grad_batches ", k, " on ",
                  detail::count_of(ranks, "rank"), "; resuming on ", ranks_here, " with ", k_here,
                  " would change what limit_train_batches ",
                  configured.limit_train_batches().to_string(),
                  " (batches per rank) covers; give it as a fraction, or keep k");
    }
    progress.written = FitProgress::Written{progress.batch_in_epoch, progress.global_batch, ranks,
                                            progress.batch_samples, k};
    // The epoch continues after the steps it made (a short last one counted), however many
    // batches a step is made of here; past the data's end, the epoch is over.
    const auto steps = (progress.batch_in_epoch + k - 1) / k;
    const auto batches = steps * k_here;
    progress.global_batch += batches - progress.batch_in_epoch;
    progress.batch_in_epoch = batches;
    // A step keeps the checkpoint's global batch: each batch across the ranks holds G / k_here.
    const auto global = progress.batch_samples * k;
    if (global % k_here != 0) {
      reader.fail("holds steps of ", global, " samples (", detail::count_of(ranks, "rank"), " x ",
                  progress.batch_samples / ranks, " per batch x ", k, " batches); ", k_here,
                  " batches per step on ", detail::count_of(ranks_here, "rank"),
                  " cannot split that evenly");
    }
    progress.expected_batch_samples = global / k_here;
  }
  progress.epoch_start_rng = reader.tensor("epoch_start_rng");
  RngState(progress.epoch_start_rng, {}).check();  // restored when the epoch's order is drawn
  return progress;
}

void FitLoop::restore(const FitProgress& progress) {
  auto& state = context_.state;
  counters_ =
      FitCounters{progress.epoch, progress.step, progress.batch_in_epoch, progress.global_batch, 0};
  context_.events.publish_progress();
  resume_skip_ = progress.batch_in_epoch;
  const auto ranks_here = static_cast<std::int64_t>(context_.state.world_size);
  resharded_from_ =
      progress.world_size > 0 && progress.world_size != ranks_here ? progress.world_size : 0;
  expected_batch_samples_ = progress.expected_batch_samples;
  batch_samples_ = resharded_from_ > 0 ? 0 : progress.batch_samples;
  written_position_ = resharded_from_ > 0 ? progress.written : std::nullopt;
  check_deferred_in_epoch_ = -1;
  if (resharded_from_ > 0) {
    logger()->info(
        "resuming a checkpoint of {} on {}: epoch {} continues after its first {} batches per "
        "rank, each sample of the epoch's order used once{}",
        detail::count_of(resharded_from_, "rank"), ranks_here, progress.epoch,
        progress.batch_in_epoch,
        expected_batch_samples_ > 0 ? detail::concat(" (a batch across the ranks stays ",
                                                     expected_batch_samples_, " samples)")
                                    : std::string());
  }
  epoch_start_rng_ = progress.epoch_start_rng;
  order_drawn_ = progress.order_drawn;
  validated_step_ = progress.validated_step;
  series_before_epoch_end_.reset();
  series_after_epoch_end_.reset();
  if (const auto& points = progress.epoch_end_points) {
    series_before_epoch_end_.emplace();
    series_after_epoch_end_.emplace();
    for (const auto& range : *points) {
      series_before_epoch_end_->emplace_back(range.name, range.begin);
      series_after_epoch_end_->emplace_back(range.name, range.end);
    }
  }
  validated_before_epoch_end_ = progress.validated_step;
  state.clear_stop();
  if (!progress.stop_reason.empty()) state.request_stop(progress.stop_reason, StopKind::Finished);
  if (progress.held_stop_reason) state.request_early_stop(*progress.held_stop_reason);
}

}  // namespace torchbus
