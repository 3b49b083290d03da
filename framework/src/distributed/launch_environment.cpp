#include <torchbus/error.hpp>
#include <torchbus/launch_environment.hpp>

#include <cerrno>
#include <cstdlib>
#include <limits>

namespace torchbus {
namespace {

/// The variable names one launcher uses.
struct LauncherVariables {
  Launcher launcher;
  const char* rank;
  const char* world_size;
  const char* local_rank;
};

constexpr LauncherVariables kLaunchers[] = {
    {Launcher::Torchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {Launcher::Mpirun, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK"},
    {Launcher::Slurm, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

int parse_int(const std::string& name, const std::string& text, int min, int max) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text.c_str(), &end, 10);
  TORCHBUS_CHECK(!text.empty() && end == text.c_str() + text.size() && errno == 0 && value >= min &&
                     value <= max,
                 ConfigError, "environment variable ", name, "='", text,
                 "' is not valid: expected an integer in [", min, ", ", max, "]");
  return static_cast<int>(value);
}

}  // namespace

std::string_view to_string(Launcher launcher) noexcept {
  switch (launcher) {
    case Launcher::None:
      return "none";
    case Launcher::Torchrun:
      return "torchrun";
    case Launcher::Mpirun:
      return "mpirun";
    case Launcher::Slurm:
      return "srun";
  }
  return "unknown";
}

LaunchEnvironment LaunchEnvironment::detect() {
  return from([](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    return value ? std::optional<std::string>(value) : std::nullopt;
  });
}

LaunchEnvironment LaunchEnvironment::from(const Lookup& lookup) {
  LaunchEnvironment environment;
  const LauncherVariables* found = nullptr;
  for (const auto& candidate : kLaunchers) {
    const bool has_rank = lookup(candidate.rank).has_value();
    const bool has_size = lookup(candidate.world_size).has_value();
    TORCHBUS_CHECK(
        has_rank == has_size, ConfigError, to_string(candidate.launcher),
        " variables are incomplete: ", has_size ? candidate.world_size : candidate.rank,
        " is set but ", has_size ? candidate.rank : candidate.world_size,
        " is not; a launcher sets both (the process's rank and the number of processes)");
    if (has_rank) {
      found = &candidate;
      break;
    }
  }
  if (!found) return environment;

  environment.launcher = found->launcher;
  constexpr int kMax = std::numeric_limits<int>::max();
  environment.world_size = parse_int(found->world_size, *lookup(found->world_size), 1, kMax);
  environment.rank = parse_int(found->rank, *lookup(found->rank), 0, environment.world_size - 1);
  const auto local_rank = lookup(found->local_rank);
  environment.local_rank =
      local_rank ? parse_int(found->local_rank, *local_rank, 0, environment.world_size - 1) : 0;
  if (const auto port = lookup("MASTER_PORT")) {
    environment.master_port = parse_int("MASTER_PORT", *port, 1, 65535);
  }

  if (auto address = lookup("MASTER_ADDR")) {
    environment.master_addr = std::move(*address);
  } else if (found->launcher == Launcher::Mpirun &&
             lookup("OMPI_COMM_WORLD_LOCAL_SIZE") == lookup("OMPI_COMM_WORLD_SIZE")) {
    environment.master_addr = "127.0.0.1";  // every rank runs on this machine
  } else if (auto launch_node = lookup("SLURM_LAUNCH_NODE_IPADDR");
             found->launcher == Launcher::Slurm && launch_node) {
    environment.master_addr = std::move(*launch_node);
  }
  TORCHBUS_CHECK(environment.world_size == 1 || !environment.master_addr.empty(), ConfigError,
                 to_string(found->launcher), " started ", environment.world_size,
                 " processes but MASTER_ADDR is not set; set it to the host of rank 0 (e.g. "
                 "mpirun -x MASTER_ADDR=node0 -x MASTER_PORT=29500)");

  if (found->launcher == Launcher::Torchrun && lookup("TORCHELASTIC_USE_AGENT_STORE") == "True") {
    environment.agent_store = true;
    environment.store_prefix =
        "/worker/attempt_" + lookup("TORCHELASTIC_RESTART_COUNT").value_or("0");
  }
  return environment;
}

}  // namespace torchbus
