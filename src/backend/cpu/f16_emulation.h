// fp16 mixed precision on a CPU without fp16 matmuls (this Zen 5 has AVX512-BF16 but not AVX512-FP16):
// a ForwardingBackend over an inner CPU backend that changes one call: that Matmul with Compute::kF16 first
// rounds both operands to fp16 (into its own scratch, kept as fp32) and then multiplies in fp32. The
// products of two fp16 values are exact in fp32, so this equals an fp16 x fp16 -> fp32 GEMM up to the
// summation order, which is what the trainer's fp16 path and its loss scaling need to be tested here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/forwarding_backend.h"

namespace tern {

// dst[i] = fp16(src[i]) widened back to fp32 (round-to-nearest-even; overflow -> inf), vectorised.
void RoundToF16Array(float* dst, const float* src, size_t n);

class F16EmulationBackend : public ForwardingBackend {
 public:
  explicit F16EmulationBackend(std::unique_ptr<Backend> inner) : ForwardingBackend(std::move(inner)) {}

  std::string name() const override { return inner()->name() + " (fp16 emulated)"; }
  // The inner backend's, plus fp16_matmul (emulated: native_fp16 stays false).
  Capabilities capabilities() const override {
    Capabilities c = inner()->capabilities();
    c.fp16_matmul = true;
    return c;
  }

  void Matmul(float* c, Operand a, Operand b, const float* bias, int M, int N, int K, bool trans_a,
              bool trans_b, float beta, Compute compute) override;
  // The GELU epilogues run unfused here (Backend's defaults: this Matmul, then the inner GELU op), so an fp16
  // one rounds its operands as Matmul does.
  void MatmulGelu(float* out, float* pre, Operand a, Operand b, const float* bias, int M, int N, int K,
                  bool trans_a, bool trans_b, Compute compute) override {
    Backend::MatmulGelu(out, pre, a, b, bias, M, N, K, trans_a, trans_b, compute);
  }
  void MatmulDGelu(float* dinp, const float* pre, Operand a, Operand b, int M, int N, int K, bool trans_a,
                   bool trans_b, Compute compute) override {
    Backend::MatmulDGelu(dinp, pre, a, b, M, N, K, trans_a, trans_b, compute);
  }

 private:
  // Rounds one operand into `scratch` (grown as needed, host memory: the inner backend is a CPU one).
  const float* Rounded(Operand op, size_t elems, std::vector<float>* scratch);

  std::vector<float> scratch_a_, scratch_b_;
};

}  // namespace tern
