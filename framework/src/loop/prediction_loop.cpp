#include <torch/torch.h>
#include <torchbus/error.hpp>
#include <torchbus/tensor_names.hpp>

#include "loop/autocast_scope.hpp"
#include "loop/mode_guard.hpp"
#include "loop/prediction_loop.hpp"
#include "state/writer.hpp"

namespace torchbus {

void PredictionLoop::run(BatchSource& data, std::int64_t batch_limit, std::vector<Output>* kept) {
  auto& state = context_.state;
  auto& events = context_.events;
  const c10::InferenceMode inference;
  const ModeGuard mode(context_.module);
  context_.module.eval();
  detail::StateWriter::set_training(state, false);
  std::int64_t batch_index = 0;
  detail::StateWriter::publish_prediction(state, batch_index);
  events.open(Event::PredictStart, Event::PredictEnd);
  data.start_epoch(0);
  Batch batch;
  const CurrentBatchScope batch_scope(state);
  Output output;
  while ((batch_limit < 0 || batch_index < batch_limit) && data.next(batch)) {
    detail::StateWriter::set_cancelled(state, false);
    detail::StateWriter::publish_prediction(state, batch_index);
    move_to_device(batch, context_);
    detail::StateWriter::set_current_batch(state, batch);
    events.open(Event::PredictBatchStart, Event::PredictBatchEnd);
    output = Output();
    if (!state.cancelled) {
      events.run_step([&] {
        const detail::AutocastScope autocast(context_.options.precision(), state.device.type());
        output = context_.hooks.predict_step(batch);
      });
    }
    if (!state.cancelled) {
      for (const auto& [name, tensor] : output.named()) state.tensors.set(name, tensor);
      state.tensors.set(tensor_names::kOutput, output.main());
      state.set_batch_output(output.main());
      if (kept != nullptr) kept->push_back(output);
    }
    events.close();  // PredictBatchEnd
    state.tensors.clear(Scope::Batch);
    detail::StateWriter::clear_batch(state);
    ++batch_index;
  }
  TORCHBUS_CHECK(batch_index > 0, DataError,
                 "the predict data yielded no batches; expected at least one batch");
  events.close();  // PredictEnd
  detail::StateWriter::set_training(state, true);
}

}  // namespace torchbus
