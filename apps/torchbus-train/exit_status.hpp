#pragma once

// How torchbus-train ends: its exit codes, and the code and message each kind of failure ends the
// process with (docs/getting-started.md has the table).

#include <torchbus/error.hpp>

#include <exception>
#include <stdexcept>
#include <string>

namespace train {

inline constexpr int kExitFailed = 1;        ///< a runtime failure
inline constexpr int kExitUsage = 2;         ///< command-line usage, found before training
inline constexpr int kExitSignalBase = 128;  ///< 128 + N after stop signal N

/// A command-line problem found before training: exit 2 with the --help hint.
class UsageError : public torchbus::ConfigError {
 public:
  using torchbus::ConfigError::ConfigError;
};

/// Ends start-up with exit code `code`: a stop signal (already logged, so its message is empty) or
/// another rank's failure (the message names it).
class StartupExit : public std::runtime_error {
 public:
  /// Exits with `code`, printing `message` unless it is empty.
  StartupExit(int code, const std::string& message);
  /// The exit code.
  int code() const noexcept { return code_; }

 private:
  int code_;
};

/// The exit code `error` ends the process with: 2 for a ConfigError before training (a
/// UsageError, a flag combination, the launcher's variables), StartupExit's own, else 1.
int exit_code_of(const std::exception_ptr& error, bool training_started);

/// The error's message: what() of torchbus's errors, the first line of others (LibTorch's carry
/// a stack trace).
std::string reason_of(const std::exception_ptr& error);

/// What the process prints on standard error for `error`, ending with a newline ("" for none).
std::string failure_text(const std::exception_ptr& error, bool training_started);

}  // namespace train
