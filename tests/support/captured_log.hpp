#pragma once

// Test support: captures what torchbus::logger() writes while a scope lives.

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <torchbus/logging.hpp>

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace torchbus::testing {

/// Captures what torchbus::logger() writes while it lives, as "level|message" lines.
class CapturedLog {
 public:
  CapturedLog() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(stream_)) {
    sink_->set_pattern("%l|%v");
    logger()->sinks().push_back(sink_);
  }
  ~CapturedLog() {
    auto& sinks = logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;

  /// Messages logged at `level` ("info", "warning", ...) that start with `prefix`.
  std::vector<std::string> messages(const std::string& level,
                                    const std::string& prefix = "") const {
    std::vector<std::string> out;
    std::istringstream in(stream_.str());
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(level + "|" + prefix, 0) == 0) out.push_back(line.substr(level.size() + 1));
    }
    return out;
  }

 private:
  std::ostringstream stream_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

}  // namespace torchbus::testing
