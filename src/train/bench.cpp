#include "train/bench.h"

#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <random>
#include <vector>

#include "backend/peak_probe.h"
#include "backend/registry.h"
#include "ckpt/manager.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "metrics/nvml_sampler.h"
#include "model/gpt.h"
#include "model/safetensors.h"
#include "infer/generate.h"
#include "train/train_checkpoint.h"

namespace tern {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double PeakRssBytes() {
  struct rusage u {};
  return ::getrusage(RUSAGE_SELF, &u) == 0 ? static_cast<double>(u.ru_maxrss) * 1024 : -1;  // Linux: KiB
}

nlohmann::json MemoryJson(const BenchMemory& m) {
  return {{"weights", m.weights}, {"grads", m.grads}, {"optimizer", m.optimizer}, {"activations", m.activations},
          {"total", m.total()}};
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// What the trainer does before its first step besides the model: the tokenizer and both splits.
Status TimeDataOpen(const std::string& dir, int B, int T, std::optional<Tokenizer>* tok, double* seconds) {
  const auto t0 = Clock::now();
  TERN_ASSIGN_OR_RETURN(Tokenizer loaded, Tokenizer::Load(dir + "/tokenizer.model"));
  TERN_ASSIGN_OR_RETURN(auto train_shards, FindShards(dir, "train"));
  TERN_ASSIGN_OR_RETURN(auto val_shards, FindShards(dir, "val"));
  TERN_ASSIGN_OR_RETURN(auto train, DataLoader::Open(train_shards, B, T, 1, true));
  TERN_ASSIGN_OR_RETURN(auto val, DataLoader::Open(val_shards, B, T, 1, false));
  *seconds = Since(t0);
  tok->emplace(std::move(loaded));
  return Status::Ok();
}

// One call of the trainer's samples (Trainer::Samples): the live weights copied to the host and decoded on
// a one-off serving engine, n choices together. End-of-text is ignored so the call runs its full length.
Result<double> TimeSampleCall(const Gpt& model, const BenchOptions& o, const Tokenizer& tok, int* tokens) {
  const auto t0 = Clock::now();
  GenerationRequest r;
  r.prompt = tok.Encode(o.sample_prompt);
  if (r.prompt.empty()) r.prompt.push_back(tok.eos_id());
  const int context = std::min(o.seq, o.model.block_size);
  if (static_cast<int>(r.prompt.size()) >= context) r.prompt.erase(r.prompt.begin(), r.prompt.end() - (context - 1));
  r.max_tokens = std::min<int>(o.sample_tokens, context - static_cast<int>(r.prompt.size()));
  *tokens = r.max_tokens;
  r.sampling = {0.8f, 40, 1.0f};
  r.seed = 1;
  r.n = std::max(1, std::min(o.sample_choices, kMaxChoices));
  r.ignore_eos = true;
  TERN_ASSIGN_OR_RETURN(auto gen, GenerateOnce(o.model, model.GetParameters(), tok, r, context));
  return Since(t0);
}

// One checkpoint save through the trainer's own path (capture, copy, persist with fsync) to a fresh
// manager, as the first save of a run is, and the final model.safetensors write.
Status TimeSaves(const Gpt& model, const BenchOptions& o, BenchRunTimes* r) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(o.io_dir) / ("tern_bench_io." + std::to_string(::getpid()));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IoError("--io-dir " + o.io_dir + ": cannot create " + dir.string() + ": " + ec.message());
  r->io_dir = o.io_dir;
  TrainConfig cfg;
  cfg.model = o.model;
  cfg.batch_size = o.batch;
  cfg.seq_len = o.seq;
  ckpt::ManagerOptions mo;
  mo.tiers = {{"fast", (dir / "ckpt").string(), 0, {1, 0, 0}}};
  mo.async = false;
  Status st;
  {
    auto mgr = ckpt::CheckpointManager::Open(mo);
    if (!mgr.ok()) st = mgr.status();
    if (st.ok()) {
      TrainProgress p;
      p.step = 1;
      st = (*mgr)->Save(
          1, {0}, "periodic", std::nullopt, [&](ckpt::Snapshot& s) { return CaptureTrainMeta(model, cfg, {}, p, &s); },
          [&](ckpt::Snapshot& s) { return CopyModelState(model, &s); }, /*sync=*/true);
    }
    if (st.ok()) {
      for (const auto& e : (*mgr)->TakeEvents()) {
        if (!e.status.ok()) st = e.status;
        r->checkpoint_bytes = static_cast<double>(e.bytes);
        r->checkpoint_copy_ms = e.copy_ms;
        r->checkpoint_persist_ms = e.persist_ms;
      }
    }
  }
  if (st.ok()) {
    const auto t0 = Clock::now();
    std::vector<float> params = model.GetParameters();
    r->model_bytes = static_cast<double>(params.size()) * 4;
    st = WriteGptSafetensors((dir / "model.safetensors").string(), o.model, params, {});
    r->model_save_ms = Since(t0) * 1e3;
  }
  fs::remove_all(dir, ec);
  return st.WithContext("timing a checkpoint save in --io-dir " + o.io_dir);
}

}  // namespace

std::string GpuNameFromBackendName(const std::string& name) {
  const std::string prefix = "cuda (";
  if (name.rfind(prefix, 0) != 0) return "";
  // The CUDA backend names itself "cuda (<device name>, sm_XY, N GiB)"; device names hold no ", sm_".
  const size_t end = name.find(", sm_", prefix.size());
  return end == std::string::npos ? "" : name.substr(prefix.size(), end - prefix.size());
}

nlohmann::json BenchResult::ToJson() const {
  const auto& m = options.model;
  auto or_null = [](double v) { return v < 0 ? nlohmann::json(nullptr) : nlohmann::json(v); };
  nlohmann::json j = {
      {"tool", "tern bench"},
      {"model", {{"n_layer", m.n_layer}, {"n_head", m.n_head}, {"n_embd", m.n_embd}, {"vocab_size", m.vocab_size},
                 {"block_size", m.block_size}}},
      {"batch", options.batch},
      {"seq", options.seq},
      {"grad_accum", options.grad_accum},
      {"precision", PrecisionName(options.precision)},
      {"device", backend.rfind("cuda", 0) == 0 ? "cuda" : "cpu"},
      {"backend", backend},
      {"gpu", gpu.empty() ? nlohmann::json(nullptr) : nlohmann::json(gpu)},
      {"gpu_name", gpu_name.empty() ? nlohmann::json(nullptr) : nlohmann::json(gpu_name)},
      {"threads", threads},
      {"steps", options.steps},
      {"warmup", options.warmup},
      {"step_ms", step_ms},
      {"steps_ms", steps_ms},
      {"tokens_per_s", tokens_per_s},
      {"flops_per_token", flops_per_token},
      {"achieved_tflops", achieved_gflops / 1e3},
      {"peak_tflops", peak_gflops / 1e3},
      {"mfu", mfu}};
  const GptMemory& a = allocated;
  nlohmann::json alloc = MemoryJson({static_cast<double>(a.params + a.params_bf16), static_cast<double>(a.grads),
                                     static_cast<double>(a.adam_state), static_cast<double>(a.activations + a.scratch)});
  alloc["saved_activations"] = a.activations;
  alloc["backward_scratch"] = a.scratch;
  j["memory"] = {{"recompute", RecomputeName(options.recompute)},
                 {"allocated", alloc},
                 {"planned", planned ? MemoryJson(*planned) : nlohmann::json(nullptr)},
                 {"peak_rss_bytes", or_null(peak_rss_bytes)},
                 {"device_mem_bytes", or_null(device_mem_bytes)}};
  if (has_run) {
    j["run"] = {{"process_start_s", run.process_start_s},
                {"backend_init_s", run.backend_init_s},
                {"peak_probe_s", run.peak_probe_s},
                {"model_init_s", run.model_init_s},
                {"data_open_s", or_null(run.data_open_s)},
                {"forward_ms", run.forward_ms},
                {"sample_tokens", run.sample_tokens},
                {"sample_choices", run.sample_choices},
                {"sample_ms", or_null(run.sample_ms)},
                {"checkpoint_bytes", run.checkpoint_bytes},
                {"checkpoint_copy_ms", or_null(run.checkpoint_copy_ms)},
                {"checkpoint_persist_ms", or_null(run.checkpoint_persist_ms)},
                {"model_bytes", run.model_bytes},
                {"model_save_ms", or_null(run.model_save_ms)},
                {"io_dir", run.io_dir.empty() ? nlohmann::json(nullptr) : nlohmann::json(run.io_dir)}};
  }
  return j;
}

Result<BenchResult> RunBench(const BenchOptions& o) {
  TERN_RETURN_IF_ERROR(o.model.Validate());
  if (o.seq > o.model.block_size) {
    return Status::InvalidArgument(fmt::format("--seq {} exceeds the model's block_size {}", o.seq, o.model.block_size));
  }
  if (o.steps < 1 || o.warmup < 0 || o.grad_accum < 1) {
    return Status::InvalidArgument("--steps and --accum must be at least 1 and --warmup at least 0");
  }
  BenchResult r;
  r.options = o;
  r.has_run = o.measure_run;
  r.run.process_start_s = ProcessAgeSeconds();
  auto t0 = Clock::now();
  TERN_ASSIGN_OR_RETURN(auto backend, MakeBackend(DeviceName(o.device)));
  r.run.backend_init_s = Since(t0);
  const Compute compute =
      o.precision == TrainPrecision::kBf16 ? Compute::kBF16 : o.precision == TrainPrecision::kFp16 ? Compute::kF16 : Compute::kF32;
  // As the trainer: fp16 matmuls emulated on the CPU; the probe measures bf16 on a GPU (same tensor-core peak)
  // and fp32 on the CPU (what the emulation runs at).
  if (compute == Compute::kF16) backend = WithF16Emulation(std::move(backend));
  const Compute peak_compute =
      compute != Compute::kF16 ? compute : backend->IsGpu() ? Compute::kBF16 : Compute::kF32;
  r.backend = backend->name();
  r.gpu_name = GpuNameFromBackendName(r.backend);
  r.threads = omp_get_max_threads();
  // A GPU needs a large probe to reach its peak (launch and sync overheads hide it at 1024^3).
  const bool gpu = r.backend.rfind("cuda", 0) == 0;
  const int probe = gpu ? 8192 : 1024;
  r.peak_gflops = o.measure_peak ? MeasurePeakGflops(backend.get(), peak_compute, 1.0, probe) : o.peak_gflops;
  if (o.measure_run) {  // the trainer's own probe call, which every `tern train` pays at start
    t0 = Clock::now();
    MeasurePeakGflops(backend.get(), peak_compute, 0.5);
    r.run.peak_probe_s = Since(t0);
  }

  // On a GPU, NVML's memory in use before the model and after the steps: the model plus the backend's scratch.
  std::unique_ptr<NvmlSampler> nvml;
  GpuSample mem_before;
  if (backend->IsGpu()) {
    backend->Synchronize();
    nvml = std::make_unique<NvmlSampler>(backend->PciBusId());
    mem_before = nvml->Sample();
  }
  t0 = Clock::now();
  Gpt model(backend.get(), o.model, o.batch, o.seq, compute, o.recompute);
  r.allocated = model.memory();
  model.InitWeights(1);
  backend->Synchronize();
  r.run.model_init_s = Since(t0);
  std::optional<Tokenizer> tok;
  if (o.measure_run && !o.data_dir.empty()) {
    TERN_RETURN_IF_ERROR(TimeDataOpen(o.data_dir, o.batch, o.seq, &tok, &r.run.data_open_s));
  }

  const size_t N = static_cast<size_t>(o.batch) * o.seq;
  // Each micro-batch its own tokens: the training split's when there is one (the trainer's loader, its
  // prefetch thread included), else random ones.
  std::vector<int32_t> tokens(N * o.grad_accum + 1);
  std::mt19937_64 rng(42);
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % o.model.vocab_size);
  std::unique_ptr<DataLoader> loader;
  if (!o.data_dir.empty() && !o.random_tokens) {
    TERN_ASSIGN_OR_RETURN(auto shards, FindShards(o.data_dir, "train"));
    TERN_ASSIGN_OR_RETURN(loader, DataLoader::Open(shards, o.batch, o.seq, 1, true));
  }
  Batch batch;
  const float dloss = 1.0f / static_cast<float>(N * o.grad_accum);
  for (int i = 0; i < o.warmup + o.steps; i++) {
    t0 = Clock::now();
    model.ZeroGrad();
    for (int micro = 0; micro < o.grad_accum; micro++) {
      const int32_t* x = tokens.data() + micro * N;
      const int32_t* y = x + 1;
      if (loader) {
        TERN_RETURN_IF_ERROR(loader->Next(&batch));
        x = batch.inputs.data();
        y = batch.targets.data();
      }
      model.Forward(x, y, o.batch, o.seq, dloss);
      model.Backward();
    }
    double norm = model.GradNorm();
    model.AdamWStep(1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, norm > 1.0 ? static_cast<float>(1.0 / norm) : 1.0f, i + 1);
    backend->Synchronize();
    if (i >= o.warmup) r.steps_ms.push_back(Since(t0) * 1e3);
  }
  if (nvml) {
    const GpuSample after = nvml->Sample();
    if (mem_before.ok && after.ok) r.device_mem_bytes = (after.mem_used_gb - mem_before.mem_used_gb) * 1e9;
  } else {
    r.peak_rss_bytes = PeakRssBytes();
  }
  r.step_ms = Median(r.steps_ms);
  r.tokens_per_s = static_cast<double>(N) * o.grad_accum / (r.step_ms / 1e3);
  r.flops_per_token = GptFlopsPerToken(o.model, o.seq);
  r.achieved_gflops = r.flops_per_token * r.tokens_per_s / 1e9;
  r.mfu = r.peak_gflops > 0 ? r.achieved_gflops / r.peak_gflops : 0;
  if (!o.measure_run) return r;

  // Evaluation: forward-only micro-batches with the loss, as Trainer::Evaluate runs them.
  std::vector<double> fwd;
  for (int i = 0; i < 6; i++) {
    t0 = Clock::now();
    model.Forward(tokens.data(), tokens.data() + 1, o.batch, o.seq);
    backend->Synchronize();
    if (i > 0) fwd.push_back(Since(t0) * 1e3);
  }
  r.run.forward_ms = Median(fwd);
  if (tok && o.sample_tokens > 0 && o.sample_choices > 0) {
    r.run.sample_choices = o.sample_choices;
    TERN_ASSIGN_OR_RETURN(double sample_s, TimeSampleCall(model, o, *tok, &r.run.sample_tokens));
    r.run.sample_ms = sample_s * 1e3;
  }
  if (!o.io_dir.empty()) TERN_RETURN_IF_ERROR(TimeSaves(model, o, &r.run));
  return r;
}

}  // namespace tern
