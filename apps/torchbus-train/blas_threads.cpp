#include "blas_threads.hpp"

#include <dlfcn.h>

namespace train {
namespace {

/// OpenBLAS's function `name` in the loaded libblas.so.3, or nullptr with another BLAS.
template <typename Function>
Function* openblas_function(const char* name) {
  // Looked up at run time: Debian's LibTorch reaches its BLAS through the libblas.so.3
  // alternative, which may be OpenBLAS or another implementation.
  void* blas = dlopen("libblas.so.3", RTLD_LAZY | RTLD_NOLOAD);
  if (blas == nullptr) return nullptr;
  auto* function = reinterpret_cast<Function*>(dlsym(blas, name));
  dlclose(blas);  // RTLD_NOLOAD took a reference of the already loaded library
  return function;
}

std::string openblas_config() {
  auto* config = openblas_function<char*()>("openblas_get_config");
  return config != nullptr ? config() : "OpenBLAS";
}

}  // namespace

std::string set_blas_threads(int threads) {
  auto* set = openblas_function<void(int)>("openblas_set_num_threads");
  if (set == nullptr) return "";
  set(threads);
  return openblas_config();
}

std::string describe_blas() {
  auto* parallel = openblas_function<int()>("openblas_get_parallel");
  auto* threads = openblas_function<int()>("openblas_get_num_threads");
  if (parallel == nullptr || threads == nullptr) return "a BLAS library other than OpenBLAS";
  const auto count = std::to_string(threads());
  switch (parallel()) {
    case 0:
      return openblas_config() + " on the calling thread alone";
    case 2:
      return openblas_config() + " on OpenMP threads (" + count + "), LibTorch's own";
    default:
      return openblas_config() + " in a pool of its own (pthreads: " + count + ")";
  }
}

}  // namespace train
