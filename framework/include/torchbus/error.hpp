#pragma once

/// \file
/// The torchbus exception family and the TORCHBUS_CHECK macro.

#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace torchbus {

/// Root of every error torchbus throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A bad option, flag, name or registration.
class ConfigError : public Error {
 public:
  using Error::Error;
};

/// A checkpoint that cannot be written, read or applied.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

/// Data that does not fit: an empty loader, a wrong shape, a malformed file.
class DataError : public Error {
 public:
  using Error::Error;
};

/// A failure of the process group: rendezvous, collectives, a rank that left.
class DistributedError : public Error {
 public:
  using Error::Error;
};

namespace detail {
/// The first line of an exception's message, without LibTorch's backtrace.
std::string first_line(const std::exception& error);

/// Concatenates streamable values into one message.
template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

/// `count` and `noun`, plural unless `count` is 1: "1 rank", "2 ranks" (nouns that take an "s").
inline std::string count_of(long long count, const std::string& noun) {
  return std::to_string(count) + ' ' + noun + (count == 1 ? "" : "s");
}

/// "a, b, c", or "none" for an empty list: the names an error message offers instead.
inline std::string join_or_none(const std::vector<std::string>& names) {
  if (names.empty()) return "none";
  std::string joined;
  for (const auto& name : names) {
    if (!joined.empty()) joined += ", ";
    joined += name;
  }
  return joined;
}
}  // namespace detail

}  // namespace torchbus

/// Throws `ErrorType` with the streamed message parts when `condition` is false, e.g.
/// `TORCHBUS_CHECK(k >= 1, torchbus::ConfigError, "accumulate_grad_batches must be >= 1, got ",
/// k);`
#define TORCHBUS_CHECK(condition, ErrorType, ...)               \
  do {                                                          \
    if (!(condition)) {                                         \
      throw ErrorType(::torchbus::detail::concat(__VA_ARGS__)); \
    }                                                           \
  } while (false)
