// Causal scaled-dot-product attention as cuDNN graphs (train.attention=cudnn): the operation patterns cuDNN's
// fused flash-attention engines recognise (the ones cudnn-frontend's sdpa node lowers to), over tern's
// layout.
//
// Layout: q, k, v are column blocks of one bf16 qkv[B, T, 3C] row (head h at columns h*hs of each block);
// the output o[B, T, C] bf16; the statistics lse[B, NH, T] fp32, the logsumexp of each scaled, masked score
// row: the same values, at the same place, as the flash kernel's state (attention_flash.cu), so either
// backward can follow either forward. The backward writes bf16 dq, dk, dv into dqkv[B, T, 3C] (the qkv
// layout) and needs, besides q, k, v, o, dout (bf16 [B, T, C]) and lse, one fp32 scratch row sum
// D = rowsum(dout * o) per score row (kSoftmaxSum, [B, NH, T]), written by the graph itself.
//
// Determinism: the backward's dq is a plain product of the graph (no fp32 accumulation buffer with atomics:
// cudnn-frontend's deterministic form), so a step is bitwise reproducible, as tern's other kernels are.
#pragma once

#include <cstdint>

#include "backend/cuda/cudnn_graph.h"

namespace tern {
namespace cudnn {

struct SdpaShape {
  int64_t B = 0, T = 0, NH = 0, hs = 0;
  int64_t C() const { return NH * hs; }
};

// The uids of the graphs' memory tensors (Execute binds them).
enum SdpaUid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kScale,   // host float: 1 / sqrt(hs)
  kNegInf,  // host float: -inf, the masked scores
  kDO,
  kDQ,
  kDK,
  kDV,
  kSoftmaxSum,
  kOne,  // host float: 1
};

// Whether cuDNN's fused attention can take this shape in tern's layout: head size a multiple of 8 up to 128
// (every row then starts 16-byte aligned in qkv, o and dqkv). Pointers must also be 16-byte aligned.
bool SdpaShapeSupported(const SdpaShape& s);

// Adds the forward graph: o = softmax(mask(scale * q k^T)) v, and lse.
void AddSdpaForward(Graph& g, const SdpaShape& s);
// Adds the backward graph: dq, dk, dv from q, k, v, o, dout, lse (D in kSoftmaxSum).
void AddSdpaBackward(Graph& g, const SdpaShape& s);

// cuDNN's description of an NVIDIA H100 SXM (sm_90, 132 SMs), for device-less builds (cudnn_graph_test).
extern const char kH100Json[];

}  // namespace cudnn
}  // namespace tern
