#include "cli/bench_serve.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend/peak_probe.h"
#include "backend/registry.h"
#include "core/cpu_info.h"
#include "infer/inference_model.h"
#include "metrics/run_record.h"
#include "model/init.h"
#include "plan/catalog.h"
#include "plan/gpu_specs.h"
#include "plan/serve_calibration.h"
#include "train/bench.h"

namespace tern::cli {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

struct Measured {
  std::string backend, gpu_name, gpu;
  bool cuda = false;
  double read_gbps = 0, peak_tflops = 0, prefill_ms = 0, weight_bytes = 0;
  std::vector<std::pair<int, double>> decode;       // batch, median ms per step
  std::vector<std::pair<int, double>> lora_decode;  // the same with every sequence on a LoRA adapter
};

Result<Measured> Measure(const ServeBenchFlags& f, const GptConfig& cfg, Quantize q, DType kv) {
  TERN_ASSIGN_OR_RETURN(std::unique_ptr<Backend> be, MakeBackend(f.device));
  Measured m;
  m.backend = be->name();
  m.gpu_name = GpuNameFromBackendName(m.backend);
  m.cuda = m.backend.rfind("cuda", 0) == 0;
  m.gpu = m.cuda ? plan::CatalogGpuId(m.gpu_name) : "";
  const int max_b = *std::max_element(f.batches.begin(), f.batches.end()), bs = 16;
  const int per_seq = (f.context + f.steps + 2 + bs - 1) / bs;  // blocks of one sequence
  InferenceModelOptions mo;
  mo.quantize = q;
  mo.kv_dtype = kv;
  mo.block_size = bs;
  mo.num_blocks = max_b * per_seq;
  mo.max_rows = std::max(max_b, f.context);
  mo.max_seqs = max_b;
  const std::vector<float> weights = GptInitialWeights(cfg, 1);
  TERN_ASSIGN_OR_RETURN(std::unique_ptr<InferenceModel> model,
                        InferenceModel::Create(be.get(), cfg, weights, mo));
  for (int i = 0; f.lora_rank > 0 && i < f.lora_adapters; i++) {  // random adapters: B not zero
    LoraAdapter a{cfg, LoraSpec{f.lora_rank, 2.0f * f.lora_rank, kLoraAllTargets}, {}, ""};
    std::mt19937 arng(100 + i);
    std::uniform_real_distribution<float> u(-0.02f, 0.02f);
    a.params.resize(LoraParamCount(cfg, a.spec));
    for (float& x : a.params) x = u(arng);
    TERN_RETURN_IF_ERROR(model->AddAdapter(a).status());
  }
  m.weight_bytes = static_cast<double>(model->weight_bytes());
  // The device's own figures: its memory read (a CPU: a GPU's comes from gpus.csv) and matmul peak.
  if (!m.cuda) m.read_gbps = MeasureHostReadGbps(be.get());
  m.peak_tflops = MeasurePeakGflops(be.get(), q == Quantize::kNone ? Compute::kF32 : Compute::kBF16) / 1e3;

  std::mt19937_64 rng(1);
  auto token = [&] { return static_cast<int32_t>(rng() % static_cast<uint64_t>(cfg.vocab_size)); };
  auto table = [&](int s) {
    std::vector<int32_t> t(model->max_blocks_per_seq(), 0);
    for (int b = 0; b < per_seq && b < model->max_blocks_per_seq(); b++) t[b] = s * per_seq + b;
    return t;
  };
  // One prompt of `context` tokens: best of 3.
  m.prefill_ms = 1e30;
  for (int rep = 0; rep < 3; rep++) {
    ForwardBatch b;
    for (int p = 0; p < f.context; p++) {
      b.tokens.push_back(token());
      b.positions.push_back(p);
      b.slots.push_back(table(0)[p / bs] * bs + p % bs);
    }
    b.seqs = {0, f.context, f.context};
    b.block_tables = table(0);
    b.logit_rows = {f.context - 1};
    const auto t0 = Clock::now();
    model->Forward(b);  // returns the logits on the host: the step is over
    m.prefill_ms = std::min(m.prefill_ms, Ms(t0));
  }
  model->ZeroKvCache();
  // Decode steps of S sequences; adapters > 0: the sequences split evenly between them, each adapter's
  // together, as the engine orders a step's decodes (one pair of products per adapter and matrix).
  auto decode = [&](int S, int adapters) {
    std::vector<double> times;
    for (int step = 0; step <= f.steps; step++) {
      ForwardBatch b;
      const int p = f.context + step;  // this step's token position; the cache holds p tokens before it
      for (int s = 0; s < S; s++) {
        const auto t = table(s);
        b.tokens.push_back(token());
        b.positions.push_back(p);
        b.slots.push_back(t[p / bs] * bs + p % bs);
        b.seqs.insert(b.seqs.end(), {s, 1, p + 1});
        b.block_tables.insert(b.block_tables.end(), t.begin(), t.end());
        b.logit_rows.push_back(s);
        if (model->num_adapters() > 0) b.adapters.push_back(adapters > 0 ? s * adapters / S + 1 : 0);
      }
      const auto t0 = Clock::now();
      model->Forward(b);
      if (step > 0) times.push_back(Ms(t0));  // the first is untimed
    }
    return Median(times);
  };
  for (int S : f.batches) {
    m.decode.emplace_back(S, decode(S, 0));
    if (model->num_adapters() > 0) m.lora_decode.emplace_back(S, decode(S, model->num_adapters()));
  }
  return m;
}

}  // namespace

int RunServeBench(const ServeBenchFlags& f, const GptConfig& cfg) {
  auto fail = [](const std::string& msg) {
    std::fprintf(stderr, "tern bench --serve: %s\n", msg.c_str());
    return 2;
  };
  auto q = ParseWeights(f.weights);
  if (!q.ok()) return fail(q.status().message());
  auto kv = ParseKvDtype(f.kv_dtype, *q);
  if (!kv.ok()) return fail(kv.status().message());
  if (f.batches.empty() || *std::min_element(f.batches.begin(), f.batches.end()) < 1)
    return fail("--batches lists sequence counts of at least 1, e.g. 1,4,16,64");
  if (std::find(f.batches.begin(), f.batches.end(), 1) == f.batches.end() || f.batches.size() < 2)
    return fail("--batches needs 1 and at least one larger count (the fit's two ends), e.g. 1,4,16,64");
  if (f.lora_rank < 0 || f.lora_adapters < 1)
    return fail("--lora-rank must be 0 (off) or more, --lora-adapters at least 1");
  if (f.lora_rank > 0) {
    if (Status st = LoraSpec{f.lora_rank, 1.0f, kLoraAllTargets}.Validate(cfg); !st.ok())
      return fail("--lora-rank: " + st.message());
  }
  if (f.context < 1 || f.context + f.steps + 2 > cfg.block_size)
    return fail(fmt::format("--context {} + --steps {} must fit the model's {} positions", f.context, f.steps,
                            cfg.block_size));
  std::vector<int> batches = f.batches;
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  ServeBenchFlags sorted = f;
  sorted.batches = batches;
  auto m = Measure(sorted, cfg, *q, *kv);
  if (!m.ok()) {
    std::fprintf(stderr, "tern bench --serve: %s\n", m.status().message().c_str());
    return 1;
  }
  const CpuInfo cpu = ReadCpuInfo();
  nlohmann::json j = {
      {"kind", "serve"},
      {"device", m->cuda ? "cuda" : "cpu"},
      {"backend", m->backend},
      {"gpu", m->gpu.empty() ? nlohmann::json(nullptr) : nlohmann::json(m->gpu)},
      {"gpu_name", m->gpu_name.empty() ? nlohmann::json(nullptr) : nlohmann::json(m->gpu_name)},
      {"machine", {{"cpu", cpu.model}, {"isa", cpu.isa}, {"logical_cpus", cpu.logical_cpus}}},
      {"threads", omp_get_max_threads()},
      {"model",
       {{"n_layer", cfg.n_layer},
        {"n_head", cfg.n_head},
        {"n_embd", cfg.n_embd},
        {"vocab_size", cfg.vocab_size},
        {"block_size", cfg.block_size}}},
      {"weights", WeightsName(*q)},
      {"kv_dtype", KvDtypeName(*kv)},
      {"context", f.context},
      {"weight_bytes", m->weight_bytes},
      {"read_gbps", m->read_gbps},
      {"peak_tflops", m->peak_tflops},
      {"prefill_ms", m->prefill_ms},
      {"decode", nlohmann::json::array()}};
  for (const auto& [b, ms] : m->decode) j["decode"].push_back({{"batch", b}, {"ms", ms}});
  if (f.lora_rank > 0) {
    j["lora"] = {{"rank", f.lora_rank}, {"adapters", f.lora_adapters}, {"targets", "qkv,attproj,fc,fcproj"}};
    j["lora_decode"] = nlohmann::json::array();
    for (const auto& [b, ms] : m->lora_decode) j["lora_decode"].push_back({{"batch", b}, {"ms", ms}});
  }
  StampRecordVersion(&j);
  if (f.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("model      %s, weights %s, KV %s, on %s (%d threads)\n", cfg.ToString().c_str(),
              WeightsName(*q), KvDtypeName(*kv), m->backend.c_str(), omp_get_max_threads());
  if (!m->cuda) std::printf("cpu        %s; memory read %.1f GB/s\n", cpu.model.c_str(), m->read_gbps);
  std::printf("peak       %.3g TFLOP/s (matmul probe)\n", m->peak_tflops);
  std::printf("prefill    %d tokens in %.1f ms (%.0f tokens/s)\n", f.context, m->prefill_ms,
              f.context / m->prefill_ms * 1e3);
  std::printf("decode     over %d cached tokens per sequence (median of %d steps):\n", f.context, f.steps);
  for (size_t i = 0; i < m->decode.size(); i++) {
    const auto [b, ms] = m->decode[i];
    std::printf("  %4d sequences  %8.2f ms/step  %8.0f tokens/s", b, ms, b / ms * 1e3);
    if (i < m->lora_decode.size())  // timed right after the base steps: the ratio is of one run
      std::printf("  | LoRA r%d x%d adapters %8.2f ms/step (%.2fx)", f.lora_rank, f.lora_adapters,
                  m->lora_decode[i].second, m->lora_decode[i].second / ms);
    std::printf("\n");
  }
  // The fit tern plan --serve --calibrate makes of it (against this device's own figures; on a catalog GPU
  // the plan fits against the datasheet instead).
  auto profile = plan::ParseServeBenchJson(j.dump(), "this bench");
  if (m->cuda) {
    std::printf("fit        tern plan --serve --calibrate fits it against the %s datasheet (gpus.csv)\n",
                m->gpu.empty() ? "GPU's" : m->gpu.c_str());
  } else if (profile.ok()) {
    plan::Catalog none;
    auto c = plan::CalibrateServe(*profile, none);
    if (c.ok()) {
      std::printf(
          "fit        decode at %.0f%% of %.1f GB/s, compute-bound at %.0f%% of the peak%s, prefill %.0f%%, "
          "%.2f ms per step; within %.1f%% of every measured step\n",
          c->bw_efficiency * 100, c->bandwidth_gbps, c->decode_mfu * 100,
          c->compute_bound_seen ? "" : " (a lower bound: never compute-bound here)", c->prefill_mfu * 100,
          c->overhead_ms, c->max_error * 100);
    }
  }
  std::printf(
      "\n  tern bench --serve ... --json > serve.json && tern plan --serve --calibrate serve.json "
      "--instance local --price-per-hour P --requests-per-s R\n");
  return 0;
}

}  // namespace tern::cli
