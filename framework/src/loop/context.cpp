#include <torchbus/error.hpp>

#include "loop/autocast_scope.hpp"
#include "loop/context.hpp"

namespace torchbus {

void move_to_device(Batch& batch, const LoopContext& context) {
  const auto device = context.state.device;
  // Onto a GPU without blocking the host: from page-locked memory (a loader's pin_memory) the copy
  // is queued on the device's stream, ahead of the step's kernels; from ordinary memory it is
  // synchronous as before. (Copies to the CPU stay blocking: the host reads them next.)
  const bool non_blocking = !device.is_cpu();
  batch.to(device, non_blocking);  // every field: the pair, the named tensors, the lists
  if (context.options.channels_last() && batch.data.defined() && batch.data.dim() == 4) {
    batch.data = batch.data.contiguous(at::MemoryFormat::ChannelsLast);
  }
}

at::Tensor call_step(const LoopContext& context, c10::function_ref<at::Tensor(Batch&)> step,
                     Batch& batch, const char* what) {
  auto& state = context.state;
  at::Tensor loss;
  const bool returned = context.events.run_step([&] {
    const detail::AutocastScope autocast(context.options.precision(), state.device.type());
    loss = step(batch);
  });
  if (!returned || state.cancelled) return {};  // a step may also set `cancelled` itself
  TORCHBUS_CHECK(loss.defined() && loss.numel() == 1, DataError, "the ", what,
                 " must return a scalar loss (one element), got ",
                 loss.defined() ? detail::concat("shape ", loss.sizes()) : "an undefined tensor",
                 "; reduce it, e.g. with .mean()");
  return loss.dim() == 0 ? loss : loss.reshape({});
}

}  // namespace torchbus
