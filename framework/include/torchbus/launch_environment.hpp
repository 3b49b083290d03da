#pragma once

/// \file
/// LaunchEnvironment: rank, world size and rendezvous address as a launcher (torchrun, mpirun,
/// srun) set them in the environment.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace torchbus {

/// The program that started this process.
enum class Launcher : std::uint8_t {
  None,      ///< no launcher variables: a single process
  Torchrun,  ///< torchrun / torch.distributed.run (RANK, WORLD_SIZE, LOCAL_RANK)
  Mpirun,    ///< OpenMPI's mpirun (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK)
  Slurm,     ///< Slurm's srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID)
};

/// The launcher's name, e.g. "mpirun".
std::string_view to_string(Launcher launcher) noexcept;

/// Where this process stands in a multi-process run, read from the launcher's variables.
struct LaunchEnvironment {
  /// Reads a variable; nothing when it is unset.
  using Lookup = std::function<std::optional<std::string>(const std::string& name)>;

  /// The port torchrun and c10d use when MASTER_PORT is not set.
  static constexpr int kDefaultPort = 29500;

  Launcher launcher = Launcher::None;  ///< who started this process
  int rank = 0;                        ///< global rank
  int local_rank = 0;                  ///< rank on this machine
  int world_size = 1;                  ///< number of processes
  std::string master_addr;             ///< host of the rendezvous store (rank 0 or the agent)
  int master_port = kDefaultPort;      ///< its port
  /// torchrun's agent already hosts the store: join it as a client under `store_prefix`.
  bool agent_store = false;
  std::string store_prefix;  ///< key prefix in the store ("/worker/attempt_<n>" under torchrun)

  /// Reads this process's environment; throws ConfigError for inconsistent variables.
  static LaunchEnvironment detect();
  /// Reads the variables through `lookup` (for tests and embedding); throws ConfigError naming
  /// the variable that is missing or out of range.
  static LaunchEnvironment from(const Lookup& lookup);
};

}  // namespace torchbus
