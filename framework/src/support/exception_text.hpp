#pragma once

/// \file
/// What an exception says, for logs and State::error_message (private to torchbus_framework).

#include <exception>
#include <string>

namespace torchbus::detail {

/// The message of `error` (its what()), or "a non-standard exception" when it is no
/// std::exception; "" for a null pointer.
std::string exception_text(const std::exception_ptr& error);

}  // namespace torchbus::detail
