#pragma once

/// \file
/// Archives as bytes in memory (private to torchbus_framework): what a load that may be refused
/// keeps to put a state back, and what a translated archive is read back from.

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <sstream>
#include <string>

namespace torchbus::detail {

/// The bytes `archive` saves as.
inline std::string archive_bytes(torch::serialize::OutputArchive& archive) {
  std::ostringstream bytes;
  archive.save_to(bytes);
  return bytes.str();
}

/// The archive saved as `bytes`.
inline torch::serialize::InputArchive archive_of_bytes(const std::string& bytes) {
  std::istringstream in(bytes);
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  return archive;
}

}  // namespace torchbus::detail
