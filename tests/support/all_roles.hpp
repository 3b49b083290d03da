#pragma once

// Test support: every Role, in the order the bus runs them.

#include <torchbus/role.hpp>

#include <array>

namespace torchbus::testing {

/// Every value of Role, in the order of the bus's phases.
constexpr std::array<Role, 8> kAllRoles{Role::WeightAveraging, Role::Metrics, Role::Unassigned,
                                        Role::Scheduler,       Role::Monitor, Role::Logger,
                                        Role::Checkpoint,      Role::Report};

}  // namespace torchbus::testing
