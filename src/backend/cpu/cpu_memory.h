// Host memory for the CPU backends: 64-byte aligned, zero-filled, touched at allocation so that the
// training step never takes page faults.
#pragma once

#include "backend/backend.h"

namespace tern {

class CpuMemoryBackend : public Backend {
 public:
  void* Alloc(size_t bytes) override;
  void Free(void* ptr) override;
  void Upload(void* dst, const void* host_src, size_t bytes) override;
  void Download(void* host_dst, const void* src, size_t bytes) override;
  void Copy(void* dst, const void* src, size_t bytes) override;
  void Zero(void* dst, size_t bytes) override;
};

}  // namespace tern
