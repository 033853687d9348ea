#include "train/bench.h"

#include <fcntl.h>
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
#include "ckpt/manager.h"
#include "data/shard.h"
#include "infer/generate.h"
#include "metrics/nvml_sampler.h"
#include "metrics/run_record.h"
#include "model/gpt.h"
#include "model/safetensors.h"
#include "train/train_checkpoint.h"
#include "train/trainer.h"

namespace tern {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double PeakRssBytes() {
  struct rusage u {};
  return ::getrusage(RUSAGE_SELF, &u) == 0 ? static_cast<double>(u.ru_maxrss) * 1024 : -1;  // Linux: KiB
}

nlohmann::json MemoryJson(const BenchMemory& m) {
  return {{"weights", m.weights},
          {"grads", m.grads},
          {"optimizer", m.optimizer},
          {"activations", m.activations},
          {"total", m.total()}};
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// A token shard of random tokens as DIR/train_000.bin and DIR/val_000.bin: `windows` windows of T+1 tokens,
// what a step of B x accum sequences reads. The trainer's loaders read them like prepared data (their
// prefetch thread included); the files can go once the loaders have mapped them.
Status WriteRandomShards(const std::string& dir, const GptConfig& model, int windows, int T) {
  std::vector<int32_t> tokens(static_cast<size_t>(windows) * T + 1);
  std::mt19937_64 rng(42);
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % model.vocab_size);
  for (const char* split : {"train", "val"}) {
    TERN_ASSIGN_OR_RETURN(auto w, ShardWriter::Create(dir + "/" + split + "_000.bin", model.vocab_size));
    TERN_RETURN_IF_ERROR(w->Append(tokens));
    TERN_RETURN_IF_ERROR(w->Finish());
  }
  return Status::Ok();
}

// Drops the files under `dir` from the page cache (they were fsync'd, so the pages are clean), so that the
// next read comes from the disk, as a new instance's resume does. Best effort: a file that cannot be opened
// stays cached, and the load is then faster than a cold one.
void EvictFromPageCache(const std::filesystem::path& dir) {
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const int fd = ::open(it->path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// One checkpoint save through the trainer's own path (capture, copy, persist with fsync) to a fresh
// manager, as the first save of a run is; its resume (the newest valid checkpoint found, verified and
// restored into the model, as `tern train --resume` does, from the disk); and the final model.safetensors
// write. The restore writes back the state just saved, so the model is unchanged.
Status TimeSaveAndLoad(Gpt* model, const TrainConfig& cfg, const BenchOptions& o, BenchRunTimes* r) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(o.io_dir) / ("tern_bench_io." + std::to_string(::getpid()));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return Status::IoError("--io-dir " + o.io_dir + ": cannot create " + dir.string() + ": " + ec.message());
  r->io_dir = o.io_dir;
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
          1, {0}, "periodic", std::nullopt,
          [&](ckpt::Snapshot& s) { return CaptureTrainMeta(*model, cfg, {}, p, &s); },
          [&](ckpt::Snapshot& s) { return CopyModelState(*model, &s); }, /*sync=*/true);
    }
    if (st.ok()) {
      for (const auto& e : (*mgr)->TakeEvents()) {
        if (!e.status.ok()) st = e.status;
        r->checkpoint_bytes = static_cast<double>(e.bytes);
        r->checkpoint_copy_ms = e.copy_ms;
        r->checkpoint_persist_ms = e.persist_ms;
      }
    }
    if (st.ok()) {
      EvictFromPageCache(dir / "ckpt");
      const auto t0 = Clock::now();
      std::vector<std::string> skipped;
      auto loaded =
          (*mgr)->LoadNewestValid(&skipped, ResumeFiles(model->trainable(), model->optimizer_shard()));
      if (!loaded.ok()) {
        st = loaded.status().WithContext("loading it back");
      } else {
        auto restored = RestoreTrainState(*loaded, cfg, {}, model);
        if (!restored.ok()) st = restored.status().WithContext("restoring it");
      }
      if (st.ok()) r->checkpoint_load_ms = Since(t0) * 1e3;
    }
  }
  if (st.ok()) {
    const auto t0 = Clock::now();
    std::vector<float> params = model->GetParameters();
    r->model_bytes = static_cast<double>(params.size()) * 4;
    st = WriteGptSafetensors((dir / "model.safetensors").string(), o.model, params, {});
    r->model_save_ms = Since(t0) * 1e3;
  }
  fs::remove_all(dir, ec);
  return st.WithContext("timing a checkpoint save and load in --io-dir " + o.io_dir);
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
      {"model",
       {{"n_layer", m.n_layer},
        {"n_head", m.n_head},
        {"n_embd", m.n_embd},
        {"vocab_size", m.vocab_size},
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
      {"machine",
       {{"cpu", cpu.model}, {"isa", cpu.isa}, {"threads", threads}, {"logical_cpus", cpu.logical_cpus}}},
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
  nlohmann::json alloc =
      MemoryJson({static_cast<double>(a.params + a.params_bf16), static_cast<double>(a.grads),
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
                {"checkpoint_load_ms", or_null(run.checkpoint_load_ms)},
                {"model_bytes", run.model_bytes},
                {"model_save_ms", or_null(run.model_save_ms)},
                {"io_dir", run.io_dir.empty() ? nlohmann::json(nullptr) : nlohmann::json(run.io_dir)}};
  }
  StampRecordVersion(&j);  // the format version (metrics/run_record.h)
  return j;
}

// The trainer's config for the bench: the run's (o.train) with the bench's shape, precision and device.
TrainConfig BenchTrainConfig(const BenchOptions& o) {
  TrainConfig c = o.train;
  c.model = o.model;
  c.batch_size = o.batch;
  c.seq_len = o.seq;
  c.total_batch_tokens = static_cast<int64_t>(o.batch) * o.seq * o.grad_accum;
  c.precision = o.precision;
  c.device = o.device;
  c.recompute = o.recompute;
  c.eval_batches = 1;  // forward_ms is one forward-only micro-batch
  c.sample_prompt = o.sample_prompt;
  if (!o.measure_peak) c.peak_gflops = o.peak_gflops;
  return c;
}

Result<BenchResult> RunBench(const BenchOptions& o) {
  namespace fs = std::filesystem;
  TERN_RETURN_IF_ERROR(o.model.Validate());
  if (o.seq > o.model.block_size) {
    return Status::InvalidArgument(
        fmt::format("--seq {} exceeds the model's block_size {}", o.seq, o.model.block_size));
  }
  if (o.steps < 1 || o.warmup < 0 || o.grad_accum < 1) {
    return Status::InvalidArgument("--steps and --accum must be at least 1 and --warmup at least 0");
  }
  BenchResult r;
  r.options = o;
  r.has_run = o.measure_run;
  r.run.process_start_s = ProcessAgeSeconds();
  // The trainer itself, built stage by stage (Trainer::Create's stages, without its run directory): each
  // stage timed, then its own Step, Evaluate and Samples.
  std::unique_ptr<Trainer> t(new Trainer());
  t->cfg_ = BenchTrainConfig(o);
  t->quiet_ = true;
  TrainConfig& cfg = t->cfg_;

  // Data: the training split's tokens when there is one, else random ones through the same loaders.
  const bool real_data = !o.data_dir.empty();
  auto t0 = Clock::now();
  if (real_data) {
    cfg.data_dir = o.data_dir;
    TERN_RETURN_IF_ERROR(t->MirrorRemoteData());  // s3:// data: this machine's verified copy
    TERN_RETURN_IF_ERROR(t->OpenTokenizer());     // the tokenizer's vocabulary must fit the model's
    TERN_RETURN_IF_ERROR(t->OpenLoaders(o.data_dir));
    if (o.measure_run) r.run.data_open_s = Since(t0);
  }
  if (!real_data || o.random_tokens) {
    const fs::path dir = fs::temp_directory_path() / ("tern_bench_tokens." + std::to_string(::getpid()));
    std::error_code ec;
    fs::create_directories(dir, ec);
    Status st = ec ? Status::IoError("cannot create " + dir.string() + ": " + ec.message())
                   : WriteRandomShards(dir.string(), o.model, o.batch * o.grad_accum, o.seq);
    if (st.ok()) st = t->OpenLoaders(dir.string());
    fs::remove_all(dir, ec);  // the loaders keep their mappings
    TERN_RETURN_IF_ERROR(st.WithContext("random tokens for the bench"));
    if (!real_data) cfg.data_dir = dir.string();
  }
  TERN_RETURN_IF_ERROR(cfg.Validate());

  t0 = Clock::now();
  TERN_RETURN_IF_ERROR(t->OpenDevice());
  r.run.backend_init_s = Since(t0);
  Backend* backend = t->setup_.backend.get();
  r.backend = backend->name();
  r.gpu_name = GpuNameFromBackendName(r.backend);
  r.threads = omp_get_max_threads();
  r.cpu = ReadCpuInfo();
  // The bench's own peak: a longer probe and, on a GPU, a larger one (launch and sync overheads hide the peak
  // at 1024^3). The trainer's probe call, which every `tern train` pays at start, is timed on its own.
  const int probe = backend->capabilities().is_gpu ? 8192 : 1024;
  r.peak_gflops = o.measure_peak ? MeasurePeakGflops(backend, t->setup_.probe, 1.0, probe) : o.peak_gflops;
  if (o.measure_run) {
    t0 = Clock::now();
    ProbeRunPeak(t->setup_);
    r.run.peak_probe_s = Since(t0);
  }
  t->peak_gflops_ = r.peak_gflops;

  // On a GPU, NVML's memory in use before the model and after the steps: the model plus the backend's
  // scratch.
  std::unique_ptr<NvmlSampler> nvml;
  GpuSample mem_before;
  if (backend->capabilities().is_gpu) {
    backend->Synchronize();
    nvml = std::make_unique<NvmlSampler>(backend->PciBusId());
    mem_before = nvml->Sample();
  }
  t0 = Clock::now();
  t->BuildModel();
  t->model_->InitWeights(cfg.seed);
  backend->Synchronize();
  r.run.model_init_s = Since(t0);
  r.allocated = t->model_->memory();

  for (int i = 0; i < o.warmup + o.steps; i++) {
    TERN_ASSIGN_OR_RETURN(const StepStats s, t->Step());
    if (i >= o.warmup) r.steps_ms.push_back(s.step_s * 1e3);
  }
  if (nvml) {
    const GpuSample after = nvml->Sample();
    if (mem_before.ok && after.ok) r.device_mem_bytes = (after.mem_used_gb - mem_before.mem_used_gb) * 1e9;
  } else {
    r.peak_rss_bytes = PeakRssBytes();
  }
  r.step_ms = Median(r.steps_ms);
  r.tokens_per_s = static_cast<double>(o.batch) * o.seq * o.grad_accum / (r.step_ms / 1e3);
  r.flops_per_token = LoraFlopsPerToken(o.model, cfg.lora, o.seq);  // GptFlopsPerToken without LoRA
  r.achieved_gflops = r.flops_per_token * r.tokens_per_s / 1e9;
  r.mfu = r.peak_gflops > 0 ? r.achieved_gflops / r.peak_gflops : 0;
  if (!o.measure_run) return r;

  // Evaluation: Trainer::Evaluate over one micro-batch (its reset of the validation split included), the
  // first call untimed.
  std::vector<double> fwd;
  for (int i = 0; i < 6; i++) {
    t0 = Clock::now();
    TERN_RETURN_IF_ERROR(t->Evaluate().status());
    backend->Synchronize();
    if (i > 0) fwd.push_back(Since(t0) * 1e3);
  }
  r.run.forward_ms = Median(fwd);
  // One Trainer::Samples call, to full length (end-of-text ignored); needs the data's tokenizer.
  if (t->tokenizer_ && o.sample_tokens > 0 && o.sample_choices > 0) {
    const int choices = std::min(o.sample_choices, kMaxChoices);
    r.run.sample_choices = choices;
    r.run.sample_tokens = t->SampleRequest(choices, o.sample_tokens, true).max_tokens;
    t0 = Clock::now();
    TERN_RETURN_IF_ERROR(t->Samples(choices, o.sample_tokens, /*full_length=*/true).status());
    r.run.sample_ms = Since(t0) * 1e3;
  }
  if (!o.io_dir.empty()) TERN_RETURN_IF_ERROR(TimeSaveAndLoad(t->model_.get(), cfg, o, &r.run));
  return r;
}

}  // namespace tern
