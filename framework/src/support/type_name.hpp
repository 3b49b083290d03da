#pragma once

// The readable name of a C++ type, for messages and default names. Private to the framework.

#include <string>
#include <typeinfo>

namespace torchbus {

/// The demangled name of `type`, e.g. "std::vector<int, std::allocator<int> >" (the mangled name
/// when it cannot be demangled).
std::string type_name(const std::type_info& type);

}  // namespace torchbus
