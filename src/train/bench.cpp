#include "train/bench.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "backend/peak_probe.h"
#include "backend/registry.h"
#include "model/gpt.h"

namespace tern {

nlohmann::json BenchResult::ToJson() const {
  const auto& m = options.model;
  return {{"tool", "tern bench"},
          {"model", {{"n_layer", m.n_layer}, {"n_head", m.n_head}, {"n_embd", m.n_embd}, {"vocab_size", m.vocab_size},
                     {"block_size", m.block_size}}},
          {"batch", options.batch},
          {"seq", options.seq},
          {"precision", options.precision},
          {"device", backend.rfind("cuda", 0) == 0 ? "cuda" : "cpu"},
          {"backend", backend},
          {"gpu", nullptr},
          {"threads", threads},
          {"steps", options.steps},
          {"step_ms", step_ms},
          {"tokens_per_s", tokens_per_s},
          {"flops_per_token", flops_per_token},
          {"achieved_tflops", achieved_gflops / 1e3},
          {"peak_tflops", peak_gflops / 1e3},
          {"mfu", mfu}};
}

Result<BenchResult> RunBench(const BenchOptions& o) {
  TERN_RETURN_IF_ERROR(o.model.Validate());
  if (o.seq > o.model.block_size) {
    return Status::InvalidArgument(fmt::format("--seq {} exceeds the model's block_size {}", o.seq, o.model.block_size));
  }
  if (o.precision != "fp32" && o.precision != "bf16") {
    return Status::InvalidArgument("--precision '" + o.precision + "' is not allowed; use fp32 or bf16");
  }
  TERN_ASSIGN_OR_RETURN(auto backend, MakeBackend(o.device));
  const Compute compute = o.precision == "bf16" ? Compute::kBF16 : Compute::kF32;
  BenchResult r;
  r.options = o;
  r.backend = backend->name();
  r.threads = omp_get_max_threads();
  // A GPU needs a large probe to reach its peak (launch and sync overheads hide it at 1024^3).
  const bool gpu = r.backend.rfind("cuda", 0) == 0;
  const int probe = gpu ? 8192 : 1024;
  r.peak_gflops = o.measure_peak ? MeasurePeakGflops(backend.get(), compute, 1.0, probe) : o.peak_gflops;

  Gpt model(backend.get(), o.model, o.batch, o.seq, compute);
  model.InitWeights(1);
  const size_t N = static_cast<size_t>(o.batch) * o.seq;
  std::vector<int32_t> tokens(N + 1);
  std::mt19937_64 rng(42);
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % o.model.vocab_size);
  std::vector<float> times;
  for (int i = 0; i < o.warmup + o.steps; i++) {
    auto t0 = std::chrono::steady_clock::now();
    model.ZeroGrad();
    model.Forward(tokens.data(), tokens.data() + 1, o.batch, o.seq, 1.0f / N);
    model.Backward();
    double norm = model.GradNorm();
    model.AdamWStep(1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, norm > 1.0 ? static_cast<float>(1.0 / norm) : 1.0f, i + 1);
    backend->Synchronize();
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= o.warmup) times.push_back(static_cast<float>(dt));
  }
  std::sort(times.begin(), times.end());
  double median = times[times.size() / 2];
  r.step_ms = median * 1e3;
  r.tokens_per_s = N / median;
  r.flops_per_token = GptFlopsPerToken(o.model, o.seq);
  r.achieved_gflops = r.flops_per_token * r.tokens_per_s / 1e9;
  r.mfu = r.peak_gflops > 0 ? r.achieved_gflops / r.peak_gflops : 0;
  return r;
}

}  // namespace tern
