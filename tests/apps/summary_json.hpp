#pragma once

// Reading torchbus-train's summary.json back (nlohmann-json): the values of its top-level keys.

#include <nlohmann/json.hpp>

#include <cmath>
#include <string>

namespace torchbus::testing {

/// The value under `key` in the JSON object `json` (null when absent, or when `json` is empty:
/// no file). Throws nlohmann::json::exception when `json` is not a JSON object.
inline nlohmann::json json_value(const std::string& json, const std::string& key) {
  if (json.empty()) return nullptr;
  return nlohmann::json::parse(json).value(key, nlohmann::json());
}

/// The number under `key` in the JSON object `json` (NaN when absent or null).
inline double json_number(const std::string& json, const std::string& key) {
  const auto value = json_value(json, key);
  return value.is_null() ? std::nan("") : value.get<double>();
}

/// The string under `key` in the JSON object `json` (empty when absent).
inline std::string json_string(const std::string& json, const std::string& key) {
  const auto value = json_value(json, key);
  return value.is_null() ? std::string() : value.get<std::string>();
}

}  // namespace torchbus::testing
