// The CUDA backend's entry points, without CUDA headers (for C++ code compiled by the host compiler:
// the registry, tests). Defined in cuda_backend.cu; exist only in builds with TERN_HAVE_CUDA.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace tern {

// A backend on GPU 0 (or $TERN_CUDA_DEVICE). Aborts with a message if no GPU is usable: check first.
std::unique_ptr<Backend> MakeCudaBackend();
// True when the CUDA runtime sees at least one GPU (false without a driver; never aborts).
bool CudaDevicePresent();

}  // namespace tern
