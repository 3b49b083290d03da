#include "run_directory.hpp"

#include <torchbus/atomic_file.hpp>
#include <torchbus/error.hpp>

#include <fstream>
#include <iterator>

namespace train {

namespace fs = std::filesystem;

const std::vector<std::string>& run_outputs() {
  static const std::vector<std::string> outputs{"train.log",   "identity.txt",    "summary.json",
                                                "model.pt",    "validation.json", "metrics.csv",
                                                "report.html", "tensorboard",     "checkpoints"};
  return outputs;
}

std::vector<std::string> present_outputs(const fs::path& directory) {
  std::vector<std::string> present;
  std::error_code error;
  for (const auto& name : run_outputs()) {
    if (fs::exists(directory / name, error)) present.push_back(name);
  }
  return present;
}

void remove_outputs(const fs::path& directory, const std::vector<std::string>& names) {
  for (const auto& name : names) {
    std::error_code error;
    fs::remove_all(directory / name, error);
    TORCHBUS_CHECK(!error, torchbus::Error, "cannot remove ", (directory / name).string(), ": ",
                   error.message());
  }
}

void write_identity(const fs::path& directory, const std::string& identity) {
  torchbus::write_file_atomically(directory / "identity.txt", identity);
}

std::optional<std::string> read_identity(const fs::path& directory) {
  std::ifstream in(directory / "identity.txt", std::ios::binary);
  if (!in) return std::nullopt;
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace train
