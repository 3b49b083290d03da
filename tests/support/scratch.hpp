#pragma once

// Test support: fresh scratch directories under the system's temporary directory, and reading
// back what was written there.

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

namespace torchbus::testing {

/// The path "torchbus_<suite>_<name>" under the system's temporary directory, with whatever was
/// there removed; not created.
inline std::filesystem::path scratch_path(const std::string& suite, const std::string& name) {
  const auto path = std::filesystem::temp_directory_path() / ("torchbus_" + suite + "_" + name);
  std::filesystem::remove_all(path);
  return path;
}

/// A fresh, empty directory "torchbus_<suite>_<name>" under the system's temporary directory.
inline std::filesystem::path scratch(const std::string& suite, const std::string& name) {
  auto path = scratch_path(suite, name);
  std::filesystem::create_directories(path);
  return path;
}

/// A fresh directory unique to this process, removed with everything in it when it goes away.
struct TempDir {
  std::filesystem::path path;
  /// Creates "torchbus_<suite>_<pid>_<n>" under the system's temporary directory.
  explicit TempDir(const std::string& suite) {
    static int counter = 0;
    path = scratch(suite, std::to_string(::getpid()) + "_" + std::to_string(counter++));
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

/// The names of the entries of `directory`.
inline std::set<std::string> entry_names(const std::filesystem::path& directory) {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    names.insert(entry.path().filename().string());
  }
  return names;
}

/// The whole content of the file at `path` ("" when it cannot be read).
inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// The lines of the file at `path`, without their line breaks (none when it cannot be read).
inline std::vector<std::string> read_lines(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace torchbus::testing
