#include "accuracy.hpp"

#include <torch/torch.h>

namespace train {

Accuracy::Accuracy() : Callback("accuracy", -100) {}

void Accuracy::Tally::reset() {
  correct.reset();
  seen = 0;
}

void Accuracy::Tally::add(const torchbus::State& state) {
  const auto* output = state.tensors.find("output");
  const auto* target = state.tensors.find("target");
  if (output == nullptr || target == nullptr || state.cancelled) return;
  const auto hits = output->detach().argmax(1).eq(*target).sum();
  correct = correct.defined() ? correct + hits : hits;
  seen += target->size(0);
}

void Accuracy::Tally::record(torchbus::State& state, std::string_view name) {
  if (seen > 0) state.record_metric(name, correct.to(torch::kDouble) / static_cast<double>(seen));
}

void Accuracy::on_epoch_start(torchbus::State&) {
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
  eval_.record(state, "val_accuracy");
}

}  // namespace train
