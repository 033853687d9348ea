#include "backend/cpu/f16_emulation.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "backend/bf16.h"
#include "backend/fp16.h"

namespace tern {

void RoundToF16Array(float* dst, const float* src, size_t n) {
  // Parallel only for large operands: the weight matrices and dlogits of a real model, not the tiny tests.
#pragma omp parallel for schedule(static) if (n >= (1u << 16))
  for (size_t blk = 0; blk < (n + 4095) / 4096; blk++) {
    size_t i = blk * 4096;
    const size_t end = std::min(n, i + 4096);
#if defined(__AVX512F__)
    for (; i + 16 <= end; i += 16) {
      // The maskz forms with a full mask: the same vcvtps2ph / vcvtph2ps; the plain ones warned
      // -Wmaybe-uninitialized under GCC 12 (their undefined pass-through operand).
      const __m256i h = _mm512_maskz_cvtps_ph(0xFFFF, _mm512_loadu_ps(src + i),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm512_storeu_ps(dst + i, _mm512_maskz_cvtph_ps(0xFFFF, h));
    }
#elif defined(__F16C__)
    for (; i + 8 <= end; i += 8) {
      const __m128i h =
          _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
#endif
    for (; i < end; i++) dst[i] = RoundToF16(src[i]);  // the tail (and builds without F16C)
  }
}

const float* F16EmulationBackend::Rounded(Operand op, size_t elems, std::vector<float>* scratch) {
  if (scratch->size() < elems) scratch->resize(elems);
  float* dst = scratch->data();
  if (op.dtype == DType::kBF16) {  // bf16 -> fp32 is exact; then round to fp16 as any fp32 operand
    const auto* src = static_cast<const uint16_t*>(op.ptr);
    for (size_t i = 0; i < elems; i++) dst[i] = BF16ToF32(src[i]);
    RoundToF16Array(dst, dst, elems);
  } else {
    RoundToF16Array(dst, static_cast<const float*>(op.ptr), elems);
  }
  return dst;
}

void F16EmulationBackend::Matmul(float* c, Operand a, Operand b, const float* bias, int M, int N, int K,
                                 bool trans_a, bool trans_b, float beta, Compute compute) {
  if (compute != Compute::kF16 || M <= 0 || N <= 0) {
    inner()->Matmul(c, a, b, bias, M, N, K, trans_a, trans_b, beta, compute);
    return;
  }
  const float* ra = Rounded(a, static_cast<size_t>(M) * K, &scratch_a_);
  const float* rb = Rounded(b, static_cast<size_t>(K) * N, &scratch_b_);
  inner()->Matmul(c, F32(ra), F32(rb), bias, M, N, K, trans_a, trans_b, beta, Compute::kF32);
}

std::unique_ptr<Backend> WithF16Emulation(std::unique_ptr<Backend> inner) {
  if (!inner) return inner;
  const Capabilities caps = inner->capabilities();
  if (caps.fp16_matmul) return inner;
  if (!caps.host_addressable_memory) {  // Rounded() reads the operands on the host
    std::fprintf(stderr, "tern: WithF16Emulation needs a backend with host memory, not %s\n",
                 inner->name().c_str());
    std::abort();
  }
  return std::make_unique<F16EmulationBackend>(std::move(inner));
}

}  // namespace tern
