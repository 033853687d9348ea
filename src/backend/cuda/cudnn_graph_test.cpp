// train.attention=cudnn's graphs, checked by cuDNN itself on a machine without a GPU: every tensor and
// operation is accepted as it is finalized, and for a described H100 (cuDNN's device-less build) the
// heuristics pick an engine that takes each graph and generates and compiles its kernel; only loading the
// kernel into a GPU driver is left. A pattern cuDNN's fused engines do not know finds no engine, so
// "compiled" is not a formality. Numbers (outputs against the CPU reference) need a GPU: cuda_flash_test.cpp.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

#include "backend/cuda/cudnn_sdpa.h"

namespace tern::cudnn {
namespace {

// The cuDNN library, or a skip saying why not.
const Api* ApiOrNull(std::string* why) {
  Result<const Api*> api = Load();
  if (!api.ok()) {
    *why = api.status().message();
    return nullptr;
  }
  return api.value();
}

// cuDNN's runtime compiler needs libcuda.so.1 loaded. On a machine with a GPU driver that is the driver;
// without one, the toolkit's stub stands in (it has every entry point and loads no kernel).
bool PrepareDriver(std::string* why) {
  if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL)) return true;
  const std::string stub = std::string(TERN_CUDA_LIBRARY_DIR) + "/stubs/libcuda.so";
  if (dlopen(stub.c_str(), RTLD_NOW | RTLD_GLOBAL)) return true;
  *why = "neither a GPU driver (libcuda.so.1) nor the CUDA toolkit's stub " + stub + " loads";
  return false;
}

class SdpaGraphs : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    api_ = ApiOrNull(&why);
    if (!api_) GTEST_SKIP() << "skipped: " << why;
  }
  // Builds for a described H100; true when an engine compiled the graph (Build itself can succeed only with a
  // driver and a GPU).
  bool CompilesForH100(Graph& g) {
    std::string why;
    if (!PrepareDriver(&why)) {
      ADD_FAILURE() << why;
      return false;
    }
    Result<Desc> device = DeviceFromJson(api_, kH100Json);
    EXPECT_TRUE(device.ok()) << device.status().message();
    if (!device.ok()) return false;
    Target target;
    target.device = device.value().get();
    const Status st = g.Build(target);
    EXPECT_FALSE(st.ok() && !g.compiled()) << "Build succeeded without compiling";
    if (!g.compiled()) std::printf("  not compiled: %s\n", st.message().c_str());
    return g.compiled();
  }
  const Api* api_ = nullptr;
};

const SdpaShape kShapes[] = {
    {4, 1024, 12, 64},  // GPT-2 124M at T = 1024
    {2, 67, 3, 32},     // odd sequence length, few heads
    {1, 1, 1, 8},       // one token, the smallest head
    {2, 256, 6, 128},   // the largest head cuDNN's fused engines take on every GPU
};

TEST_F(SdpaGraphs, EveryTensorAndOperationIsAccepted) {
  for (const SdpaShape& s : kShapes) {
    Graph fwd(api_), bwd(api_);
    AddSdpaForward(fwd, s);
    AddSdpaBackward(bwd, s);
    EXPECT_TRUE(fwd.status().ok()) << fwd.status().message();
    EXPECT_TRUE(bwd.status().ok()) << bwd.status().message();
    // matmul, scale, 4 causal-mask ops, 7 softmax ops, matmul
    EXPECT_EQ(fwd.op_count(), 14u);
    // D (3), scores and probabilities (8), dv (2), ds (4), dk (2), dq (2)
    EXPECT_EQ(bwd.op_count(), 21u);
  }
}

TEST_F(SdpaGraphs, ForwardAndBackwardCompileForAnH100) {
  for (const SdpaShape& s : {kShapes[0], kShapes[1]}) {
    Graph fwd(api_), bwd(api_);
    AddSdpaForward(fwd, s);
    AddSdpaBackward(bwd, s);
    EXPECT_TRUE(CompilesForH100(fwd)) << "forward B" << s.B << " T" << s.T;
    EXPECT_TRUE(CompilesForH100(bwd)) << "backward B" << s.B << " T" << s.T;
  }
}

// attention without the softmax: bf16 probabilities compile (a fused pattern); left in fp32 they do not.
TEST_F(SdpaGraphs, AnUnknownPatternFindsNoEngine) {
  const int64_t B = 2, T = 64, NH = 2, hs = 64, C = NH * hs, C3 = 3 * C;
  for (cudnnDataType_t p_type : {CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT}) {
    Graph g(api_);
    g.Io(kQ, {B, NH, T, hs}, {T * C3, hs, C3, 1}, CUDNN_DATA_BFLOAT16);
    g.Io(kK, {B, NH, hs, T}, {T * C3, hs, 1, C3}, CUDNN_DATA_BFLOAT16);
    g.Io(kV, {B, NH, T, hs}, {T * C3, hs, C3, 1}, CUDNN_DATA_BFLOAT16);
    g.Io(kO, {B, NH, T, hs}, {T * C, hs, C, 1}, CUDNN_DATA_BFLOAT16);
    const int64_t s = g.Virtual({B, NH, T, T}, {NH * T * T, T * T, T, 1}, CUDNN_DATA_FLOAT);
    g.Matmul("q_kt", kQ, kK, s);
    const int64_t p = g.Virtual({B, NH, T, T}, {NH * T * T, T * T, T, 1}, p_type);
    g.Pointwise("exp", CUDNN_POINTWISE_EXP, s, p);
    g.Matmul("p_v", p, kV, kO);
    ASSERT_TRUE(g.status().ok()) << g.status().message();
    EXPECT_EQ(CompilesForH100(g), p_type == CUDNN_DATA_BFLOAT16);
  }
}

TEST_F(SdpaGraphs, AMalformedOperationIsNamed) {
  Graph g(api_);
  g.Io(kQ, {1, 1, 4, 8}, {32, 32, 8, 1}, CUDNN_DATA_BFLOAT16);
  g.Io(kK, {1, 1, 8, 5}, {40, 40, 5, 1}, CUDNN_DATA_BFLOAT16);
  const int64_t wrong = g.Virtual({1, 1, 4, 4}, {16, 16, 4, 1}, CUDNN_DATA_FLOAT);  // should be [4, 5]
  g.Matmul("q_kt", kQ, kK, wrong);
  ASSERT_FALSE(g.status().ok());
  EXPECT_NE(g.status().message().find("matmul q_kt"), std::string::npos) << g.status().message();
  const Status st = g.Build(Target{});
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.message(), g.status().message());  // the first error is kept, nothing else is tried
}

TEST(SdpaShape, CudnnTakesHeadSizesThatAreMultiplesOf8UpTo128) {
  EXPECT_TRUE(SdpaShapeSupported({4, 1024, 12, 64}));
  EXPECT_TRUE(SdpaShapeSupported({1, 1, 1, 8}));
  EXPECT_TRUE(SdpaShapeSupported({1, 7, 2, 128}));
  EXPECT_FALSE(SdpaShapeSupported({1, 7, 2, 12}));
  EXPECT_FALSE(SdpaShapeSupported({1, 7, 2, 136}));
  EXPECT_FALSE(SdpaShapeSupported({0, 7, 2, 64}));
}

}  // namespace
}  // namespace tern::cudnn
