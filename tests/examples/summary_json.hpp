#pragma once

// Reading torchbus-train's summary.json back: the values of its flat keys.

#include <cmath>
#include <regex>
#include <string>

namespace torchbus::testing {

/// The number stored under `key` in a flat JSON text (NaN when absent or null).
inline double json_number(const std::string& json, const std::string& key) {
  std::smatch match;
  const std::regex pattern("\"" + key + "\": (-?[0-9.eE+-]+)");
  return std::regex_search(json, match, pattern) ? std::stod(match[1]) : std::nan("");
}

/// The string stored under `key` in a flat JSON text, as written (empty when absent).
inline std::string json_string(const std::string& json, const std::string& key) {
  std::smatch match;
  const std::regex pattern("\"" + key + "\": \"([^\"]*)\"");
  return std::regex_search(json, match, pattern) ? std::string(match[1]) : std::string();
}

}  // namespace torchbus::testing
