#pragma once

// summary.json: what a run did, written atomically at its end.

#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace train {

/// A flat JSON object built key by key, in insertion order.
class JsonObject {
 public:
  /// Adds a string value.
  JsonObject& add(const std::string& key, const std::string& value);
  /// Adds a number (non-finite numbers become null).
  JsonObject& add(const std::string& key, double value);
  /// Adds an integer.
  JsonObject& add(const std::string& key, std::int64_t value);
  /// Adds a nested object.
  JsonObject& add(const std::string& key, const JsonObject& value);
  /// The object as JSON text.
  std::string str() const;
  /// Each member's key and value as plain text (strings without quotes), e.g. for a report.
  std::vector<std::pair<std::string, std::string>> text_members() const;

 private:
  struct Member {
    std::string key;
    std::string json;  // the encoded value
    std::string text;  // the value as plain text
  };
  JsonObject& add_member(const std::string& key, std::string json, std::string text);

  std::vector<Member> members_;
};

/// SHA-256 over every parameter and buffer of `module` (names, shapes, dtypes and bytes), in
/// registration order: equal for two runs exactly when their final weights are bitwise equal.
std::string parameters_sha256(const torch::nn::Module& module);

}  // namespace train
