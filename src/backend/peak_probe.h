// Measures this device's peak matmul FLOP/s for a precision: the denominator of MFU. A large square
// matmul through the same Backend::Matmul the model uses, best of a few repetitions.
#pragma once

#include "backend/backend.h"

namespace tern {

// Returns GFLOP/s. Takes about `seconds` of wall time.
double MeasurePeakGflops(Backend* backend, Compute compute, double seconds = 1.0, int size = 1024);

}  // namespace tern
