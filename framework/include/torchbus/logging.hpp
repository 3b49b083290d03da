#pragma once

/// \file
/// The spdlog logger all framework and built-in callback output goes through.

#include <memory>

namespace spdlog {
class logger;
}

namespace torchbus {

/// The `torchbus` logger (created on first use, writing to stdout). Configure its level or sinks
/// like any spdlog logger.
std::shared_ptr<spdlog::logger> logger();

}  // namespace torchbus
