#include "backend/cpu/cpu_memory.h"

#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tern {
namespace {

// Large buffers are 2 MiB aligned and advised as transparent huge pages: on this kind of VM a 4 KiB page
// fault costs microseconds, so touching GPT-2 124M's ~3 GB of state page by page took tens of seconds at
// start-up; huge pages cut the faults 512x and also the TLB misses of the optimizer's streaming passes.
constexpr size_t kHugePage = size_t{2} << 20;

}  // namespace

void* CpuMemoryBackend::Alloc(size_t bytes) {
  const bool huge = bytes >= kHugePage;
  const size_t align = huge ? kHugePage : 64;
  size_t rounded = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded ? rounded : align);
  if (!p) {
    std::fprintf(stderr, "tern: out of host memory allocating %zu bytes\n", bytes);
    std::abort();
  }
  if (!huge) {
    std::memset(p, 0, rounded);
    return p;
  }
  madvise(p, rounded, MADV_HUGEPAGE);  // advice only: without THP it is a no-op
  // Zero (and so fault in) the pages from every thread: page clearing is most of a large allocation's cost.
  const size_t pages = rounded / kHugePage;
  char* base = static_cast<char*>(p);
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < pages; i++) std::memset(base + i * kHugePage, 0, kHugePage);
  return p;
}

void CpuMemoryBackend::Free(void* ptr) {
  std::free(ptr);
}
void CpuMemoryBackend::Upload(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}
void CpuMemoryBackend::Download(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}
void CpuMemoryBackend::Copy(void* dst, const void* src, size_t bytes) {
  std::memmove(dst, src, bytes);
}
void CpuMemoryBackend::Zero(void* dst, size_t bytes) {
  std::memset(dst, 0, bytes);
}

}  // namespace tern
