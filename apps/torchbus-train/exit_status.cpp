#include "exit_status.hpp"

namespace train {

StartupExit::StartupExit(int code, const std::string& message)
    : std::runtime_error(message), code_(code) {}

int exit_code_of(const std::exception_ptr& error, bool training_started) {
  try {
    std::rethrow_exception(error);
  } catch (const StartupExit& exit) {
    return exit.code();
  } catch (const torchbus::ConfigError&) {
    return training_started ? kExitFailed : kExitUsage;
  } catch (...) {
    return kExitFailed;
  }
}

std::string reason_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const torchbus::Error& failure) {
    return failure.what();
  } catch (const StartupExit& exit) {
    return exit.what();
  } catch (const std::exception& failure) {
    return torchbus::detail::first_line(failure);
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

std::string failure_text(const std::exception_ptr& error, bool training_started) {
  const auto reason = reason_of(error);
  const int code = exit_code_of(error, training_started);
  try {
    std::rethrow_exception(error);
  } catch (const StartupExit&) {
    return reason.empty() ? std::string() : "torchbus-train: " + reason + "\n";
  } catch (...) {
    if (code == kExitUsage) {
      return "torchbus-train: " + reason + "\nRun 'torchbus-train --help' for usage.\n";
    }
    return "torchbus-train: run failed: " + reason + "\n";
  }
}

}  // namespace train
