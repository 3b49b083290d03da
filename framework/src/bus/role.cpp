#include <torchbus/role.hpp>

namespace torchbus {

std::string_view to_string(Role role) noexcept {
  switch (role) {
    case Role::WeightAveraging:
      return "WeightAveraging";
    case Role::Metrics:
      return "Metrics";
    case Role::Unassigned:
      return "Unassigned";
    case Role::Scheduler:
      return "Scheduler";
    case Role::Monitor:
      return "Monitor";
    case Role::Logger:
      return "Logger";
    case Role::Checkpoint:
      return "Checkpoint";
    case Role::Report:
      return "Report";
  }
  return "Unassigned";
}

}  // namespace torchbus
