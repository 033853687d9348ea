// CudaBackend: construction, device memory, host transfers, scratch buffers, and the factory.
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_check.h"

namespace tern {

namespace {
constexpr size_t kWorkspaceBytes = 32ull << 20;  // cuBLASLt workspace (llm.c uses 32 MiB on Hopper)
}

bool CudaDevicePresent() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" / "no device" error
    return false;
  }
  return count > 0;
}

std::unique_ptr<Backend> MakeCudaBackend() {
  int device = 0;
  if (const char* env = std::getenv("TERN_CUDA_DEVICE")) device = std::atoi(env);
  return std::make_unique<CudaBackend>(device);
}

CudaBackend::CudaBackend(int device) : device_(device) {
  CUDA_CHECK(cudaSetDevice(device_));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  num_sms_ = prop.multiProcessorCount;
  smem_optin_ = std::max(prop.sharedMemPerBlockOptin, prop.sharedMemPerBlock);
  char buf[512];
  std::snprintf(buf, sizeof(buf), "cuda (%s, sm_%d%d, %.0f GiB)", prop.name, prop.major, prop.minor,
                prop.totalGlobalMem / double(1ull << 30));
  name_ = buf;
  char bus[32] = {0};
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus), device_) == cudaSuccess) pci_bus_id_ = bus;
  (void)cudaGetLastError();
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  CUBLAS_CHECK(cublasCreate(&cublas_));
  CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  // No TF32 anywhere: fp32 GEMMs are true fp32 (CUBLAS_COMPUTE_32F), so they track the CPU reference.
  CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
  CUBLAS_CHECK(cublasLtCreate(&cublaslt_));
  workspace_bytes_ = kWorkspaceBytes;
  CUDA_CHECK(cudaMalloc(&lt_workspace_, workspace_bytes_));
  CUDA_CHECK(cudaMalloc(&cublas_workspace_, workspace_bytes_));
  CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_workspace_, workspace_bytes_));
  for (cudaEvent_t& e : pinned_read_) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  scratch_.assign(static_cast<int>(cuda::Scratch::kCount), nullptr);
  scratch_bytes_.assign(static_cast<int>(cuda::Scratch::kCount), 0);
  const char* attn = std::getenv("TERN_CUDA_ATTENTION");
  force_fp32_attention_ = attn && std::strcmp(attn, "fp32") == 0;
}

Capabilities CudaBackend::capabilities() const {
  Capabilities c;
  c.fp16_matmul = c.native_fp16 = true;
  c.kv_dtypes = {DType::kF32, DType::kBF16};                   // paged_attention.cu has no int8 cache yet
  c.attention_kinds = {"naive", "flash"};                      // attention.cu, attention_flash.cu
  if (CudnnAvailable()) c.attention_kinds.push_back("cudnn");  // attention_cudnn.cu
  c.is_gpu = true;
  return c;
}

bool CudaBackend::SetAttentionKernel(const std::string& kind) {
  std::string why;
  if (kind == "cudnn" && !CudnnAvailable(&why)) {
    std::fprintf(stderr, "[tern cuda] train.attention=cudnn: %s\n", why.c_str());
    return false;
  }
  if (!capabilities().HasAttentionKind(kind)) return false;
  flash_attention_ = kind == "flash";
  cudnn_attention_ = kind == "cudnn";
  return true;
}

CudaBackend::~CudaBackend() {
  // Errors are ignored here: at process exit the runtime may already be unloading.
  cudaStreamSynchronize(stream_);
  cudnn_.reset();  // its handle is bound to stream_
  for (auto& kv : plans_) {
    cuda::LtPlan& p = kv.second;
    if (p.desc) cublasLtMatmulDescDestroy(p.desc);
    if (p.a) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b) cublasLtMatrixLayoutDestroy(p.b);
    if (p.c) cublasLtMatrixLayoutDestroy(p.c);
  }
  for (void* p : scratch_)
    if (p) cudaFree(p);
  for (void* p : pinned_)
    if (p) cudaFreeHost(p);
  for (cudaEvent_t e : pinned_read_)
    if (e) cudaEventDestroy(e);
  if (lt_workspace_) cudaFree(lt_workspace_);
  if (cublas_workspace_) cudaFree(cublas_workspace_);
  if (cublaslt_) cublasLtDestroy(cublaslt_);
  if (cublas_) cublasDestroy(cublas_);
  if (stream_) cudaStreamDestroy(stream_);
}

void* CudaBackend::Alloc(size_t bytes) {
  void* p = nullptr;
  if (bytes == 0) return nullptr;
  cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    size_t free_b = 0, total_b = 0;
    (void)cudaGetLastError();
    cudaMemGetInfo(&free_b, &total_b);
    std::fprintf(stderr,
                 "[tern cuda] out of GPU memory: asked for %.2f GiB, %.2f GiB free of %.2f GiB (%s). "
                 "Lower train.batch_size or train.seq_len (see docs/gpu.md, memory).\n",
                 bytes / double(1ull << 30), free_b / double(1ull << 30), total_b / double(1ull << 30),
                 cudaGetErrorString(err));
    std::abort();
  }
  CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return p;
}

void CudaBackend::Free(void* ptr) {
  if (!ptr) return;
  cudaStreamSynchronize(stream_);
  cudaError_t err = cudaFree(ptr);
  if (err != cudaSuccess && err != cudaErrorCudartUnloading) CUDA_CHECK(err);
}

void CudaBackend::Upload(void* dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  constexpr size_t kStagedMax = 4 << 20;
  if (bytes <= kStagedMax) {
    // Small uploads (token ids, every micro-batch) go through two pinned staging buffers used in turn, so
    // the copy is truly asynchronous and the caller may reuse its memory at once.
    const auto slot =
        static_cast<cuda::PinnedSlot>(static_cast<int>(cuda::PinnedSlot::kUpload0) + next_upload_);
    next_upload_ ^= 1;
    void* staged = PinnedForWrite(slot, bytes);
    std::memcpy(staged, host_src, bytes);
    CUDA_CHECK(cudaMemcpyAsync(dst, staged, bytes, cudaMemcpyHostToDevice, stream_));
    PinnedQueued(slot);
    return;
  }
  // From pageable memory the call returns once the source has been staged, so the caller may reuse it.
  CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
}

void CudaBackend::Download(void* host_dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::Copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::Zero(void* dst, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream_));
}

void CudaBackend::Synchronize() {
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

// The current device is per host thread: without this, a thread other than the constructor's would launch on
// device 0 whatever TERN_CUDA_DEVICE says (and this backend's stream belongs to device_).
void CudaBackend::PrepareThread() {
  CUDA_CHECK(cudaSetDevice(device_));
}

void* CudaBackend::ScratchBuffer(cuda::Scratch which, size_t bytes) {
  const int i = static_cast<int>(which);
  if (bytes <= scratch_bytes_[i]) return scratch_[i];
  // Grow with 25% headroom so that a slowly growing shape does not reallocate every call.
  const size_t grown = bytes + bytes / 4;
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (scratch_[i]) CUDA_CHECK(cudaFree(scratch_[i]));
  scratch_[i] = nullptr;
  scratch_bytes_[i] = 0;
  scratch_[i] = Alloc(grown);
  scratch_bytes_[i] = grown;
  return scratch_[i];
}

void* CudaBackend::PinnedForWrite(cuda::PinnedSlot slot, size_t bytes) {
  const int i = static_cast<int>(slot);
  // The copies that last read the buffer (an event never recorded completes at once).
  CUDA_CHECK(cudaEventSynchronize(pinned_read_[i]));
  if (bytes <= pinned_bytes_[i]) return pinned_[i];
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (pinned_[i]) CUDA_CHECK(cudaFreeHost(pinned_[i]));
  pinned_[i] = nullptr;
  pinned_bytes_[i] = 0;
  const size_t grown = std::max<size_t>(bytes + bytes / 4, 4096);
  CUDA_CHECK(cudaMallocHost(&pinned_[i], grown));
  pinned_bytes_[i] = grown;
  return pinned_[i];
}

void CudaBackend::PinnedQueued(cuda::PinnedSlot slot) {
  CUDA_CHECK(cudaEventRecord(pinned_read_[static_cast<int>(slot)], stream_));
}

Compute CudaBackend::attention_compute(Compute requested) const {
  return force_fp32_attention_ ? Compute::kF32 : requested;
}

}  // namespace tern
