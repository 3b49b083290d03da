#pragma once

// The run directory of torchbus-train: what a run writes there, whether a run is already there,
// and which run it is (its identity, in identity.txt).

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace train {

/// The files and folders a run writes into its directory.
const std::vector<std::string>& run_outputs();

/// The run outputs present in `directory` (none when it does not exist).
std::vector<std::string> present_outputs(const std::filesystem::path& directory);

/// Removes the outputs `names` from `directory` (folders with their contents).
void remove_outputs(const std::filesystem::path& directory, const std::vector<std::string>& names);

/// Records `identity` as the identity of the run in `directory` (identity.txt, atomically).
void write_identity(const std::filesystem::path& directory, const std::string& identity);

/// The identity recorded in `directory`, if any.
std::optional<std::string> read_identity(const std::filesystem::path& directory);

}  // namespace train
