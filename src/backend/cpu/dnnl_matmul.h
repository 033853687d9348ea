// oneDNN 2.6 matmul for the fast CPU backend: fp32×fp32→fp32 and bf16×bf16→fp32 or bf16, one primitive per
// shape.
//
// C[M,N] = beta*C + op(A)[M,K]·op(B)[K,N] (+ bias[N]), row-major. trans_a: A is stored [K,M];
// trans_b: B is stored [N,K]. Transposes are format tags (ba), beta is a sum post-op, bias is an f32 [1,N]
// tensor. Primitives (and their memory objects) are created once per (M,N,K,trans,dtype,beta,bias?) and
// reused; one engine and one stream serve them all. Not thread-safe: one caller at a time, like the backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"

namespace tern {

class DnnlMatmul {
 public:
  DnnlMatmul();
  ~DnnlMatmul();
  DnnlMatmul(const DnnlMatmul&) = delete;
  DnnlMatmul& operator=(const DnnlMatmul&) = delete;

  // a and b both hold `dtype` elements (kF32 or kBF16). Returns false when oneDNN has no implementation
  // for the case (e.g. bf16 on a CPU without AVX-512); the caller then computes it another way.
  bool Run(float* c, const void* a, const void* b, DType dtype, const float* bias, int M, int N, int K,
           bool trans_a, bool trans_b, float beta);

  // The product (+ bias, in fp32) rounded to bf16 by oneDNN (fp32 accumulation; round to nearest even),
  // beta 0.
  bool RunToBF16(uint16_t* c, const void* a, const void* b, DType dtype, const float* bias, int M, int N,
                 int K, bool trans_a, bool trans_b);

  // The implementation oneDNN picked for this case ("brg:avx512_core_bf16", ...), "" if none: for tests and
  // benchmarks. Creates (and caches) the primitive.
  std::string ImplName(DType dtype, bool has_bias, int M, int N, int K, bool trans_a, bool trans_b,
                       float beta);
  size_t CachedPrimitives() const;

 private:
  struct Entry;
  struct Impl;
  Entry* Lookup(DType dtype, bool has_bias, int M, int N, int K, bool trans_a, bool trans_b, float beta,
                bool bf16_out);
  bool Execute(Entry* e, void* c, const void* a, const void* b, const float* bias);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tern
