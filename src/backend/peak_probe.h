// Measures this device's peak matmul FLOP/s for a precision: the denominator of MFU. A large square
// matmul through the same Backend::Matmul the model uses, best of a few repetitions.
#pragma once

#include "backend/backend.h"

namespace tern {

// Returns GFLOP/s. Takes about `seconds` of wall time.
double MeasurePeakGflops(Backend* backend, Compute compute, double seconds = 1.0, int size = 1024);

// The memory read bandwidth in GB/s of a backend whose buffers are host memory (the CPU backends): the best
// of 5 passes summing `mb` MB of floats, far larger than the caches, on the OpenMP threads. The most decode
// can read its weights at (bench/decode_bound.cpp, `tern bench --serve`). About a second for 1024 MB.
double MeasureHostReadGbps(Backend* backend, size_t mb = 1024);

}  // namespace tern
