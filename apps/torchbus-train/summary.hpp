#pragma once

// summary.json: what a run did, written atomically at its end.

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

namespace train {

/// A JSON object that keeps its members in insertion order, as summary.json lists them.
using JsonObject = nlohmann::ordered_json;

/// Each member of `object` with its value as plain text (strings without quotes), e.g. for a
/// report.
std::vector<std::pair<std::string, std::string>> text_members(const JsonObject& object);

/// SHA-256 over every parameter and buffer of `module` (names, shapes, dtypes and bytes), in
/// registration order: equal for two runs exactly when their final weights are bitwise equal.
std::string parameters_sha256(const torch::nn::Module& module);

}  // namespace train
