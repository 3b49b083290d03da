#pragma once

/// \file
/// --threads for the BLAS library LibTorch calls (OpenBLAS keeps its own thread pool, which
/// torch::set_num_threads does not size).

#include <string>

namespace train {

/// Sets OpenBLAS's thread count to `threads` when the loaded libblas.so.3 is OpenBLAS and returns
/// its build configuration ("OpenBLAS 0.3.21 ..."); returns "" with another BLAS, which then keeps
/// its own setting.
std::string set_blas_threads(int threads);

}  // namespace train
