// A program linked with torchbus::framework and then a library that, like the official LibTorch,
// defines copies of libstdc++ functions (libstdcxx_copy.cpp) reaches libstdc++'s own: torchbus's
// libraries name the C++ runtime before LibTorch (cmake/TorchbusDependencies.cmake), so the linker
// binds the program's std:: references to libstdc++'s versioned symbols, which no copy can satisfy.

#include <dlfcn.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>

int main() {
  namespace fs = std::filesystem;
  std::uintmax_t (*remove_all)(const fs::path&) = &fs::remove_all;
  Dl_info where{};
  if (dladdr(reinterpret_cast<void*>(remove_all), &where) != 0 && where.dli_fname != nullptr) {
    std::cout << "std::filesystem::remove_all is " << where.dli_fname << "'s\n";
  }
  const auto directory = fs::temp_directory_path() / "torchbus_cxx_runtime_first";
  fs::create_directories(directory);
  std::ofstream(directory / "file") << "x";
  const auto removed = remove_all(directory);  // the stand-in's copy aborts
  if (removed != 2 || fs::exists(directory)) {
    std::cerr << "remove_all removed " << removed << " entries; expected 2\n";
    return 1;
  }
  std::cout << "libstdc++'s remove_all ran\n";
  return 0;
}
