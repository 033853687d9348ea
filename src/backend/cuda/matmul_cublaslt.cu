// Matmul through cuBLASLt (bf16, fp16 or fp32 operands, fp32 accumulate, fp32 output, bias epilogue), with a
// cublasGemmEx fallback for shapes cuBLASLt does not take (unaligned pointers or leading dimensions).
//
// Row-major to column-major: a row-major [R, S] matrix is the column-major [S, R] matrix, its transpose.
// So C[M,N] = op(A)[M,K] op(B)[K,N] (row-major) is computed as the column-major product
//   C'[N,M] = op'(B') [N,K] * op'(A') [K,M]
// with B' the buffer of B read column-major (transposed iff trans_b) and A' likewise for A.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_common.cuh"

namespace tern {

namespace {

bool Aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

}  // namespace

cudaDataType_t cuda::GemmType(Compute c) {
  switch (c) {
    case Compute::kBF16:
      return CUDA_R_16BF;
    case Compute::kF16:
      return CUDA_R_16F;
    case Compute::kF32:
      break;
  }
  return CUDA_R_32F;
}

const void* CudaBackend::PrepareOperand(Operand op, size_t elems, Compute compute, cuda::Scratch slot) {
  if (op.dtype == DType::kI32) {
    std::fprintf(stderr, "[tern cuda] Matmul: an i32 operand is not allowed\n");
    std::abort();
  }
  const bool is_bf16 = op.dtype == DType::kBF16;
  if (compute == Compute::kF16) {  // fp32 or bf16 -> fp16 (round-to-nearest-even, overflow -> inf)
    auto* dst = static_cast<uint16_t*>(ScratchBuffer(slot, elems * sizeof(uint16_t)));
    if (is_bf16) {
      cuda::LaunchCastBF16ToF16(dst, static_cast<const uint16_t*>(op.ptr), elems, stream_);
    } else {
      cuda::LaunchCastF32ToF16(dst, static_cast<const float*>(op.ptr), elems, stream_);
    }
    return dst;
  }
  const bool want_bf16 = compute == Compute::kBF16;
  if (is_bf16 == want_bf16) return op.ptr;
  if (want_bf16) {
    auto* dst = static_cast<uint16_t*>(ScratchBuffer(slot, elems * sizeof(uint16_t)));
    cuda::LaunchCastF32ToBF16(dst, static_cast<const float*>(op.ptr), elems, stream_);
    return dst;
  }
  // fp32 compute with a bf16 operand: widen it (exact), as the reference does.
  auto* dst = static_cast<float*>(ScratchBuffer(slot, elems * sizeof(float)));
  cuda::LaunchWidenBF16ToF32(dst, static_cast<const uint16_t*>(op.ptr), elems, stream_);
  return dst;
}

cuda::LtPlan* CudaBackend::GetPlan(int m, int n, int k, bool ta, bool tb, cudaDataType_t ab_type, bool bias,
                                   int lda, int ldb, int ldc) {
  char key[160];
  std::snprintf(key, sizeof(key), "%d,%d,%d,%d,%d,%d,%d,%d,%d,%d", m, n, k, ta, tb, static_cast<int>(ab_type),
                bias, lda, ldb, ldc);
  auto it = plans_.find(key);
  if (it != plans_.end()) return &it->second;
  cuda::LtPlan& p = plans_[key];
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
  const cublasLtEpilogue_t epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (bias) {
    const cudaDataType_t bias_type = CUDA_R_32F;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                sizeof(bias_type)));
  }
  // Stored shapes: an operand used transposed is stored with its dimensions swapped.
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, ab_type, ta ? k : m, ta ? m : k, lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, ab_type, tb ? n : k, tb ? k : n, ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, m, n, ldc));
  cublasLtMatmulPreference_t pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &workspace_bytes_, sizeof(workspace_bytes_)));
  const uint32_t align = 16;
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(cublaslt_, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  p.usable = st == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (p.usable) p.algo = result.algo;
  return &p;
}

void CudaBackend::Matmul(float* c, Operand a, Operand b, const float* bias, int M, int N, int K, bool trans_a,
                         bool trans_b, float beta, Compute compute) {
  if (M <= 0 || N <= 0) return;
  const cudaDataType_t type = cuda::GemmType(compute);
  const void* pa = PrepareOperand(a, static_cast<size_t>(M) * K, compute, cuda::Scratch::kMatmulA);
  const void* pb = PrepareOperand(b, static_cast<size_t>(K) * N, compute, cuda::Scratch::kMatmulB);

  // Column-major problem C'[m,n] = op(X)[m,k] op(Y)[k,n] with X = B', Y = A'.
  const int m = N, n = M, k = K;
  const bool tx = trans_b, ty = trans_a;
  // (max with 1: BLAS wants leading dimensions >= 1 even for K == 0, where C = beta * C (+ bias).)
  const int ldx = std::max(1, trans_b ? K : N), ldy = std::max(1, trans_a ? M : K), ldc = N;
  const float alpha = 1.0f;
  const size_t esize = type == CUDA_R_32F ? 4 : 2;

  // cuBLASLt for the common, aligned case (16-byte pointers and leading dimensions); the bias epilogue
  // only when beta == 0, where its semantics are unambiguous.
  const bool fuse_bias = bias && beta == 0.0f;
  const bool lt_ok = K > 0 && Aligned16(pa) && Aligned16(pb) && Aligned16(c) &&
                     (!fuse_bias || Aligned16(bias)) && (ldx * esize) % 16 == 0 && (ldy * esize) % 16 == 0 &&
                     (ldc * 4) % 16 == 0;
  bool done = false;
  if (lt_ok) {
    cuda::LtPlan* plan = GetPlan(m, n, k, tx, ty, type, fuse_bias, ldx, ldy, ldc);
    if (plan->usable) {
      if (fuse_bias)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                    sizeof(bias)));
      cublasStatus_t st =
          cublasLtMatmul(cublaslt_, plan->desc, &alpha, pb, plan->a, pa, plan->b, &beta, c, plan->c, c,
                         plan->c, &plan->algo, lt_workspace_, workspace_bytes_, stream_);
      if (st == CUBLAS_STATUS_SUCCESS) {
        done = true;
        if (bias && !fuse_bias) cuda::LaunchAddBiasRows(c, bias, M, N, stream_);
      } else {
        plan->usable = false;  // remember, and take the general path from now on
      }
    }
  }
  if (!done) {
    CUBLAS_CHECK(cublasGemmEx(cublas_, tx ? CUBLAS_OP_T : CUBLAS_OP_N, ty ? CUBLAS_OP_T : CUBLAS_OP_N, m, n,
                              k, &alpha, pb, type, ldx, pa, type, ldy, &beta, c, CUDA_R_32F, ldc,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (bias) cuda::LaunchAddBiasRows(c, bias, M, N, stream_);
  }
}

void CudaBackend::GemmStridedBatched(bool ta, bool tb, int m, int n, int k, float alpha, const void* a,
                                     int lda, long long stride_a, const void* b, int ldb, long long stride_b,
                                     float beta, float* c, int ldc, long long stride_c, int batch,
                                     cudaDataType_t t) {
  CUBLAS_CHECK(cublasGemmStridedBatchedEx(cublas_, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                          tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, a, t, lda,
                                          stride_a, b, t, ldb, stride_b, &beta, c, CUDA_R_32F, ldc, stride_c,
                                          batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace tern
