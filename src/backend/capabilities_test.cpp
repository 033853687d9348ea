// Backend::capabilities() of the CPU backends and of the fp16 emulation decorator, and, on every backend this
// machine has (CUDA where a GPU is visible), that the capabilities agree with what the backend accepts.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/registry.h"

namespace tern {
namespace {

const std::vector<DType> kAllKvDTypes = {DType::kF32, DType::kBF16, DType::kI8};

// cpu-ref keeps the plain attention kernel only (it is the oracle); cpu also has flash (fast_attention.cpp).
std::vector<std::string> CpuAttentionKinds(const std::string& name) {
  if (name.rfind("cpu-ref", 0) == 0) return {"naive"};
  return {"naive", "flash"};
}

void ExpectCpuCapabilities(const Capabilities& c, const std::string& what) {
  EXPECT_TRUE(c.host_addressable_memory) << what;
  EXPECT_FALSE(c.native_fp16) << what;
  EXPECT_EQ(c.kv_dtypes, kAllKvDTypes) << what;
  EXPECT_EQ(c.attention_kinds, CpuAttentionKinds(what)) << what;
  EXPECT_FALSE(c.is_gpu) << what;
}

TEST(BackendCapabilities, CpuBackends) {
  for (auto* make : {&MakeCpuReferenceBackend, &MakeCpuFastBackend}) {
    std::unique_ptr<Backend> be = make();
    const Capabilities c = be->capabilities();
    ExpectCpuCapabilities(c, be->name());
    EXPECT_FALSE(c.fp16_matmul) << be->name();
    EXPECT_TRUE(c.HasKvDType(DType::kI8)) << be->name();
    EXPECT_FALSE(c.HasKvDType(DType::kI32)) << be->name();
    EXPECT_TRUE(c.HasAttentionKind("naive")) << be->name();
    EXPECT_EQ(c.HasAttentionKind("flash"), be->name() == "cpu") << be->name();
    EXPECT_FALSE(c.HasAttentionKind("cudnn")) << be->name();  // cuDNN's fused attention is the CUDA backend's
    EXPECT_FALSE(be->SetAttentionKernel("cudnn")) << be->name();
    EXPECT_EQ(be->attention_kind(), AttentionKind::kNaive) << be->name();
    EXPECT_EQ(be->PciBusId(), "") << be->name();
  }
}

// cuDNN's state is the flash kernels' rows (the backward is handed the forward's output, so no copy of it is
// kept), and a scratch of bf16 dout and dqkv and one float per row; only at bf16 compute (the flash kernels
// run fp32 and fp16). Linear in B: the planner scales by B.
TEST(AttentionStateBytes, CudnnKeepsTheFlashRowsAndABf16BackwardScratch) {
  const int B = 2, T = 67, C = 96, NH = 3;
  const size_t rows = 2 * 3 * 67, n = 2 * 67 * 96;
  const AttentionMemory flash = AttentionStateBytes(AttentionKind::kFlash, B, T, C, NH, Compute::kBF16);
  const AttentionMemory cudnn = AttentionStateBytes(AttentionKind::kCudnn, B, T, C, NH, Compute::kBF16);
  EXPECT_EQ(flash.state, rows * 8);
  EXPECT_EQ(cudnn.state, rows * 8);
  EXPECT_EQ(cudnn.scratch, n * 2 + 3 * n * 2 + rows * 4);
  const AttentionMemory twice = AttentionStateBytes(AttentionKind::kCudnn, 2 * B, T, C, NH, Compute::kBF16);
  EXPECT_EQ(twice.state, 2 * cudnn.state);
  EXPECT_EQ(twice.scratch, 2 * cudnn.scratch);
  for (Compute c : {Compute::kF32, Compute::kF16}) {
    const AttentionMemory m = AttentionStateBytes(AttentionKind::kCudnn, B, T, C, NH, c);
    EXPECT_EQ(m.state, flash.state) << ComputeName(c);
    EXPECT_EQ(m.scratch, flash.scratch) << ComputeName(c);
  }
  EXPECT_STREQ(AttentionKindName(AttentionKind::kCudnn), "cudnn");
}

// The decorator passes its inner backend's capabilities on and adds an (emulated, so not native) fp16 matmul.
TEST(BackendCapabilities, Fp16EmulationAddsOnlyTheFp16Matmul) {
  for (auto* make : {&MakeCpuReferenceBackend, &MakeCpuFastBackend}) {
    std::unique_ptr<Backend> be = WithF16Emulation(make());
    EXPECT_NE(be->name().find("(fp16 emulated)"), std::string::npos) << be->name();
    const Capabilities c = be->capabilities();
    ExpectCpuCapabilities(c, be->name());
    EXPECT_TRUE(c.fp16_matmul) << be->name();
  }
}

// Every backend here: SetAttentionKernel takes exactly the listed kinds, "naive" is one of them, and a
// backend with fp16 hardware has the fp16 matmul.
TEST(BackendCapabilities, AgreeWithWhatTheBackendAccepts) {
  std::vector<std::string> devices = {"cpu-ref", "cpu"};
  if (CudaAvailable()) devices.push_back("cuda");
  for (const std::string& device : devices) {
    auto made = MakeBackend(device);
    ASSERT_TRUE(made.ok()) << device;
    std::unique_ptr<Backend> be = std::move(made).value();
    const Capabilities c = be->capabilities();
    EXPECT_TRUE(c.HasAttentionKind("naive")) << device;
    for (const std::string& kind : c.attention_kinds) {
      EXPECT_TRUE(be->SetAttentionKernel(kind)) << device;
      EXPECT_EQ(AttentionKindName(be->attention_kind()), kind) << device;  // the model sizes its state by it
    }
    EXPECT_TRUE(be->SetAttentionKernel("naive")) << device;
    EXPECT_EQ(be->attention_kind(), AttentionKind::kNaive) << device;
    EXPECT_FALSE(be->SetAttentionKernel("bogus")) << device;
    EXPECT_EQ(be->attention_kind(), AttentionKind::kNaive) << device;
    EXPECT_FALSE(c.kv_dtypes.empty()) << device;  // every backend here serves
    if (c.native_fp16) {
      EXPECT_TRUE(c.fp16_matmul) << device;
    }
    EXPECT_EQ(c.is_gpu, device == "cuda") << device;
    EXPECT_EQ(c.host_addressable_memory, !c.is_gpu) << device;  // true of the backends so far
  }
}

}  // namespace
}  // namespace tern
