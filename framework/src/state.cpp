#include <torchbus/state.hpp>

namespace torchbus {

void State::request_stop(std::string reason) {
  if (stop_requested_) return;
  stop_requested_ = true;
  stop_reason_ = std::move(reason);
}

void State::clear_stop() noexcept {
  stop_requested_ = false;
  stop_reason_.clear();
}

}  // namespace torchbus
