#include "accuracy.hpp"

#include <torch/torch.h>
#include <torchbus/distributed.hpp>

#include <utility>

namespace train {

Accuracy::Accuracy() : Callback("accuracy") {
  set_role(torchbus::Role::Metrics);
}

void Accuracy::Tally::reset() {
  correct.reset();
  seen = 0;
}

void Accuracy::Tally::add(const torchbus::State& state) {
  const auto& output = state.batch_output();
  const auto& target = state.batch_target();
  if (!output.defined() || !target.defined() || state.cancelled) return;
  const auto hits = output.detach().argmax(1).eq(target).sum();
  correct = correct.defined() ? correct + hits : hits;
  seen += target.size(0);
}

void Accuracy::Tally::record(torchbus::State& state, std::string_view name) {
  auto* group = state.process_group;
  if (group == nullptr || group->world_size() == 1) {
    if (seen > 0) state.record_metric(name, correct.to(torch::kDouble) / static_cast<double>(seen));
    return;
  }
  // While a failure unwinds, the other ranks are not at this point: no collective, and no figure
  // of this rank's shard alone that would pass for the run's.
  if (state.error) return;
  // Each rank counted its shard: the accuracy is over the samples of every rank.
  auto totals = torch::stack({correct.defined() ? correct.to(torch::kCPU, torch::kDouble)
                                                : torch::zeros({}, torch::kDouble),
                              torch::tensor(static_cast<double>(seen), torch::kDouble)});
  group->all_reduce(totals);
  const auto all_seen = totals[1].item<double>();
  if (all_seen > 0) state.record_metric(name, totals[0] / all_seen);
}

void Accuracy::save_state(torch::serialize::OutputArchive& archive) const {
  archive.write("train_correct", train_.correct.defined() ? train_.correct.to(torch::kCPU)
                                                          : torch::zeros({}, torch::kLong));
  archive.write("train_seen", c10::IValue(train_.seen));
}

void Accuracy::load_state(torch::serialize::InputArchive& archive) {
  train_.reset();
  // A checkpoint of an earlier torchbus-train holds no tally: the epoch counts from the resume.
  at::Tensor correct;
  c10::IValue seen;
  if (!archive.try_read("train_correct", correct) || !archive.try_read("train_seen", seen)) return;
  train_.correct = correct;
  train_.seen = seen.toInt();
}

void Accuracy::on_load_checkpoint(const torchbus::Checkpoint& checkpoint) {
  resumed_mid_epoch_ = checkpoint.batch_in_epoch > 0 && checkpoint.world_size <= 1;
  if (!resumed_mid_epoch_) train_.reset();
}

void Accuracy::on_epoch_start(torchbus::State& state) {
  // A one-process checkpoint's tally covers every sample of the epoch so far. Resumed on several
  // ranks, rank 0 goes on from it and the others from zero: the epoch end's sum over the ranks
  // is then the tally of the whole epoch.
  const auto* group = state.process_group;
  const bool first_rank = group == nullptr || group->rank() == 0;
  if (std::exchange(resumed_mid_epoch_, false) && first_rank) return;
  train_.reset();
}
void Accuracy::on_batch_end(torchbus::State& state) {
  train_.add(state);
}
void Accuracy::on_epoch_end(torchbus::State& state) {
  train_.record(state, "train_accuracy");
}
void Accuracy::on_eval_start(torchbus::State&) {
  eval_.reset();
}
void Accuracy::on_eval_batch_end(torchbus::State& state) {
  eval_.add(state);
}
void Accuracy::on_eval_end(torchbus::State& state) {
  eval_.record(state, std::string(state.metric_prefix()) + "accuracy");  // val_, test_
}

}  // namespace train
