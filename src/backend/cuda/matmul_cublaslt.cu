// Matmul through cuBLASLt (bf16, fp16 or fp32 operands, fp32 accumulate, fp32 output or bf16; bias, GELU and
// GELU gradient epilogues), with a cublasGemmEx fallback for shapes cuBLASLt does not take (unaligned
// pointers or leading dimensions), and the unfused ops behind the GELU epilogues.
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

cuda::LtPlan* CudaBackend::GetPlan(int m, int n, int k, bool ta, bool tb, cudaDataType_t ab_type,
                                   int epilogue, int lda, int ldb, int ldc, cudaDataType_t c_type) {
  char key[160];
  std::snprintf(key, sizeof(key), "%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d", m, n, k, ta, tb,
                static_cast<int>(ab_type), epilogue, lda, ldb, ldc, static_cast<int>(c_type));
  auto it = plans_.find(key);
  if (it != plans_.end()) return &it->second;
  cuda::LtPlan& p = plans_[key];
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
  const auto epi = static_cast<cublasLtEpilogue_t>(epilogue);
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (epi == CUBLASLT_EPILOGUE_BIAS || epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
    const cudaDataType_t bias_type = CUDA_R_32F;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                sizeof(bias_type)));
  }
  if (epi == CUBLASLT_EPILOGUE_GELU_AUX || epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
      epi == CUBLASLT_EPILOGUE_DGELU) {
    // The pre-activation: fp32 (the output's type) with the output's leading dimension. Its pointer is set
    // per call (LtMatmul only passes 16-byte aligned ones); the heuristic reads only its alignment.
    const int64_t aux_ld = ldc;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                                sizeof(aux_ld)));
  }
  // Stored shapes: an operand used transposed is stored with its dimensions swapped.
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, ab_type, ta ? k : m, ta ? m : k, lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, ab_type, tb ? n : k, tb ? k : n, ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, c_type, m, n, ldc));
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

bool CudaBackend::LtMatmul(void* c, const void* pa, const void* pb, cudaDataType_t type, const float* bias,
                           const float* aux, int epilogue, int M, int N, int K, bool trans_a, bool trans_b,
                           float beta, cudaDataType_t c_type) {
  // Column-major problem C'[m,n] = op(X)[m,k] op(Y)[k,n] with X = B', Y = A'.
  const int m = N, n = M, k = K;
  const bool tx = trans_b, ty = trans_a;
  const int ldx = std::max(1, trans_b ? K : N), ldy = std::max(1, trans_a ? M : K), ldc = N;
  const size_t esize = type == CUDA_R_32F ? 4 : 2, c_esize = c_type == CUDA_R_32F ? 4 : 2;
  // 16-byte pointers and leading dimensions; the GELU pre-activation's leading dimension a multiple of 8.
  const bool ok = K > 0 && Aligned16(pa) && Aligned16(pb) && Aligned16(c) && (!bias || Aligned16(bias)) &&
                  (!aux || (Aligned16(aux) && ldc % 8 == 0)) && (ldx * esize) % 16 == 0 &&
                  (ldy * esize) % 16 == 0 && (ldc * c_esize) % 16 == 0;
  if (!ok) return false;
  cuda::LtPlan* plan = GetPlan(m, n, k, tx, ty, type, epilogue, ldx, ldy, ldc, c_type);
  if (!plan->usable) return false;
  if (bias)
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  if (aux)
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                                sizeof(aux)));
  const float alpha = 1.0f;
  const cublasStatus_t st =
      cublasLtMatmul(cublaslt_, plan->desc, &alpha, pb, plan->a, pa, plan->b, &beta, c, plan->c, c, plan->c,
                     &plan->algo, lt_workspace_, workspace_bytes_, stream_);
  if (st != CUBLAS_STATUS_SUCCESS) {
    plan->usable = false;  // remember, and take the other path from now on
    return false;
  }
  return true;
}

void CudaBackend::Matmul(float* c, Operand a, Operand b, const float* bias, int M, int N, int K, bool trans_a,
                         bool trans_b, float beta, Compute compute) {
  if (M <= 0 || N <= 0) return;
  const cudaDataType_t type = cuda::GemmType(compute);
  const void* pa = PrepareOperand(a, static_cast<size_t>(M) * K, compute, cuda::Scratch::kMatmulA);
  const void* pb = PrepareOperand(b, static_cast<size_t>(K) * N, compute, cuda::Scratch::kMatmulB);

  // cuBLASLt for the common, aligned case; the bias epilogue only when beta == 0, where its semantics are
  // unambiguous.
  const bool fuse_bias = bias && beta == 0.0f;
  const int epi = fuse_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  if (LtMatmul(c, pa, pb, type, fuse_bias ? bias : nullptr, nullptr, epi, M, N, K, trans_a, trans_b, beta)) {
    if (bias && !fuse_bias) cuda::LaunchAddBiasRows(c, bias, M, N, stream_);
    return;
  }
  const int m = N, n = M, k = K;
  const bool tx = trans_b, ty = trans_a;
  // (max with 1: BLAS wants leading dimensions >= 1 even for K == 0, where C = beta * C (+ bias).)
  const int ldx = std::max(1, trans_b ? K : N), ldy = std::max(1, trans_a ? M : K), ldc = N;
  const float alpha = 1.0f;
  CUBLAS_CHECK(cublasGemmEx(cublas_, tx ? CUBLAS_OP_T : CUBLAS_OP_N, ty ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k,
                            &alpha, pb, type, ldx, pa, type, ldy, &beta, c, CUDA_R_32F, ldc,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (bias) cuda::LaunchAddBiasRows(c, bias, M, N, stream_);
}

// bf16 compute: cuBLASLt (or cublasGemmEx for unaligned shapes, e.g. V = 50257) stores the fp32-accumulated
// product as bf16. Other computes: the Backend default (an fp32 product, then a cast).
void CudaBackend::MatmulToBF16(uint16_t* c, Operand a, Operand b, const float* bias, int M, int N, int K,
                               bool trans_a, bool trans_b, Compute compute) {
  if (M <= 0 || N <= 0) return;
  if (compute == Compute::kBF16) {
    const void* pa = PrepareOperand(a, static_cast<size_t>(M) * K, compute, cuda::Scratch::kMatmulA);
    const void* pb = PrepareOperand(b, static_cast<size_t>(K) * N, compute, cuda::Scratch::kMatmulB);
    const int epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    if (LtMatmul(c, pa, pb, CUDA_R_16BF, bias, nullptr, epi, M, N, K, trans_a, trans_b, 0.0f, CUDA_R_16BF))
      return;
    if (!bias) {
      const int ldx = std::max(1, trans_b ? K : N), ldy = std::max(1, trans_a ? M : K), ldc = N;
      const float alpha = 1.0f, beta = 0.0f;
      CUBLAS_CHECK(cublasGemmEx(cublas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, pb, CUDA_R_16BF, ldx,
                                pa, CUDA_R_16BF, ldy, &beta, c, CUDA_R_16BF, ldc, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
      return;
    }
    // cuBLASLt documents a bf16 output's bias as bf16, and tern adds an fp32 bias before the one rounding, so
    // it may decline: then the fp32 product with its bias goes to scratch (Matmul's fused fp32 epilogue) and
    // is rounded once. Scratch, not a temporary allocation: this is every layer's qkv projection.
    static bool noted = false;
    if (!noted) {
      noted = true;
      std::fprintf(
          stderr,
          "[tern cuda] MatmulToBF16 with a bias (%dx%dx%d): cuBLASLt declined the fused epilogue; an "
          "fp32 product, then a rounding\n",
          M, N, K);
    }
    const size_t n = static_cast<size_t>(M) * N;
    auto* y = static_cast<float*>(ScratchBuffer(cuda::Scratch::kMatmulOut, n * sizeof(float)));
    Matmul(y, a, b, bias, M, N, K, trans_a, trans_b, 0.0f, compute);
    cuda::LaunchCastF32ToBF16(c, y, n, stream_);
    return;
  }
  // fp32 / fp16 compute: the fp32 product, then the cast.
  Backend::MatmulToBF16(c, a, b, bias, M, N, K, trans_a, trans_b, compute);
}

// GELU_AUX(_BIAS): D = gelu(AB + bias) is the output, the pre-activation AB + bias goes to the aux buffer.
void CudaBackend::MatmulGelu(float* out, float* pre, Operand a, Operand b, const float* bias, int M, int N,
                             int K, bool trans_a, bool trans_b, Compute compute) {
  if (M <= 0 || N <= 0) return;
  const cudaDataType_t type = cuda::GemmType(compute);
  const void* pa = PrepareOperand(a, static_cast<size_t>(M) * K, compute, cuda::Scratch::kMatmulA);
  const void* pb = PrepareOperand(b, static_cast<size_t>(K) * N, compute, cuda::Scratch::kMatmulB);
  const int epi = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  if (LtMatmul(out, pa, pb, type, bias, pre, epi, M, N, K, trans_a, trans_b, 0.0f)) return;
  // Unfused: Matmul converts the operands again (into the same scratch, in stream order).
  Backend::MatmulGelu(out, pre, a, b, bias, M, N, K, trans_a, trans_b, compute);
}

// DGELU: D = gelu'(aux) * AB, aux the forward's pre-activation.
void CudaBackend::MatmulDGelu(float* dinp, const float* pre, Operand a, Operand b, int M, int N, int K,
                              bool trans_a, bool trans_b, Compute compute) {
  if (M <= 0 || N <= 0) return;
  const cudaDataType_t type = cuda::GemmType(compute);
  const void* pa = PrepareOperand(a, static_cast<size_t>(M) * K, compute, cuda::Scratch::kMatmulA);
  const void* pb = PrepareOperand(b, static_cast<size_t>(K) * N, compute, cuda::Scratch::kMatmulB);
  if (LtMatmul(dinp, pa, pb, type, nullptr, pre, CUBLASLT_EPILOGUE_DGELU, M, N, K, trans_a, trans_b, 0.0f))
    return;
  Backend::MatmulDGelu(dinp, pre, a, b, M, N, K, trans_a, trans_b, compute);
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
