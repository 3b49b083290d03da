// Stands in for the official LibTorch, which exports copies of parts of libstdc++ of its own: this
// library defines std::filesystem::remove_all without libstdc++'s symbol version, as those copies
// are, and aborts when a program reaches it.

#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace std::filesystem {

std::uintmax_t remove_all(const path& target) {
  std::fprintf(stderr, "remove_all(%s) reached the stand-in's copy, not libstdc++'s\n",
               target.c_str());
  std::abort();
}

}  // namespace std::filesystem
