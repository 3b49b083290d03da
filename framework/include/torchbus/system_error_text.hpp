#pragma once

/// \file
/// The text of an errno value, for error messages that name what the system refused.

#include <string>

namespace torchbus {

/// strerror's text of `error_number` (thread-safe), "unknown error" for 0 (a failure that set no
/// errno), e.g. `system_error_text(errno)` right after a failed call.
std::string system_error_text(int error_number);

}  // namespace torchbus
