// Error checks for CUDA runtime, cuBLAS and cuBLASLt calls: on failure, print the call, the file and line,
// and the library's error text, then abort. A failing device call is a bug (or a dead GPU), never a
// condition the training step can recover from.
#pragma once

#include <cstdio>
#include <cstdlib>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace tern::cuda {

[[noreturn]] inline void FailCuda(cudaError_t err, const char* expr, const char* file, int line) {
  std::fprintf(stderr, "[tern cuda] %s:%d: %s failed: %s (%s)\n", file, line, expr, cudaGetErrorString(err),
               cudaGetErrorName(err));
  std::fflush(stderr);
  std::abort();
}

[[noreturn]] inline void FailCublas(cublasStatus_t st, const char* expr, const char* file, int line) {
  std::fprintf(stderr, "[tern cuda] %s:%d: %s failed: cuBLAS status %d (%s)\n", file, line, expr,
               static_cast<int>(st), cublasGetStatusString(st));
  std::fflush(stderr);
  std::abort();
}

}  // namespace tern::cuda

#define CUDA_CHECK(expr)                                                                        \
  do {                                                                                          \
    cudaError_t tern_err_ = (expr);                                                             \
    if (tern_err_ != cudaSuccess) ::tern::cuda::FailCuda(tern_err_, #expr, __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(expr)                                                                                \
  do {                                                                                                    \
    cublasStatus_t tern_st_ = (expr);                                                                     \
    if (tern_st_ != CUBLAS_STATUS_SUCCESS) ::tern::cuda::FailCublas(tern_st_, #expr, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: catches bad launch configurations at the launch site (asynchronous faults
// surface at the next synchronising call, which is checked too).
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
