#pragma once

// Test support: a callback that records every event it receives, and a helper that subscribes a
// recording lambda to every built-in event of a bus.

#include <torchbus/torchbus.hpp>

#include <string>
#include <vector>

namespace torchbus::testing {

/// Overrides every hook and appends the event's name to `events`.
class RecordingCallback : public Callback {
 public:
  explicit RecordingCallback(std::string name = "recorder") : Callback(std::move(name)) {}
  std::vector<std::string> events;

#define TORCHBUS_RECORD_HOOK(Name, name) \
  void on_##name(State&) override {      \
    events.emplace_back(#Name);          \
  }
  TORCHBUS_FOR_EACH_EVENT(TORCHBUS_RECORD_HOOK)
#undef TORCHBUS_RECORD_HOOK
};

/// Joins event names with spaces, for readable sequence comparisons.
inline std::string joined(const std::vector<std::string>& events) {
  std::string out;
  for (const auto& event : events) out += (out.empty() ? "" : " ") + event;
  return out;
}

}  // namespace torchbus::testing
