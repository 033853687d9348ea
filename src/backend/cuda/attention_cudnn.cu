// train.attention=cudnn: causal attention through cuDNN's fused flash-attention engines (the graphs of
// cudnn_sdpa.h), as llm.c's trainer does. cuDNN is loaded on first use (cudnn_graph.h); graphs are built once
// per shape (a runtime-compiled kernel: about a second the first time) and cached.
//
// The state of a layer (AttentionStateBytes(kCudnn, ...)) is the flash kernels' state: its first B*NH*T
// floats are the logsumexp of every score row, and cuDNN writes the same values there (its "stats"), so
// either backward can follow either forward. cuDNN's backward also reads the forward's output o[B, T, C],
// which the caller passes back (the layer keeps it anyway: the attention projection's operand), so the state
// holds no copy of it. The backward's scratch holds dout and dqkv in bf16 and the row sums D = rowsum(dout *
// o). Through the fp32 interface (tests; the model calls the bf16 one under bf16 compute) q, k, v and o are
// rounded to bf16 in the backend's own scratch.
//
// When cuDNN does not take a call (fp32 or fp16 compute, a head size that is not a multiple of 8 up to 128,
// pointers not 16-byte aligned, or no engine for the shape on this GPU) the flash kernels run it instead,
// with a note on stderr once per shape.
//
// Precision: q, k, v and dout in bf16, fp32 softmax and accumulation; the output and dq, dk, dv are rounded
// to bf16 by cuDNN (then widened: the interface's gradients are fp32). Deterministic (cudnn_sdpa.h).
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_common.cuh"

#ifndef TERN_HAVE_CUDNN
// Built without cuDNN's headers: the kind is never available, and nothing here runs.
namespace tern {
namespace cuda {
struct CudnnAttention {};
void CudnnAttentionDeleter::operator()(CudnnAttention* p) const {
  delete p;
}
}  // namespace cuda
bool CudaBackend::CudnnAvailable(std::string* why) const {
  if (why)
    *why = "this tern was built without cuDNN's headers (cudnn_graph.h); rebuild with cuDNN 9 installed";
  return false;
}
int64_t CudaBackend::cudnn_attention_forwards() const {
  return 0;
}
int64_t CudaBackend::cudnn_attention_backwards() const {
  return 0;
}
const cudnn::Graph* CudaBackend::CudnnFor(const void*, const void*, const void*, int, int, int, int, Compute,
                                          bool) {
  return nullptr;
}
bool CudaBackend::CudnnAttentionForward(void*, bool, void*, const void*, bool, int, int, int, int, Compute) {
  return false;
}
bool CudaBackend::CudnnAttentionBackward(float*, void*, const float*, const void*, const void*, bool,
                                         const void*, int, int, int, int, Compute) {
  return false;
}
}  // namespace tern
#else

#include "backend/cuda/cudnn_sdpa.h"

namespace tern {
namespace cuda {

namespace {

bool Aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

// Graphs per shape, the cuDNN handle, and the by-value scalars the graphs read.
struct CudnnAttention {
  struct Entry {
    std::unique_ptr<cudnn::Graph> fwd, bwd;
    bool fwd_ok = false, bwd_ok = false, fwd_tried = false, bwd_tried = false;
  };
  const cudnn::Api* api = nullptr;
  cudnnHandle_t handle = nullptr;
  std::map<std::tuple<int, int, int, int>, Entry> graphs;  // (B, T, NH, hs)
  float neg_inf = -INFINITY, one = 1.0f;
  bool broken = false;                              // cudnnCreate failed: the flash kernels run everything
  std::set<std::tuple<int, int, int, int> > noted;  // shapes already reported as not taken
  int64_t forward_calls = 0;                        // forwards cuDNN ran (tests check the path was taken)
  int64_t backward_calls = 0;                       // and backwards

  ~CudnnAttention() {
    graphs.clear();
    if (handle) api->Destroy(handle);
  }
};

void CudnnAttentionDeleter::operator()(CudnnAttention* p) const {
  delete p;
}

}  // namespace cuda

namespace {

// Builds a graph for this process's GPU; false (with one note on stderr) when cuDNN has no engine for it.
bool BuildGraph(cuda::CudnnAttention& c, std::unique_ptr<cudnn::Graph>& g, bool backward,
                const cudnn::SdpaShape& s) {
  g = std::make_unique<cudnn::Graph>(c.api);
  if (backward) {
    cudnn::AddSdpaBackward(*g, s);
  } else {
    cudnn::AddSdpaForward(*g, s);
  }
  cudnn::Target target;
  target.handle = c.handle;
  const Status st = g->Build(target);
  if (!st.ok()) {
    std::fprintf(
        stderr,
        "[tern cuda] cuDNN attention %s at B=%lld T=%lld NH=%lld hs=%lld: %s; the flash kernels run it "
        "instead\n",
        backward ? "backward" : "forward", static_cast<long long>(s.B), static_cast<long long>(s.T),
        static_cast<long long>(s.NH), static_cast<long long>(s.hs), st.message().c_str());
    g.reset();
    return false;
  }
  return true;
}

[[noreturn]] void CudnnFailed(const Status& st) {
  std::fprintf(stderr, "[tern cuda] %s\n", st.message().c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace

bool CudaBackend::CudnnAvailable(std::string* why) const {
  Result<const cudnn::Api*> api = cudnn::Load();
  if (!api.ok() && why) *why = api.status().message();
  return api.ok();
}

int64_t CudaBackend::cudnn_attention_forwards() const {
  return cudnn_ ? cudnn_->forward_calls : 0;
}

int64_t CudaBackend::cudnn_attention_backwards() const {
  return cudnn_ ? cudnn_->backward_calls : 0;
}

const cudnn::Graph* CudaBackend::CudnnFor(const void* qkv16, const void* out16, const void* state, int B,
                                          int T, int C, int NH, Compute compute, bool backward) {
  if (!cudnn_attention_ || attention_compute(compute) != Compute::kBF16 || C % NH != 0) return nullptr;
  if (!cudnn_) {
    Result<const cudnn::Api*> api = cudnn::Load();
    if (!api.ok()) return nullptr;  // SetAttentionKernel("cudnn") checked this already
    cudnn_.reset(new cuda::CudnnAttention);
    cudnn_->api = api.value();
    cudnnStatus_t st = cudnn_->api->Create(&cudnn_->handle);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnn_->api->SetStream(cudnn_->handle, stream_);
    if (st != CUDNN_STATUS_SUCCESS) {
      std::fprintf(stderr,
                   "[tern cuda] cuDNN could not start on this GPU (%s); the flash kernels run attention\n",
                   cudnn_->api->GetErrorString(st));
      cudnn_->broken = true;
    }
  }
  if (cudnn_->broken) return nullptr;
  const cudnn::SdpaShape s{B, T, NH, C / NH};
  const std::tuple<int, int, int, int> key{B, T, NH, C / NH};
  const char* declined =
      !cudnn::SdpaShapeSupported(s) ? "head size not a multiple of 8 up to 128"
      : !cuda::Aligned(state) || (qkv16 && !cuda::Aligned(qkv16)) || (out16 && !cuda::Aligned(out16))
          ? "q, k, v, the output or the attention state not 16-byte aligned"
          : nullptr;
  if (declined) {
    if (cudnn_->noted.insert(key).second)
      std::fprintf(
          stderr,
          "[tern cuda] cuDNN attention at B=%d T=%d NH=%d hs=%d: %s; the flash kernels run it instead\n", B,
          T, NH, C / NH, declined);
    return nullptr;
  }
  cuda::CudnnAttention::Entry& e = cudnn_->graphs[key];
  if (!e.fwd_tried) {
    e.fwd_tried = true;
    e.fwd_ok = BuildGraph(*cudnn_, e.fwd, false, s);
  }
  if (!e.fwd_ok) return nullptr;
  if (backward && !e.bwd_tried) {
    e.bwd_tried = true;
    e.bwd_ok = BuildGraph(*cudnn_, e.bwd, true, s);
  }
  if (backward && !e.bwd_ok) return nullptr;
  return backward ? e.bwd.get() : e.fwd.get();
}

bool CudaBackend::CudnnAttentionForward(void* out, bool out_bf16, void* state, const void* qkv, bool qkv_bf16,
                                        int B, int T, int C, int NH, Compute compute) {
  const size_t n = static_cast<size_t>(B) * T * C;
  const cudnn::Graph* graph =
      CudnnFor(qkv_bf16 ? qkv : nullptr, out_bf16 ? out : nullptr, state, B, T, C, NH, compute, false);
  if (!graph) return false;
  cuda::CudnnAttention* c = cudnn_.get();
  const uint16_t* q = static_cast<const uint16_t*>(qkv);
  if (!qkv_bf16) {  // the fp32 interface at bf16 compute: q, k, v rounded to bf16, as every kind does
    auto* q16 = static_cast<uint16_t*>(ScratchBuffer(cuda::Scratch::kAttnQkv, 3 * n * sizeof(uint16_t)));
    cuda::LaunchCastF32ToBF16(q16, static_cast<const float*>(qkv), 3 * n, stream_);
    q = q16;
  }
  float* lse = static_cast<float*>(state);
  // The output straight into the caller's bf16 buffer, else into scratch and widened after.
  uint16_t* o = out_bf16
                    ? static_cast<uint16_t*>(out)
                    : static_cast<uint16_t*>(ScratchBuffer(cuda::Scratch::kAttnOut, n * sizeof(uint16_t)));
  const cudnn::Graph& g = *graph;
  void* ws = g.workspace_bytes() > 0
                 ? ScratchBuffer(cuda::Scratch::kCudnnWorkspace, static_cast<size_t>(g.workspace_bytes()))
                 : nullptr;
  float scale = 1.0f / std::sqrt(static_cast<float>(C / NH));
  const Status st = g.Execute(
      c->handle, {cudnn::kQ, cudnn::kK, cudnn::kV, cudnn::kO, cudnn::kStats, cudnn::kScale, cudnn::kNegInf},
      {const_cast<uint16_t*>(q), const_cast<uint16_t*>(q + C), const_cast<uint16_t*>(q + 2 * C), o, lse,
       &scale, &c->neg_inf},
      ws);
  if (!st.ok()) CudnnFailed(st);
  if (!out_bf16) cuda::LaunchWidenBF16ToF32(static_cast<float*>(out), o, n, stream_);
  c->forward_calls++;
  return true;
}

bool CudaBackend::CudnnAttentionBackward(float* dqkv, void* scratch, const float* dout, const void* qkv,
                                         const void* out, bool bf16, const void* state, int B, int T, int C,
                                         int NH, Compute compute) {
  const size_t n = static_cast<size_t>(B) * T * C;
  if (!cuda::Aligned(scratch)) return false;
  const cudnn::Graph* graph =
      CudnnFor(bf16 ? qkv : nullptr, bf16 ? out : nullptr, state, B, T, C, NH, compute, true);
  if (!graph) return false;
  cuda::CudnnAttention* c = cudnn_.get();
  const uint16_t* q = static_cast<const uint16_t*>(qkv);
  const uint16_t* o = static_cast<const uint16_t*>(out);
  if (!bf16) {  // the fp32 interface: q, k, v and o rounded to bf16 (o: the bits a cuDNN forward rounded)
    auto* q16 = static_cast<uint16_t*>(ScratchBuffer(cuda::Scratch::kAttnQkv, 3 * n * sizeof(uint16_t)));
    cuda::LaunchCastF32ToBF16(q16, static_cast<const float*>(qkv), 3 * n, stream_);
    q = q16;
    auto* o16 = static_cast<uint16_t*>(ScratchBuffer(cuda::Scratch::kAttnOut, n * sizeof(uint16_t)));
    cuda::LaunchCastF32ToBF16(o16, static_cast<const float*>(out), n, stream_);
    o = o16;
  }
  const float* lse = static_cast<const float*>(state);
  auto* dout16 = static_cast<uint16_t*>(scratch);  // [n] bf16, then dqkv [3n] bf16, then D [B*NH*T] fp32
  uint16_t* dqkv16 = dout16 + n;
  auto* dsum = reinterpret_cast<float*>(dqkv16 + 3 * n);
  cuda::LaunchCastF32ToBF16(dout16, dout, n, stream_);
  const cudnn::Graph& g = *graph;
  void* ws = g.workspace_bytes() > 0
                 ? ScratchBuffer(cuda::Scratch::kCudnnWorkspace, static_cast<size_t>(g.workspace_bytes()))
                 : nullptr;
  float scale = 1.0f / std::sqrt(static_cast<float>(C / NH));
  const Status st =
      g.Execute(c->handle,
                {cudnn::kQ, cudnn::kK, cudnn::kV, cudnn::kO, cudnn::kDO, cudnn::kStats, cudnn::kDQ,
                 cudnn::kDK, cudnn::kDV, cudnn::kSoftmaxSum, cudnn::kScale, cudnn::kNegInf, cudnn::kOne},
                {const_cast<uint16_t*>(q), const_cast<uint16_t*>(q + C), const_cast<uint16_t*>(q + 2 * C),
                 const_cast<uint16_t*>(o), dout16, const_cast<float*>(lse), dqkv16, dqkv16 + C,
                 dqkv16 + 2 * C, dsum, &scale, &c->neg_inf, &c->one},
                ws);
  if (!st.ok()) CudnnFailed(st);
  cuda::LaunchWidenBF16ToF32(dqkv, dqkv16, 3 * n, stream_);
  c->backward_calls++;
  return true;
}

}  // namespace tern

#endif  // TERN_HAVE_CUDNN
