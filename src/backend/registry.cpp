#include "backend/registry.h"

namespace tern {

#ifdef TERN_HAVE_CUDA
std::unique_ptr<Backend> MakeCudaBackend();  // backend/cuda/
bool CudaDevicePresent();
bool CudaAvailable() {
  return CudaDevicePresent();
}
#else
bool CudaAvailable() {
  return false;
}
#endif

Result<std::unique_ptr<Backend>> MakeBackend(const std::string& device) {
  if (device == "cpu") return MakeCpuFastBackend();
  if (device == "cpu-ref") return MakeCpuReferenceBackend();
  if (device == "cuda" || device == "auto") {
#ifdef TERN_HAVE_CUDA
    if (CudaDevicePresent()) return MakeCudaBackend();
    if (device == "cuda")
      return Status::Unavailable(
          "device 'cuda' was asked for but no NVIDIA GPU is visible (nvidia-smi?); use device: cpu");
#else
    if (device == "cuda")
      return Status::Unavailable(
          "device 'cuda' was asked for but this tern was built without CUDA; rebuild on a machine with nvcc "
          "(scripts/build detects it) or use device: cpu");
#endif
    return MakeCpuFastBackend();
  }
  return Status::InvalidArgument("unknown device '" + device + "'; use one of: cpu, cpu-ref, cuda, auto");
}

}  // namespace tern
