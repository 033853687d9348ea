// lora_paging: what reading a LoRA adapter back into memory costs (`tern serve --max-loaded-loras`,
// serve/adapter_pager.h), against the decode step it delays a request by.
//
//   lora_paging [--shape 12,12,768,50257,1024] [--rank 16] [--weights fp32|bf16] [--reps 7]
//
// A random model of the shape (GPT-2 124M by default) and an adapter of that rank on every matrix, written
// to an adapter file as a LoRA run writes it. Timed, median of --reps: the read back as the server does it
// (LoadLoraAdapter: read, parse, check the file; CheckAdapterBase: the shape and the base fingerprint;
// InferenceModel::AddAdapter: scale, convert and copy into the model), then its removal; the baseline is the
// same model's decode step at 1 and 16 sequences of 64 tokens of context. The ratio says how many decode
// steps a request whose adapter was out of memory waits for it. The file is read from the page cache (a warm
// disk); a cold read adds the disk's time for the file's bytes.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "backend/backend.h"
#include "decode_steps.h"
#include "infer/adapter.h"
#include "infer/inference_model.h"
#include "infer/weights.h"
#include "model/init.h"

namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// ms per decode step of `rows` sequences with `context` tokens cached each (the cache filled by one prefill
// per sequence first), median of `steps` steps.
double DecodeStepMs(tern::InferenceModel& m, int rows, int context, int steps, int per_seq) {
  tern::bench::DecodeSequences seqs(m, per_seq);
  seqs.Prefill(rows, context);
  std::vector<double> ms;
  for (int step = 0; step < steps; step++) {
    const tern::ForwardBatch b = seqs.Step(rows, context + step);
    const auto t0 = Clock::now();
    m.Forward(b);
    ms.push_back(Since(t0));
  }
  return Median(ms);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"What reading a LoRA adapter back into memory costs, in decode steps of the same model"};
  std::string shape = "12,12,768,50257,1024", weights = "bf16";
  int rank = 16, reps = 7, steps = 12;
  app.add_option("--shape", shape, "L,H,C,V,T of the random model")->capture_default_str();
  app.add_option("--rank", rank, "the adapter's rank (every matrix adapted)")->capture_default_str();
  app.add_option("--weights", weights,
                 "fp32 | bf16 | int8: the served weights (adapters are bf16 beside "
                 "bf16 and int8)")
      ->capture_default_str();
  app.add_option("--reps", reps, "read-backs timed (median)")->capture_default_str();
  app.add_option("--steps", steps, "decode steps timed per batch size (median)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const std::optional<tern::GptConfig> parsed = tern::bench::ParseShape(shape);
  if (!parsed) {
    std::fprintf(stderr, "lora_paging: --shape wants L,H,C,V,T (e.g. 12,12,768,50257,1024)\n");
    return 2;
  }
  const tern::GptConfig cfg = *parsed;
  auto q = tern::ParseWeights(weights);
  if (!q.ok()) {
    std::fprintf(stderr, "lora_paging: %s\n", q.status().message().c_str());
    return 2;
  }
  const std::vector<float> params = tern::GptInitialWeights(cfg, 1);
  const std::string base = tern::BaseFingerprint(cfg, params);

  tern::LoraAdapter adapter;
  adapter.config = cfg;
  adapter.spec.rank = rank;
  adapter.spec.alpha = static_cast<float>(rank);
  adapter.params.resize(tern::LoraParamCount(cfg, adapter.spec));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-0.02f, 0.02f);
  for (float& x : adapter.params) x = u(rng);
  adapter.base_fingerprint = base;
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "tern_lora_paging";
  std::filesystem::create_directories(dir / "adapter");
  const std::string file = (dir / "adapter" / tern::kAdapterFile).string();
  if (tern::Status st = tern::WriteLoraAdapter(file, adapter); !st.ok()) {
    std::fprintf(stderr, "lora_paging: %s\n", st.message().c_str());
    return 1;
  }

  const int context = 64, max_rows = 16, bs = 16;
  const int per_seq = (context + steps + bs - 1) / bs;
  tern::InferenceModelOptions mo;
  mo.quantize = *q;
  mo.kv_dtype = *q == tern::Quantize::kNone ? tern::DType::kF32 : tern::DType::kBF16;
  mo.block_size = bs;
  mo.num_blocks = max_rows * per_seq;
  mo.max_rows = std::max(max_rows, context);
  mo.max_seqs = max_rows;
  auto be = tern::MakeCpuFastBackend();
  auto model = tern::InferenceModel::Create(be.get(), cfg, params, mo);
  if (!model.ok()) {
    std::fprintf(stderr, "lora_paging: %s\n", model.status().message().c_str());
    return 1;
  }
  tern::InferenceModel& m = **model;

  std::vector<double> read_ms, add_ms, remove_ms;
  for (int r = 0; r < reps + 1; r++) {  // the first warms the page cache and the allocator
    auto t0 = Clock::now();
    auto loaded = tern::LoadLoraAdapter((dir / "adapter").string());
    if (!loaded.ok()) {
      std::fprintf(stderr, "lora_paging: %s\n", loaded.status().message().c_str());
      return 1;
    }
    if (tern::Status st = tern::CheckAdapterBase(*loaded, file, cfg, base, "base"); !st.ok()) {
      std::fprintf(stderr, "lora_paging: %s\n", st.message().c_str());
      return 1;
    }
    const double read = Since(t0);
    t0 = Clock::now();
    auto id = m.AddAdapter(*loaded);
    if (!id.ok()) {
      std::fprintf(stderr, "lora_paging: %s\n", id.status().message().c_str());
      return 1;
    }
    const double add = Since(t0);
    t0 = Clock::now();
    m.RemoveAdapter(*id);
    const double remove = Since(t0);
    if (r > 0) {
      read_ms.push_back(read);
      add_ms.push_back(add);
      remove_ms.push_back(remove);
    }
  }
  const double step1 = DecodeStepMs(m, 1, context, steps, per_seq);
  const double step16 = DecodeStepMs(m, max_rows, context, steps, per_seq);
  const double bytes = static_cast<double>(std::filesystem::file_size(file));
  const double back = Median(read_ms) + Median(add_ms);
  std::printf("%s, weights %s, %d threads; adapter %s: %.1f MB file, %.1f MB in memory\n\n",
              cfg.ToString().c_str(), weights.c_str(), omp_get_max_threads(), adapter.spec.ToString().c_str(),
              bytes / 1048576.0, adapter.params.size() * m.adapter_bytes_per_param() / 1048576.0);
  std::printf("| what | ms (median of %d) |\n|---|---:|\n", reps);
  std::printf("| read + check the file (LoadLoraAdapter, CheckAdapterBase) | %.2f |\n", Median(read_ms));
  std::printf("| add to the model (AddAdapter) | %.2f |\n", Median(add_ms));
  std::printf("| remove (RemoveAdapter) | %.2f |\n", Median(remove_ms));
  std::printf("| decode step, 1 sequence (baseline) | %.2f |\n", step1);
  std::printf("| decode step, %d sequences | %.2f |\n\n", max_rows, step16);
  std::printf(
      "a read-back costs %.2fx a 1-sequence decode step and %.2fx a %d-sequence one (%.2f GB/s of file)\n",
      back / step1, back / step16, max_rows, bytes / (Median(read_ms) * 1e-3) / 1e9);
  std::filesystem::remove_all(dir);
  return 0;
}
