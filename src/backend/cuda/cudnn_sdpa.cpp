// The causal attention graphs of cudnn_sdpa.h. The op sequences follow cuDNN's documented fused-attention
// patterns (as cudnn-frontend's sdpa and sdpa_backward nodes emit them); intermediates are fp32 except the
// probabilities (and their transposes) that feed a bf16 GEMM.
#include "backend/cuda/cudnn_sdpa.h"

#include <vector>

namespace tern {
namespace cudnn {
namespace {

using Dims = std::vector<int64_t>;
constexpr cudnnDataType_t kF32 = CUDNN_DATA_FLOAT, kBF16 = CUDNN_DATA_BFLOAT16;

// The shapes and strides of tern's layout.
struct Layout {
  int64_t B, T, NH, hs, C, C3;
  explicit Layout(const SdpaShape& s) : B(s.B), T(s.T), NH(s.NH), hs(s.hs), C(s.C()), C3(3 * s.C()) {}
  Dims heads() const { return {B, NH, T, hs}; }
  Dims heads_t() const { return {B, NH, hs, T}; }
  Dims in_qkv() const { return {T * C3, hs, C3, 1}; }    // q, v, dq, dk, dv: a head's [T, hs] in qkv rows
  Dims in_qkv_t() const { return {T * C3, hs, 1, C3}; }  // k^T, v^T
  Dims in_out() const { return {T * C, hs, C, 1}; }      // o, dout: [B, T, C]
  Dims rows() const { return {B, NH, T, 1}; }            // one value per score row
  Dims rows_str() const { return {NH * T, T, 1, 1}; }
  Dims scores() const { return {B, NH, T, T}; }
  Dims scores_str() const { return {NH * T * T, T * T, T, 1}; }
  Dims scores_t_str() const { return {NH * T * T, T * T, 1, T}; }  // the transpose of a score matrix
};

// Scores above the diagonal (key after query) become -inf: row >= col keeps a score.
int64_t CausalMask(Graph& g, const Layout& l, int64_t scores) {
  const int64_t row = g.Virtual(l.scores(), l.scores_str(), CUDNN_DATA_INT32);
  g.Pointwise("row_index", CUDNN_POINTWISE_GEN_INDEX, scores, row, -1, -1, kF32, 2);
  const int64_t col = g.Virtual(l.scores(), l.scores_str(), CUDNN_DATA_INT32);
  g.Pointwise("col_index", CUDNN_POINTWISE_GEN_INDEX, scores, col, -1, -1, kF32, 3);
  const int64_t keep = g.Virtual(l.scores(), l.scores_str(), CUDNN_DATA_BOOLEAN);
  g.Pointwise("row_ge_col", CUDNN_POINTWISE_CMP_GE, row, keep, col, -1, CUDNN_DATA_BOOLEAN);
  const int64_t masked = g.Virtual(l.scores(), l.scores_str(), kF32);
  g.Pointwise("causal_select", CUDNN_POINTWISE_BINARY_SELECT, scores, masked, kNegInf, keep);
  return masked;
}

}  // namespace

bool SdpaShapeSupported(const SdpaShape& s) {
  return s.B > 0 && s.T > 0 && s.NH > 0 && s.hs > 0 && s.hs % 8 == 0 && s.hs <= 128;
}

void AddSdpaForward(Graph& g, const SdpaShape& s) {
  const Layout l(s);
  g.Io(kQ, l.heads(), l.in_qkv(), kBF16);
  g.Io(kK, l.heads_t(), l.in_qkv_t(), kBF16);
  g.Io(kV, l.heads(), l.in_qkv(), kBF16);
  g.Io(kO, l.heads(), l.in_out(), kBF16);
  g.Io(kStats, l.rows(), l.rows_str(), kF32);
  g.Scalar(kScale, kF32);
  g.Scalar(kNegInf, kF32);

  const int64_t qk = g.Virtual(l.scores(), l.scores_str(), kF32);
  g.Matmul("q_kt", kQ, kK, qk);
  const int64_t scaled = g.Virtual(l.scores(), l.scores_str(), kF32);
  g.Pointwise("scale", CUDNN_POINTWISE_MUL, qk, scaled, kScale);
  const int64_t masked = CausalMask(g, l, scaled);
  // softmax with its statistics: lse = max + log(sum(exp(x - max)))
  const int64_t mx = g.Virtual(l.rows(), l.rows_str(), kF32);
  g.Reduce("row_max", CUDNN_REDUCE_TENSOR_MAX, masked, mx);
  const int64_t centred = g.Virtual(l.scores(), l.scores_str(), kF32);
  g.Pointwise("sub_max", CUDNN_POINTWISE_SUB, masked, centred, mx);
  const int64_t ex = g.Virtual(l.scores(), l.scores_str(), kF32);
  g.Pointwise("exp", CUDNN_POINTWISE_EXP, centred, ex);
  const int64_t sum = g.Virtual(l.rows(), l.rows_str(), kF32);
  g.Reduce("row_sum", CUDNN_REDUCE_TENSOR_ADD, ex, sum);
  const int64_t log_sum = g.Virtual(l.rows(), l.rows_str(), kF32);
  g.Pointwise("log", CUDNN_POINTWISE_LOG, sum, log_sum);
  g.Pointwise("lse", CUDNN_POINTWISE_ADD, mx, kStats, log_sum);
  const int64_t p = g.Virtual(l.scores(), l.scores_str(), kBF16);
  g.Pointwise("div_sum", CUDNN_POINTWISE_DIV, ex, p, sum);
  g.Matmul("p_v", p, kV, kO);
}

void AddSdpaBackward(Graph& g, const SdpaShape& s) {
  const Layout l(s);
  g.Io(kQ, l.heads(), l.in_qkv(), kBF16);
  g.Io(kK, l.heads_t(), l.in_qkv_t(), kBF16);
  g.Io(kV, l.heads_t(), l.in_qkv_t(), kBF16);
  g.Io(kO, l.heads(), l.in_out(), kBF16);
  g.Io(kDO, l.heads(), l.in_out(), kBF16);
  g.Io(kStats, l.rows(), l.rows_str(), kF32);
  g.Io(kDQ, l.heads(), l.in_qkv(), kBF16);
  g.Io(kDK, l.heads(), l.in_qkv(), kBF16);
  g.Io(kDV, l.heads(), l.in_qkv(), kBF16);
  g.Io(kSoftmaxSum, l.rows(), l.rows_str(), kF32);
  g.Scalar(kScale, kF32);
  g.Scalar(kNegInf, kF32);
  g.Scalar(kOne, kF32);

  // D = rowsum(dout * o), the softmax backward's subtrahend
  const int64_t do_o = g.Virtual(l.heads(), {l.NH * l.T * l.hs, l.T * l.hs, l.NH * l.hs, 1}, kF32);
  g.Pointwise("do_o", CUDNN_POINTWISE_MUL, kDO, do_o, kO);
  const int64_t d = g.Virtual(l.rows(), l.rows_str(), kF32);
  g.Reduce("rowsum_do_o", CUDNN_REDUCE_TENSOR_ADD, do_o, d);
  g.Pointwise("softmax_sum", CUDNN_POINTWISE_MUL, d, kSoftmaxSum, kOne);

  // p = exp(scale * q k^T - lse), masked
  const int64_t qk = g.Virtual(l.scores(), l.scores_str(), kF32);
  g.Matmul("q_kt", kQ, kK, qk);
  const int64_t scaled = g.Virtual(l.scores(), l.scores_str(), kF32);
  g.Pointwise("scale", CUDNN_POINTWISE_MUL, qk, scaled, kScale);
  const int64_t centred = g.Virtual(l.scores(), l.scores_str(), kF32);
  g.Pointwise("sub_lse", CUDNN_POINTWISE_SUB, scaled, centred, kStats);
  const int64_t masked = CausalMask(g, l, centred);
  const int64_t p = g.Virtual(l.scores(), l.scores_str(), kF32);
  g.Pointwise("exp", CUDNN_POINTWISE_EXP, masked, p);

  // dv = p^T dout
  const int64_t p_t = g.Virtual(l.scores(), l.scores_t_str(), kBF16);
  g.Reshape("p_t", p, p_t);
  g.Matmul("pt_do", p_t, kDO, kDV);

  // ds = p * (dout v^T - D) * scale
  const int64_t dp = g.Virtual(l.scores(), l.scores_str(), kF32);
  g.Matmul("do_vt", kDO, kV, dp);
  const int64_t dp_d = g.Virtual(l.scores(), l.scores_str(), kF32);
  g.Pointwise("sub_d", CUDNN_POINTWISE_SUB, dp, dp_d, kSoftmaxSum);
  const int64_t dsp = g.Virtual(l.scores(), l.scores_str(), kF32);
  g.Pointwise("mul_p", CUDNN_POINTWISE_MUL, dp_d, dsp, p);
  const int64_t ds = g.Virtual(l.scores(), l.scores_str(), kF32);
  g.Pointwise("scale_ds", CUDNN_POINTWISE_MUL, dsp, ds, kScale);

  // dk = ds^T q
  const int64_t ds_t = g.Virtual(l.scores(), l.scores_t_str(), kBF16);
  g.Reshape("ds_t", ds, ds_t);
  g.Matmul("dst_q", ds_t, kQ, kDK);

  // dq = ds k (k as [T, hs] again: the transpose of k^T)
  const int64_t k = g.Virtual(l.heads(), l.in_qkv(), kF32);
  g.Reshape("k", kK, k);
  g.Matmul("ds_k", ds, k, kDQ);
}

// The fields of cudaDeviceProp that cuDNN's device-property JSON holds, for an H100 SXM5 80 GB.
const char kH100Json[] =
    R"({"maxGridSize":[2147483647,65535,65535],"maxBlockSize":[1024,1024,64],"regsPerBlock":65536,)"
    R"("multiProcessorCount":132,"warpSize":32,"maxSharedMemoryPerBlock":49152,)"
    R"("maxSharedMemoryPerBlockOptin":232448,"reservedSharedMemoryPerBlock":1024,"maxRegistersPerSM":65536,)"
    R"("maxCtasPerSM":32,"maxThreadsPerBlock":1024,"maxThreadsPerSM":2048,"pciDeviceId":0,"isTccDriver":0,)"
    R"("supportCoopLaunch":1,"totalGlobalMem":85029158912,"smClockRateKHz":1980000,"memClockRateKHz":2619000,)"
    R"("l2CacheSize":52428800,"cudaDeviceId":0,"deviceVer":900,"driverVer":13000,)"
    R"("deviceName":"NVIDIA H100 80GB HBM3"})";

}  // namespace cudnn
}  // namespace tern
