#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <torchbus/logging.hpp>

namespace torchbus {

std::shared_ptr<spdlog::logger> logger() {
  static const std::shared_ptr<spdlog::logger> instance = [] {
    if (auto existing = spdlog::get("torchbus")) return existing;
    return spdlog::stdout_color_mt("torchbus");
  }();
  return instance;
}

}  // namespace torchbus
