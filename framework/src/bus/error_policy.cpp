#include <torchbus/error.hpp>
#include <torchbus/error_policy.hpp>

namespace torchbus {

ErrorPolicy ErrorPolicy::disable(int retries) {
  TORCHBUS_CHECK(retries >= 0, ConfigError, "ErrorPolicy::disable: retries must be >= 0, got ",
                 retries);
  return ErrorPolicy(true, retries);
}

ErrorPolicy default_error_policy(Role role) noexcept {
  return role == Role::Logger || role == Role::Report ? ErrorPolicy(true, 0)
                                                      : ErrorPolicy::propagate();
}

}  // namespace torchbus
