// The inference ops of backend.h: the reference paged attention against the training attention (an
// independent oracle), the fast CPU versions against the reference, and row independence (a row's result is
// bitwise the same alone or in any batch), which batching invariance of the server rests on.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "backend/bf16.h"
#include "infer/inference_model.h"
#include "infer/quantize.h"
#include "testing/ops.h"

namespace tern {
namespace {

using testing::Arena;
using testing::ExpectClose;
using testing::Uniform;

constexpr int C = 64, kBlocks = 40, kMaxBlocks = 12;

// The cache's shape and element type. C = 64, NH = 4, bs = 4 takes the fast backend's scalar path; bs a
// multiple of 16 with hs = 16..128 in steps of 16 its vector path.
struct Geometry {
  int C, NH, bs;
  DType kv;
  std::string Name() const {
    return "C=" + std::to_string(C) + " NH=" + std::to_string(NH) + " bs=" + std::to_string(bs) + " " +
           DTypeName(kv);
  }
};
constexpr Geometry kSmall{C, 4, 4, DType::kF32};

// A ragged batch: per sequence (q_len, ctx_len), rows concatenated; block tables scrambled so that
// sequences use non-contiguous blocks in no particular order.
struct Ragged {
  std::vector<int32_t> seqs, tables, slots;
  int N = 0, S = 0;
  Ragged(const std::vector<std::pair<int, int>>& shape, int bs, std::mt19937& rng) {
    std::vector<int32_t> perm(kBlocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    int next = 0;
    for (auto [q_len, ctx] : shape) {
      seqs.insert(seqs.end(), {N, q_len, ctx});
      std::vector<int32_t> table(kMaxBlocks, 0);
      for (int b = 0; b < (ctx + bs - 1) / bs; b++) table[b] = perm[next++];
      tables.insert(tables.end(), table.begin(), table.end());
      for (int p = ctx - q_len; p < ctx; p++) slots.push_back(table[p / bs] * bs + p % bs);
      N += q_len;
      S++;
    }
  }
};

// Fills the cache for every position of every sequence (the earlier ones from a separate "past" qkv), then
// runs the attention for the new rows. The cache starts as NaN: a kernel that read a slot nobody wrote
// (beyond a sequence's last position in its last block) would spread it.
std::vector<float> RunPaged(Backend& be, const Geometry& g, const Ragged& r, const std::vector<float>& qkv,
                            const std::vector<float>& past_kv) {
  Arena ar(be);
  const size_t cache_bytes = kBlocks * KvBlockBytes(g.kv, g.C, g.NH, g.bs);
  // NaN as fp32 and as bf16 (and as an int8 block's scales; its elements become -64 and 127)
  const std::vector<uint16_t> nan_bits(cache_bytes / 2, 0x7fc0);
  void* k = ar.In(nan_bits);
  void* v = ar.In(nan_bits);
  // past positions: write them through KvCacheWrite with rows of past_kv
  std::vector<int32_t> past_slots;
  for (int s = 0; s < r.S; s++) {
    const int q_len = r.seqs[3 * s + 1], ctx = r.seqs[3 * s + 2];
    for (int p = 0; p < ctx - q_len; p++)
      past_slots.push_back(r.tables[s * kMaxBlocks + p / g.bs] * g.bs + p % g.bs);
  }
  if (!past_slots.empty()) {
    be.KvCacheWrite(k, v, g.kv, ar.In(past_kv), ar.In(past_slots), static_cast<int>(past_slots.size()), g.C,
                    g.NH, g.bs);
  }
  const float* d_qkv = ar.In(qkv);
  be.KvCacheWrite(k, v, g.kv, d_qkv, ar.In(r.slots), r.N, g.C, g.NH, g.bs);
  float* out = ar.Zeros<float>(static_cast<size_t>(r.N) * g.C);
  be.PagedAttentionForward(out, d_qkv, k, v, g.kv, ar.In(r.seqs), ar.In(r.tables), r.S, kMaxBlocks, r.N, g.C,
                           g.NH, g.bs);
  return ar.Out(out, static_cast<size_t>(r.N) * g.C);
}

// The training attention over qkv[T, 3C] (one sequence), the independent oracle.
std::vector<float> TrainingAttention(const std::vector<float>& qkv, int T, int NH) {
  auto ref = MakeCpuReferenceBackend();
  Arena ar(*ref);
  float* out = ar.Zeros<float>(static_cast<size_t>(T) * C);
  float* att = ar.Zeros<float>(static_cast<size_t>(NH) * T * T);
  ref->AttentionForward(out, att, ar.In(qkv), 1, T, C, NH, Compute::kF32);
  return ar.Out(out, static_cast<size_t>(T) * C);
}

TEST(PagedAttention, ReferenceMatchesTrainingAttention) {
  std::mt19937 rng(1);
  const int T = 23;
  auto qkv = Uniform(rng, static_cast<size_t>(T) * 3 * C);
  auto ref = MakeCpuReferenceBackend();
  auto want = TrainingAttention(qkv, T, kSmall.NH);
  // whole prompt at once
  Ragged whole({{T, T}}, kSmall.bs, rng);
  ExpectClose(RunPaged(*ref, kSmall, whole, qkv, {}), want, 1e-5, 1e-6, "paged, one chunk");
  // the last 9 rows as a second chunk over a cache holding the first 14 positions
  Ragged chunk({{9, T}}, kSmall.bs, rng);
  std::vector<float> past(qkv.begin(), qkv.begin() + 14 * 3 * C), rest(qkv.begin() + 14 * 3 * C, qkv.end());
  std::vector<float> tail(want.begin() + 14 * C, want.end());
  ExpectClose(RunPaged(*ref, kSmall, chunk, rest, past), tail, 1e-5, 1e-6, "paged, second chunk");
}

// What an int8 cache holds for x[hs], one head's key or value (backend.h): nearbyint(x * 127 / max|x|)
// times max|x| / 127.
void RoundHeadToInt8(float* x, int hs) {
  float m = 0.0f;
  for (int j = 0; j < hs; j++) m = std::max(m, std::fabs(x[j]));
  const float inv = m > 0.0f ? 127.0f / m : 0.0f;
  for (int j = 0; j < hs; j++) x[j] = std::nearbyint(x[j] * inv) * (m / 127.0f);
}

TEST(PagedAttention, Int8CacheIsTheTrainingAttentionOfQuantizedKeysAndValues) {
  std::mt19937 rng(7);
  const int T = 21;
  const Geometry i8{C, 4, 16, DType::kI8};
  const int hs = C / i8.NH;
  auto qkv = Uniform(rng, static_cast<size_t>(T) * 3 * C);
  qkv[5 * 3 * C + C + 2 * hs + 3] = 9.0f;  // one head's key with a large element: coarse steps for the rest
  for (int j = 0; j < hs; j++) qkv[7 * 3 * C + 2 * C + hs + j] = 0.0f;  // an all-zero value head
  auto rounded = qkv;  // queries stay fp32; each head's key and value quantised with its own scale
  for (int t = 0; t < T; t++)
    for (int h = 0; h < 2 * i8.NH; h++) RoundHeadToInt8(&rounded[t * 3 * C + C + h * hs], hs);
  for (auto& be : {MakeCpuReferenceBackend(), MakeCpuFastBackend()}) {
    Ragged whole({{T, T}}, i8.bs, rng);
    auto got = RunPaged(*be, i8, whole, qkv, {});
    ExpectClose(got, TrainingAttention(rounded, T, i8.NH), 1e-5, 1e-6, be->name() + ": int8 cache");
    // and it is not the fp32 result: the rounding is real
    auto exact = TrainingAttention(qkv, T, i8.NH);
    double max_diff = 0;
    for (size_t i = 0; i < got.size(); i++)
      max_diff = std::max(max_diff, double(std::fabs(got[i] - exact[i])));
    EXPECT_GT(max_diff, 1e-4);
    EXPECT_LT(max_diff, 5e-2);
  }
}

TEST(PagedAttention, Bf16CacheIsTheTrainingAttentionOfRoundedKeysAndValues) {
  std::mt19937 rng(6);
  const int T = 21;
  auto qkv = Uniform(rng, static_cast<size_t>(T) * 3 * C);
  auto rounded = qkv;  // the queries stay fp32; keys and values are what a bf16 cache holds
  for (int t = 0; t < T; t++)
    for (int i = C; i < 3 * C; i++) rounded[t * 3 * C + i] = RoundToBF16(qkv[t * 3 * C + i]);
  const Geometry bf16{C, 4, 16, DType::kBF16};
  auto ref = MakeCpuReferenceBackend();
  Ragged whole({{T, T}}, bf16.bs, rng);
  auto got = RunPaged(*ref, bf16, whole, qkv, {});
  ExpectClose(got, TrainingAttention(rounded, T, bf16.NH), 1e-5, 1e-6, "bf16 cache vs rounded inputs");
  // and it is not the fp32 result: the rounding is real (bf16 keeps 8 bits of mantissa)
  auto exact = TrainingAttention(qkv, T, bf16.NH);
  double max_diff = 0;
  for (size_t i = 0; i < got.size(); i++) max_diff = std::max(max_diff, double(std::fabs(got[i] - exact[i])));
  EXPECT_GT(max_diff, 1e-4);
  EXPECT_LT(max_diff, 2e-2);
}

// The fast backend against the reference on a ragged batch, and each sequence alone against its rows of the
// batch (bitwise).
void ExpectFastMatchesReferenceAndRowIndependent(const Geometry& g,
                                                 const std::vector<std::pair<int, int>>& shape) {
  std::mt19937 rng(2);
  Ragged batch(shape, g.bs, rng);
  auto qkv = Uniform(rng, static_cast<size_t>(batch.N) * 3 * g.C);
  int past_rows = 0;
  for (auto [q, ctx] : shape) past_rows += ctx - q;
  auto past = Uniform(rng, static_cast<size_t>(past_rows) * 3 * g.C);
  auto ref = MakeCpuReferenceBackend();
  auto fast = MakeCpuFastBackend();
  auto want = RunPaged(*ref, g, batch, qkv, past);
  auto got = RunPaged(*fast, g, batch, qkv, past);
  ExpectClose(got, want, 1e-5, 1e-6, "fast paged attention " + g.Name());
  int row = 0, past_row = 0;
  for (int s = 0; s < batch.S; s++) {
    auto [q_len, ctx] = shape[s];
    Ragged one({{q_len, ctx}}, g.bs, rng);
    one.tables.assign(batch.tables.begin() + s * kMaxBlocks, batch.tables.begin() + (s + 1) * kMaxBlocks);
    one.slots.assign(batch.slots.begin() + row, batch.slots.begin() + row + q_len);
    const size_t w = 3 * static_cast<size_t>(g.C);
    std::vector<float> q1(qkv.begin() + row * w, qkv.begin() + (row + q_len) * w);
    std::vector<float> p1(past.begin() + past_row * w, past.begin() + (past_row + ctx - q_len) * w);
    auto alone = RunPaged(*fast, g, one, q1, p1);
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), got.begin() + row * g.C)) << g.Name() << " seq " << s;
    row += q_len;
    past_row += ctx - q_len;
  }
}

TEST(PagedAttention, FastMatchesReferenceAndIsRowIndependent) {
  // scalar path (bs 4; hs 160 > 128), vector path with hs 16, 48, 64 and bs 16, 32; all element types
  for (const Geometry& g : {kSmall, Geometry{C, 4, 16, DType::kF32}, Geometry{96, 2, 16, DType::kF32},
                            Geometry{128, 2, 32, DType::kBF16}, Geometry{C, 4, 4, DType::kBF16},
                            Geometry{160, 1, 16, DType::kBF16}, Geometry{C, 4, 16, DType::kI8},
                            Geometry{128, 2, 32, DType::kI8}, Geometry{C, 4, 4, DType::kI8}})
    ExpectFastMatchesReferenceAndRowIndependent(g, {{1, 17}, {7, 7}, {1, 1}, {5, 30}, {1, 44}});
}

// Batches big enough for the threaded path (work split over threads by context length, at row and at head
// boundaries): a row's result must not depend on which thread ran it or where the split fell.
TEST(PagedAttention, ThreadedSplitIsRowIndependent) {
  ExpectFastMatchesReferenceAndRowIndependent(Geometry{768, 12, 16, DType::kBF16},
                                              {{1, 190}, {7, 7}, {1, 1}, {5, 30}, {1, 44}});
  // one long row and a short one: the split falls between the heads of the long row
  ExpectFastMatchesReferenceAndRowIndependent(Geometry{768, 12, 64, DType::kF32}, {{1, 700}, {3, 3}});
  ExpectFastMatchesReferenceAndRowIndependent(Geometry{768, 12, 16, DType::kI8}, {{1, 190}, {7, 7}, {5, 30}});
}

TEST(EmbedTokens, FastMatchesReference) {
  std::mt19937 rng(3);
  const int V = 50, T = 20, N = 13;
  auto wte = Uniform(rng, V * C), wpe = Uniform(rng, T * C);
  auto tokens = testing::Tokens(rng, N, V), positions = testing::Tokens(rng, N, T);
  std::vector<std::vector<float>> outs;
  for (auto& be : {MakeCpuReferenceBackend(), MakeCpuFastBackend()}) {
    Arena ar(*be);
    float* out = ar.Zeros<float>(N * C);
    be->EmbedTokens(out, ar.In(tokens), ar.In(positions), ar.In(wte), ar.In(wpe), N, C);
    outs.push_back(ar.Out(out, N * C));
  }
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(outs[0][5 * C + 3], wte[tokens[5] * C + 3] + wpe[positions[5] * C + 3]);
}

std::vector<float> RunInt8(Backend& be, const std::vector<float>& x, const Int8Matrix& w,
                           const std::vector<float>& bias, int N) {
  Arena ar(be);
  float* out = ar.Zeros<float>(static_cast<size_t>(N) * w.OC);
  be.MatmulInt8(out, ar.In(x), ar.In(w.packed), ar.In(w.scale), bias.empty() ? nullptr : ar.In(bias), N, w.OC,
                w.K);
  return ar.Out(out, static_cast<size_t>(N) * w.OC);
}

TEST(MatmulInt8, FastMatchesReferenceAndFp32) {
  std::mt19937 rng(4);
  // Shapes reach every tile kind: 1-4 rows x 4 groups, 5-8 x 2, 9-16 x 1, and a short last block. On AMX
  // CPUs 8+ rows with K % 64 == 0 go to tdpbssd (one and two groups a tile, several row tiles with a padded
  // last one) while a row alone goes to vpdpbusd: the row-independence check below holds them bit for bit.
  for (auto [N, OC, K] : {std::tuple{1, 48, 64},
                          {8, 40, 64},
                          {33, 50, 192},
                          {5, 37, 20},
                          {70, 200, 128},
                          {9, 16, 256},
                          {16, 256, 64},
                          {24, 130, 32},
                          {7, 64, 8}}) {
    auto w = Uniform(rng, static_cast<size_t>(OC) * K);
    auto x = Uniform(rng, static_cast<size_t>(N) * K);
    auto bias = Uniform(rng, OC);
    Int8Matrix q = QuantizeInt8(w.data(), OC, K);
    auto ref = MakeCpuReferenceBackend();
    auto fast = MakeCpuFastBackend();
    auto want = RunInt8(*ref, x, q, bias, N);
    auto got = RunInt8(*fast, x, q, bias, N);
    const std::string what =
        "N=" + std::to_string(N) + " OC=" + std::to_string(OC) + " K=" + std::to_string(K);
    ExpectClose(got, want, 1e-6, 1e-6, "fast int8 vs reference " + what);
    EXPECT_EQ(RunInt8(*fast, x, q, {}, N)[0] + bias[0], got[0]) << "bias is added last";
    // The int8 product approximates the fp32 one: errors are a few quantisation steps of the sum.
    Arena ar(*ref);
    float* out = ar.Zeros<float>(static_cast<size_t>(N) * OC);
    ref->Matmul(out, F32(ar.In(x)), F32(ar.In(w)), ar.In(bias), N, OC, K, false, true, 0.0f, Compute::kF32);
    ExpectClose(got, ar.Out(out, static_cast<size_t>(N) * OC), 0.0, 0.03, "int8 vs fp32 " + what);
    // Row independence: each row alone gives bitwise the same outputs.
    for (int n = 0; n < N; n += std::max(1, N / 4)) {
      std::vector<float> row(x.begin() + n * K, x.begin() + (n + 1) * K);
      auto alone = RunInt8(*fast, row, q, bias, 1);
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), got.begin() + n * OC)) << what << " row " << n;
    }
  }
}

TEST(QuantizeInt8, RoundTripIsWithinHalfAStep) {
  std::mt19937 rng(5);
  const int OC = 21, K = 12;
  auto w = Uniform(rng, OC * K);
  w[3 * K + 2] = 0.0f;
  for (int k = 0; k < K; k++) w[7 * K + k] = 0.0f;  // an all-zero row
  Int8Matrix q = QuantizeInt8(w.data(), OC, K);
  auto back = DequantizeInt8(q);
  for (int o = 0; o < OC; o++)
    for (int k = 0; k < K; k++)
      EXPECT_LE(std::fabs(back[o * K + k] - w[o * K + k]), 0.5f * q.scale[o] * 1.0001f) << o << "," << k;
  EXPECT_EQ(q.scale[7], 0.0f);
  EXPECT_EQ(q.packed.size(), 32u * K);  // OC padded to 32
}

// `--kv-dtype auto` (tern serve's default): bf16 with int8 weights, fp32 with fp32 weights; int8 only when
// asked.
TEST(KvDtype, AutoFollowsTheWeights) {
  auto dtype = [](const char* name, Quantize q) {
    auto r = ParseKvDtype(name, q);
    EXPECT_TRUE(r.ok()) << name;
    return r.ok() ? *r : DType::kI32;
  };
  EXPECT_EQ(dtype("auto", Quantize::kInt8), DType::kBF16);
  EXPECT_EQ(dtype("auto", Quantize::kNone), DType::kF32);
  EXPECT_EQ(dtype("fp32", Quantize::kInt8), DType::kF32);
  EXPECT_EQ(dtype("bf16", Quantize::kNone), DType::kBF16);
  EXPECT_EQ(dtype("int8", Quantize::kNone), DType::kI8);
  auto bad = ParseKvDtype("fp8", Quantize::kNone);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("use auto, fp32, bf16 or int8"), std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace tern
