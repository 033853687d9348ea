// decode_bound: how close one-stream decode gets to the machine's memory bandwidth, per weight format.
//
//   decode_bound [--steps 16] [--context 64] [--stream-mb 1024]
//
// 1. The bound: a STREAM-like read (sum of a buffer far larger than the caches) on the same OpenMP threads.
// 2. The bf16-weight matmul on GPT-2's decode shapes (1 and 16 rows): tern's kernel (cpu/bf16_matmul.cpp)
//    against oneDNN's bf16 x bf16 (when this CPU has one) and oneDNN fp32 on weights widened beforehand.
// 3. GPT-2 124M and the demo model (random init) decode with fp32, bf16, int8 and int4 weights: tokens/s at
// one
//    stream (an engine of one stream, as `tern serve --max-batch 1` runs, and one stream in a 16-stream
//    engine), the weight bytes one token reads, the achieved GB/s and its ratio to the bound; then 16 streams
//    vs 1.
// Every figure is a ratio against a baseline measured in the same process; on a shared machine they move.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "backend/bf16.h"
#include "backend/cpu/dnnl_matmul.h"
#include "backend/cpu/fast_ops.h"
#include "backend/peak_probe.h"
#include "decode_steps.h"
#include "infer/inference_model.h"
#include "model/init.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

template <typename F>
double BestUs(F&& f, int reps = 20) {
  f();
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, Seconds(t0) * 1e6);
  }
  return best;
}

void MatmulCompare(tern::CpuFastBackend& be) {
  std::printf("\n## bf16-weight matmul, decode shapes (best of 20, us)\n\n");
  std::printf("| rows x OC x K | tern kernel | oneDNN bf16 x bf16 | oneDNN fp32 (pre-widened) |\n");
  std::printf("|---|---:|---:|---:|\n");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto [OC, K] : {std::pair{3072, 768}, std::pair{768, 3072}, std::pair{50257, 768}}) {
    std::vector<float> w32(static_cast<size_t>(OC) * K);
    for (auto& x : w32) x = tern::RoundToBF16(u(rng));
    std::vector<uint16_t> w(w32.size());
    for (size_t i = 0; i < w.size(); i++) w[i] = tern::F32ToBF16(w32[i]);
    for (int M : {1, 16}) {
      std::vector<float> a(static_cast<size_t>(M) * K), c(static_cast<size_t>(M) * OC);
      for (auto& x : a) x = u(rng);
      std::vector<uint16_t> a16(a.size());
      for (size_t i = 0; i < a.size(); i++) a16[i] = tern::F32ToBF16(a[i]);
      const double own = BestUs([&] { be.MatmulBF16(c.data(), a.data(), w.data(), nullptr, M, OC, K); });
      const std::string impl = be.dnnl().ImplName(tern::DType::kBF16, false, M, OC, K, false, true, 0.0f);
      std::string bf = "none (" + std::string(impl.empty() ? "no bf16 kernel on this CPU" : impl) + ")";
      if (!impl.empty()) {
        const double t = BestUs([&] {
          (void)be.dnnl().Run(c.data(), a16.data(), w.data(), tern::DType::kBF16, nullptr, M, OC, K, false,
                              true, 0.0f);
        });
        bf = fmt::format("{:.0f} ({})", t, impl);
      }
      const double f32 = BestUs([&] {
        (void)be.dnnl().Run(c.data(), a.data(), w32.data(), tern::DType::kF32, nullptr, M, OC, K, false, true,
                            0.0f);
      });
      std::printf("| %d x %d x %d | %.0f | %s | %.0f |\n", M, OC, K, own, bf.c_str(), f32);
    }
  }
}

// Tokens/s of `S` streams decoding `steps` tokens after `context` tokens each.
double DecodeRate(tern::InferenceModel& m, int S, int context, int steps, int per_seq) {
  tern::bench::DecodeSequences seqs(m, per_seq);
  seqs.Prefill(S, context);
  double rate = 0;
  for (int round = 0; round < 2; round++) {  // round 0 warms up
    const auto t0 = Clock::now();
    for (int step = 0; step < steps; step++) m.Forward(seqs.Step(S, context + step + round * steps));
    rate = static_cast<double>(S) * steps / Seconds(t0);
  }
  return rate;
}

// The decode table of one model: tokens/s at one stream (an engine of one stream, and one stream in a
// 16-stream engine) against the bound, and at 16 streams, for fp32, bf16, int8 and int4 weights.
bool DecodeTable(tern::CpuFastBackend& be, const tern::GptConfig& cfg, double bound, int context, int steps) {
  const std::vector<float> params = tern::GptInitialWeights(cfg, 1);
  std::printf("\n## %s decode, context %d, %d steps\n\n", cfg.ToString().c_str(), context, steps);
  // One stream is measured twice: in an engine of one stream (max_seqs 1: what `tern serve --max-batch 1` and
  // `tern generate` run; it never batches, so its bf16 matmuls may pick their kernel by row count) and in the
  // 16-stream engine (row-independent kernels: a sequence gets the same bits alone or batched).
  std::printf(
      "| weights | MB read per token | tok/s, 1 stream | GB/s | of the bound | tok/s, 1 stream in a "
      "16-stream "
      "engine | of the bound | tok/s, 16 streams | 16 vs 1 |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (tern::Quantize q :
       {tern::Quantize::kNone, tern::Quantize::kBF16, tern::Quantize::kInt8, tern::Quantize::kInt4}) {
    const int bs = 16, S = 16, per_seq = (context + 2 * steps + bs - 1) / bs;
    auto make = [&](int max_seqs) {
      tern::InferenceModelOptions mo;
      mo.quantize = q;
      mo.kv_dtype = tern::ParseKvDtype("auto", q).value();
      mo.block_size = bs;
      mo.num_blocks = S * per_seq;
      mo.max_rows = std::max(S, context);
      mo.max_seqs = max_seqs;
      return tern::InferenceModel::Create(&be, cfg, params, mo);
    };
    auto m = make(S);
    if (!m.ok()) {
      std::fprintf(stderr, "decode_bound: %s\n", m.status().message().c_str());
      return false;
    }
    double one = 0;
    {
      auto m1 = make(1);
      if (!m1.ok()) {
        std::fprintf(stderr, "decode_bound: %s\n", m1.status().message().c_str());
        return false;
      }
      one = DecodeRate(**m1, 1, context, steps, per_seq);
    }
    const double one_batched = DecodeRate(**m, 1, context, steps, per_seq);
    const double many = DecodeRate(**m, S, context, steps, per_seq);
    const double bytes = static_cast<double>((*m)->weight_bytes());
    const double gbs = bytes * one / 1e9, gbs_batched = bytes * one_batched / 1e9;
    std::printf("| %s | %.0f | %.1f | %.1f | %.0f%% | %.1f | %.0f%% | %.1f | %.1fx |\n", tern::WeightsName(q),
                bytes / 1e6, one, gbs, 100 * gbs / bound, one_batched, 100 * gbs_batched / bound, many,
                many / one);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"decode_bound: one-stream decode against the measured memory bandwidth"};
  int steps = 16, context = 64;
  size_t stream_mb = 1024;
  app.add_option("--steps", steps, "timed decode steps per measurement")->check(CLI::Range(1, 256));
  app.add_option("--context", context, "tokens in each stream's cache first")->check(CLI::Range(1, 512));
  app.add_option("--stream-mb", stream_mb, "buffer of the bandwidth read")->check(CLI::Range(64, 65536));
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line as it is measured

  tern::CpuFastBackend be;
  const double bound = tern::MeasureHostReadGbps(&be, stream_mb);
  std::printf("# decode_bound, %d threads\n\nread bandwidth (STREAM-like sum of %zu MB): %.1f GB/s\n",
              omp_get_max_threads(), stream_mb, bound);
  MatmulCompare(be);

  // GPT-2 124M (the targets are for it: its weights are far larger than the caches) and the demo model
  // (configs/demo.yaml with the demo tokenizer's 4096 tokens: 13 MB of fp32 weights, which stay in cache).
  for (const tern::GptConfig& cfg :
       {tern::GptConfig{12, 12, 768, 50257, 1024}, tern::GptConfig{4, 4, 256, 4096, 128}})
    if (!DecodeTable(be, cfg, bound, context, steps)) return 1;
  return 0;
}
