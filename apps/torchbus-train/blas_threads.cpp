#include "blas_threads.hpp"

#include <dlfcn.h>

namespace train {

std::string set_blas_threads(int threads) {
  // Looked up at run time: Debian's LibTorch reaches its BLAS through the libblas.so.3
  // alternative, which may be OpenBLAS or another implementation.
  void* blas = dlopen("libblas.so.3", RTLD_LAZY | RTLD_NOLOAD);
  if (blas == nullptr) return "";
  using SetThreads = void (*)(int);
  using GetConfig = char* (*)();
  auto* set = reinterpret_cast<SetThreads>(dlsym(blas, "openblas_set_num_threads"));
  auto* config = reinterpret_cast<GetConfig>(dlsym(blas, "openblas_get_config"));
  dlclose(blas);  // RTLD_NOLOAD took a reference of the already loaded library
  if (set == nullptr) return "";
  set(threads);
  return config != nullptr ? config() : "OpenBLAS";
}

}  // namespace train
