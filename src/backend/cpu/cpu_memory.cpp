#include "backend/cpu/cpu_memory.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tern {

void* CpuMemoryBackend::Alloc(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded ? rounded : 64);
  if (!p) {
    std::fprintf(stderr, "tern: out of host memory allocating %zu bytes\n", bytes);
    std::abort();
  }
  std::memset(p, 0, rounded);
  return p;
}

void CpuMemoryBackend::Free(void* ptr) { std::free(ptr); }
void CpuMemoryBackend::Upload(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuMemoryBackend::Download(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuMemoryBackend::Copy(void* dst, const void* src, size_t bytes) { std::memmove(dst, src, bytes); }
void CpuMemoryBackend::Zero(void* dst, size_t bytes) { std::memset(dst, 0, bytes); }

}  // namespace tern
