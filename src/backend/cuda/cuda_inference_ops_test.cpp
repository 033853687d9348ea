// The inference ops of backend.h (EmbedTokens, KvCacheWrite, PagedAttentionForward, MatmulInt8) on CUDA
// against the CPU reference with the same inputs (label gpu, in cuda_ops_test; "skipped: no GPU" without
// one). Written without a GPU: run at the next scripts/gpu-check.
//
// Bounds: EmbedTokens and the KV cache bitwise (one add; a copy or the same round-to-nearest-even);
// PagedAttentionForward rel-max error 1e-5; MatmulInt8 1e-6 of each element plus 1e-6 of the largest (the
// int32 sums are exact; only the final float scaling may differ, by a fused multiply-add on the host). Row
// independence: each sequence (attention) or row (int8 matmul) alone gives bitwise the rows it had in the
// batch.
#include <numeric>
#include <utility>

#include "backend/bf16.h"
#include "testing/cuda.h"

namespace tern::testing {
namespace {

// The cache's shape and element type, and how many blocks its pool and a block table have.
struct Geometry {
  int C, NH, bs;
  DType kv;
  int num_blocks = 40, max_blocks = 12;
  std::string Name() const {
    return "C=" + std::to_string(C) + " NH=" + std::to_string(NH) + " (hs " + std::to_string(C / NH) +
           ") bs=" + std::to_string(bs) + " " + DTypeName(kv) + " max_blocks=" + std::to_string(max_blocks);
  }
};

// A ragged batch: per sequence (q_len, ctx_len), rows concatenated; block tables scrambled so that sequences
// use non-contiguous blocks in no particular order. past_slots: the slots of the positions before each
// sequence's new rows (filled from a separate "past" qkv).
struct Ragged {
  std::vector<int32_t> seqs, tables, slots, past_slots;
  int N = 0, S = 0;
  Ragged(const std::vector<std::pair<int, int>>& shape, const Geometry& g, std::mt19937& rng) {
    std::vector<int32_t> perm(g.num_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    int next = 0;
    for (auto [q_len, ctx] : shape) {
      seqs.insert(seqs.end(), {N, q_len, ctx});
      std::vector<int32_t> table(g.max_blocks, 0);
      for (int b = 0; b < (ctx + g.bs - 1) / g.bs; b++) table[b] = perm.at(next++);
      tables.insert(tables.end(), table.begin(), table.end());
      for (int p = 0; p < ctx - q_len; p++) past_slots.push_back(table[p / g.bs] * g.bs + p % g.bs);
      for (int p = ctx - q_len; p < ctx; p++) slots.push_back(table[p / g.bs] * g.bs + p % g.bs);
      N += q_len;
      S++;
    }
  }
};

// The KV cache after writing the past rows and the new rows, and the attention of the new rows.
struct PagedResult {
  std::vector<uint16_t> k, v;  // the caches' bytes, as 16-bit words
  std::vector<float> out;
};

// Runs KvCacheWrite (past rows, then the batch's rows) and PagedAttentionForward on one backend. The caches
// start as NaN: a kernel that read a slot nobody wrote (past a sequence's last position in its last block)
// would spread it.
PagedResult RunPaged(Backend& be, const Geometry& g, const Ragged& r, const std::vector<float>& qkv,
                     const std::vector<float>& past) {
  auto upload = [&](const auto& host) {
    DeviceBuffer b(&be, host.size() * sizeof(host[0]) + 64);
    be.Upload(b.data(), host.data(), host.size() * sizeof(host[0]));
    return b;
  };
  const size_t cache_words = static_cast<size_t>(g.num_blocks) * g.bs * g.C * DTypeSize(g.kv) / 2;
  const std::vector<uint16_t> nan_bits(cache_words, 0x7fc0);  // NaN as fp32 (0x7fc07fc0) and as bf16
  DeviceBuffer k = upload(nan_bits), v = upload(nan_bits);
  if (!r.past_slots.empty()) {
    DeviceBuffer d_past = upload(past), d_slots = upload(r.past_slots);
    be.KvCacheWrite(k.data(), v.data(), g.kv, d_past.as<float>(), d_slots.as<int32_t>(),
                    static_cast<int>(r.past_slots.size()), g.C, g.NH, g.bs);
  }
  DeviceBuffer d_qkv = upload(qkv), d_slots = upload(r.slots), d_seqs = upload(r.seqs),
               d_tables = upload(r.tables);
  be.KvCacheWrite(k.data(), v.data(), g.kv, d_qkv.as<float>(), d_slots.as<int32_t>(), r.N, g.C, g.NH, g.bs);
  const std::vector<float> sentinel(static_cast<size_t>(r.N) * g.C, 1e30f);
  DeviceBuffer out = upload(sentinel);
  be.PagedAttentionForward(out.as<float>(), d_qkv.as<float>(), k.data(), v.data(), g.kv, d_seqs.as<int32_t>(),
                           d_tables.as<int32_t>(), r.S, g.max_blocks, r.N, g.C, g.NH, g.bs);
  PagedResult res{std::vector<uint16_t>(cache_words), std::vector<uint16_t>(cache_words), sentinel};
  be.Download(res.k.data(), k.data(), cache_words * 2);
  be.Download(res.v.data(), v.data(), cache_words * 2);
  be.Download(res.out.data(), out.data(), res.out.size() * sizeof(float));
  return res;
}

class CudaInferenceOps : public CudaVsReference {
 protected:
  // The batch on both backends: the caches bitwise equal, the attention within 1e-5 (rel-max); then every
  // sequence alone on the GPU (same blocks, same cache contents) gives bitwise the rows it had in the batch.
  void CheckPaged(const Geometry& g, const std::vector<std::pair<int, int>>& shape) {
    SCOPED_TRACE(g.Name());
    Ragged batch(shape, g, rng_);
    const size_t w = 3 * static_cast<size_t>(g.C);
    std::vector<float> qkv = Random(batch.N * w), past = Random(batch.past_slots.size() * w);
    // bf16 ties in the keys and values of the first row: 1 + 2^-8 rounds down to 1, 1 + 3 * 2^-8 up to 1 +
    // 2^-6 (to even), and their negatives; any other rounding gives a different cache.
    for (int i = 0; i < 4 && 4 * i + 3 < 2 * g.C; i++) {
      const float t[4] = {1.0f + 0x1p-8f, 1.0f + 0x3p-8f, -(1.0f + 0x1p-8f), -(1.0f + 0x3p-8f)};
      for (int j = 0; j < 4; j++) qkv[g.C + 4 * i + j] = t[j];
    }
    const PagedResult want = RunPaged(*ref_, g, batch, qkv, past);
    const PagedResult got = RunPaged(*gpu_, g, batch, qkv, past);
    EXPECT_TRUE(got.k == want.k) << "key cache differs from the reference";
    EXPECT_TRUE(got.v == want.v) << "value cache differs from the reference";
    double scale = 0;  // max |want|: the rel-max error below 1e-5, reported at the worst element
    for (float x : want.out) scale = std::max(scale, std::fabs(static_cast<double>(x)));
    EXPECT_TRUE(AllClose(got.out, want.out, 1e-5 * scale, 0.0)) << "paged attention";
    int row = 0, past_row = 0;
    for (int s = 0; s < batch.S; s++) {
      auto [q_len, ctx] = shape[s];
      Ragged one({{q_len, ctx}}, g, rng_);
      one.tables.assign(batch.tables.begin() + s * g.max_blocks,
                        batch.tables.begin() + (s + 1) * g.max_blocks);
      one.slots.assign(batch.slots.begin() + row, batch.slots.begin() + row + q_len);
      one.past_slots.assign(batch.past_slots.begin() + past_row,
                            batch.past_slots.begin() + past_row + ctx - q_len);
      std::vector<float> q1(qkv.begin() + row * w, qkv.begin() + (row + q_len) * w);
      std::vector<float> p1(past.begin() + past_row * w, past.begin() + (past_row + ctx - q_len) * w);
      const std::vector<float> alone = RunPaged(*gpu_, g, one, q1, p1).out;
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), got.out.begin() + static_cast<size_t>(row) * g.C,
                             [](float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }))
          << "sequence " << s << " alone differs from its rows in the batch";
      row += q_len;
      past_row += ctx - q_len;
    }
  }
};

TEST_F(CudaInferenceOps, EmbedTokensMatchesTheReference) {
  const int V = 50, T = 20, N = 13, C = 36;
  Twin wte = Make(Random(V * C)), wpe = Make(Random(T * C)), tokens = Make(RandomInts(N, V)),
       positions = Make(RandomInts(N, T)), out = Make(std::vector<float>(N * C, 1e30f));
  ref_->EmbedTokens(out.ref.as<float>(), tokens.ref.as<int32_t>(), positions.ref.as<int32_t>(),
                    wte.ref.as<float>(), wpe.ref.as<float>(), N, C);
  gpu_->EmbedTokens(out.gpu.as<float>(), tokens.gpu.as<int32_t>(), positions.gpu.as<int32_t>(),
                    wte.gpu.as<float>(), wpe.gpu.as<float>(), N, C);
  EXPECT_TRUE(BitwiseEqual(Gpu<float>(out), Ref<float>(out)));
}

// Decode rows (q_len 1), whole prompts (q_len = ctx), prefill chunks over a cached prefix, contexts that end
// inside a block and exactly at its end.
const std::vector<std::pair<int, int>> kShape = {{1, 17}, {7, 7},  {1, 1},  {5, 30},
                                                 {1, 44}, {3, 16}, {12, 12}};

TEST_F(CudaInferenceOps, PagedAttentionMatchesTheReferenceAndIsRowIndependent) {
  // hs 16 and 64 with bs 4 and 16, fp32 and bf16; hs 12 (odd groups), 96 and 192 (one group, columns looped).
  for (const Geometry& g :
       {Geometry{64, 4, 4, DType::kF32}, Geometry{64, 4, 16, DType::kBF16}, Geometry{128, 2, 16, DType::kF32},
        Geometry{128, 2, 4, DType::kBF16}, Geometry{36, 3, 4, DType::kF32}, Geometry{96, 1, 16, DType::kBF16},
        Geometry{192, 1, 16, DType::kF32}}) {
    CheckPaged(g, kShape);
  }
}

// Block tables whose scores need more than the default 48 KiB of shared memory (20,000 positions: the opt-in
// limit) and more than any GPU's opt-in limit (64,000 positions: global scratch), with contexts that long. A
// short sequence in each batch sets the scale of the rel-max error (the long rows' outputs are small
// averages).
TEST_F(CudaInferenceOps, PagedAttentionLongContexts) {
  Geometry opt_in{16, 1, 16, DType::kBF16, 2100, 1250};
  CheckPaged(opt_in, {{1, 19999}, {3, 12000}, {1, 1}});
  Geometry global{16, 1, 16, DType::kF32, 6600, 4000};
  CheckPaged(global, {{1, 64000}, {2, 33}, {4, 40001}});
}

// w(o, k) int8 values for o < OC (zero padding beyond) in the packed layout of backend.h.
std::vector<int8_t> PackInt8(const std::vector<int8_t>& w, int OC, int K) {
  const int groups = (OC + 15) / 16;
  std::vector<int8_t> packed(static_cast<size_t>(groups) * 16 * K, 0);
  for (int o = 0; o < OC; o++)
    for (int k = 0; k < K; k++)
      packed[(static_cast<size_t>(o / 16) * (K / 4) + k / 4) * 64 + (o % 16) * 4 + k % 4] =
          w[static_cast<size_t>(o) * K + k];
  return packed;
}

TEST_F(CudaInferenceOps, MatmulInt8MatchesTheReferenceAndIsRowIndependent) {
  for (auto [N, OC, K] : {std::tuple{1, 48, 64},
                          {5, 37, 20},
                          {70, 200, 128},
                          {9, 16, 256},
                          {33, 771, 768},
                          {17, 5, 4},
                          {3, 130, 3072}}) {
    SCOPED_TRACE(::testing::Message() << "N=" << N << " OC=" << OC << " K=" << K);
    std::uniform_int_distribution<int> d(-127, 127);
    std::vector<int8_t> w(static_cast<size_t>(OC) * K);
    for (auto& x : w) x = static_cast<int8_t>(d(rng_));
    std::vector<float> scale = Random(OC, 0.01f), x = Random(static_cast<size_t>(N) * K, 2.0f);
    for (auto& s : scale) s = std::fabs(s);
    // Row 0: max 127 so that 127 / m = 1 and the quantiser sees exact halves (2.5 -> 2, 3.5 -> 4, -0.5 -> -0:
    // round half to even, as nearbyint); the last row (when N > 1) is all zeros (a = 0, out = bias).
    if (K >= 8) {
      const float row0[8] = {127.0f, 2.5f, 3.5f, -0.5f, -1.5f, 0.5f, -126.5f, 1.5f};
      std::copy(row0, row0 + 8, x.begin());
    }
    if (N > 1) std::fill(x.end() - K, x.end(), 0.0f);
    const std::vector<int8_t> packed = PackInt8(w, OC, K);
    Twin dw = Make(packed), dscale = Make(scale), dbias = Make(Random(OC)), dx = Make(x);
    for (bool with_bias : {true, false}) {
      Twin out = Make(std::vector<float>(static_cast<size_t>(N) * OC, 1e30f));
      ref_->MatmulInt8(out.ref.as<float>(), dx.ref.as<float>(), dw.ref.as<int8_t>(), dscale.ref.as<float>(),
                       with_bias ? dbias.ref.as<float>() : nullptr, N, OC, K);
      gpu_->MatmulInt8(out.gpu.as<float>(), dx.gpu.as<float>(), dw.gpu.as<int8_t>(), dscale.gpu.as<float>(),
                       with_bias ? dbias.gpu.as<float>() : nullptr, N, OC, K);
      const std::vector<float> got = Gpu<float>(out), want = Ref<float>(out);
      double scale_max = 0;
      for (float v : want) scale_max = std::max(scale_max, std::fabs(static_cast<double>(v)));
      EXPECT_TRUE(AllClose(got, want, 1e-6 * scale_max, 1e-6)) << (with_bias ? "with bias" : "without bias");
      if (!with_bias) continue;
      // Row independence: each of a few rows alone gives bitwise its row of the batch.
      for (int n = 0; n < N; n += std::max(1, N / 4)) {
        Twin row = Make(std::vector<float>(x.begin() + static_cast<size_t>(n) * K, x.begin() + (n + 1) * K));
        Twin one = Make(std::vector<float>(OC, 1e30f));
        gpu_->MatmulInt8(one.gpu.as<float>(), row.gpu.as<float>(), dw.gpu.as<int8_t>(),
                         dscale.gpu.as<float>(), dbias.gpu.as<float>(), 1, OC, K);
        const std::vector<float> alone = Gpu<float>(one);
        EXPECT_TRUE(std::memcmp(alone.data(), got.data() + static_cast<size_t>(n) * OC, OC * sizeof(float)) ==
                    0)
            << "row " << n << " alone differs from the batch";
      }
    }
  }
}

}  // namespace
}  // namespace tern::testing
