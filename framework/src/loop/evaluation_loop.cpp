#include <torch/torch.h>
#include <torchbus/error.hpp>

#include <torchbus/metric_names.hpp>

#include "loop/evaluation_loop.hpp"
#include "loop/mode_guard.hpp"
#include "state/writer.hpp"

namespace torchbus {

void EvaluationLoop::publish(State& state) const noexcept {
  detail::StateWriter::publish_evaluation(state, batch_);
}

at::Tensor EvaluationLoop::run(BatchSource& data, std::int64_t batch_limit,
                               std::string_view loss_metric) {
  auto& state = context_.state;
  auto& events = context_.events;
  torch::NoGradGuard no_grad;
  const ModeGuard mode(context_.module);
  context_.module.eval();
  detail::StateWriter::set_training(state, false);
  batch_ = 0;
  ended_ = false;
  events.open(Event::EvalStart, Event::EvalEnd);
  data.start_epoch(0);
  at::Tensor loss_sum;
  std::int64_t samples = 0;
  Batch batch;
  const CurrentBatchScope batch_scope(state);
  while ((batch_limit < 0 || batch_ < batch_limit) && data.next(batch)) {
    detail::StateWriter::set_cancelled(state, false);
    move_to_device(batch, context_);
    detail::StateWriter::set_current_batch(state, batch);
    events.open(Event::EvalBatchStart, Event::EvalBatchEnd);
    const auto loss = state.cancelled
                          ? at::Tensor()
                          : call_step(
                                context_, [&](Batch& b) { return context_.hooks.eval_step(b); },
                                batch, "eval step");
    if (!state.cancelled) {
      detail::StateWriter::set_batch(state, loss, batch.target);
      const auto size = batch.samples(context_.options.sample_field());
      const auto weighted = loss.detach() * static_cast<double>(size);
      loss_sum = loss_sum.defined() ? loss_sum + weighted : weighted;
      samples += size;
    }
    events.close();  // EvalBatchEnd
    state.tensors.clear(Scope::Batch);
    detail::StateWriter::clear_batch(state);
    ++batch_;
  }
  TORCHBUS_CHECK(batch_ > 0, DataError,
                 "the evaluation data yielded no batches; expected at least one batch");
  if (sync_.active()) {
    // Each rank evaluated its shard: the mean is over every rank's samples.
    auto totals = torch::stack(
        {loss_sum.defined() ? loss_sum.to(torch::kDouble) : torch::zeros({}, torch::kDouble),
         torch::tensor(static_cast<double>(samples), torch::kDouble)});
    sync_.all_reduce(totals);
    samples = static_cast<std::int64_t>(totals[1].item<double>());
    loss_sum = totals[0];
  }
  at::Tensor mean_loss;
  if (samples > 0) {
    mean_loss = loss_sum / static_cast<double>(samples);
    events.publish_progress();  // recorded at the fit's step and epoch
    state.record_metric(loss_metric, mean_loss);
  }
  ended_ = true;
  events.close();  // EvalEnd
  detail::StateWriter::set_training(state, true);
  return mean_loss;
}

}  // namespace torchbus
