#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <torchbus/logging.hpp>

#include "support/log_rank.hpp"

namespace torchbus {
namespace {

/// The torchbus logger, and whether torchbus created it (then its sink and format are its own).
struct TorchbusLogger {
  std::shared_ptr<spdlog::logger> logger;
  bool own = false;
};

const TorchbusLogger& torchbus_logger() {
  static const TorchbusLogger instance = [] {
    if (auto existing = spdlog::get("torchbus")) return TorchbusLogger{existing, false};
    return TorchbusLogger{spdlog::stdout_color_mt("torchbus"), true};
  }();
  return instance;
}

}  // namespace

std::shared_ptr<spdlog::logger> logger() {
  return torchbus_logger().logger;
}

namespace detail {

void set_log_rank(std::optional<int> rank) {
  static bool prefixed = false;  // the prefix is set: no rank goes back to spdlog's default
  const auto& instance = torchbus_logger();
  if (!instance.own || (!rank && !prefixed)) return;
  instance.logger->set_pattern(rank ? fmt::format("[%H:%M:%S.%e] [rank {}] [%l] %v", *rank)
                                    : std::string("%+"));
  prefixed = rank.has_value();
}

}  // namespace detail
}  // namespace torchbus
