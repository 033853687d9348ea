// Picks a backend by the name used in configs (`train.device`): cpu, cpu-ref, cuda, auto.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "core/status.h"

namespace tern {

// True when this build has the CUDA backend and a GPU is visible.
bool CudaAvailable();
// cpu = fast CPU path; cpu-ref = reference ops; cuda = NVIDIA GPU; auto = cuda when available, else cpu.
Result<std::unique_ptr<Backend>> MakeBackend(const std::string& device);

}  // namespace tern
