#pragma once

// Writing CSV fields (RFC 4180). Private to the callbacks library.

#include <string>

namespace torchbus::detail {

/// A CSV field, quoted (RFC 4180) when it contains a separator, a quote or a line break.
std::string csv_field(const std::string& field);

}  // namespace torchbus::detail
