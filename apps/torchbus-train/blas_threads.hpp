#pragma once

/// \file
/// --threads for the BLAS library LibTorch calls (OpenBLAS built with pthreads keeps its own
/// thread pool, which torch::set_num_threads does not size), and what that library is.

#include <string>

namespace train {

/// Sets OpenBLAS's thread count to `threads` when the loaded libblas.so.3 is OpenBLAS and returns
/// its build configuration ("OpenBLAS 0.3.21 ..."); returns "" with another BLAS, which then keeps
/// its own setting.
std::string set_blas_threads(int threads);

/// The BLAS library LibTorch calls and the threads it runs on, e.g. "OpenBLAS 0.3.29 ...
/// Cooperlake MAX_THREADS=128 on OpenMP threads (2), LibTorch's own" or "OpenBLAS 0.3.21 ... in a
/// pool of its own (pthreads: 2)"; "a BLAS library other than OpenBLAS" otherwise.
std::string describe_blas();

}  // namespace train
