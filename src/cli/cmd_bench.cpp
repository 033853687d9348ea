// tern bench --model gpt2-124m --batch 4 --seq 64 --precision bf16 --json
// tern bench --config configs/demo.yaml [--set key=value]... --json   # the run `tern train` would do
// mpirun -np 2 tern bench --dist --json                                # the ranks' all-reduce (bench_dist.h)
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>

#include <fmt/ranges.h>

#include "cli/bench_dist.h"
#include "cli/bench_serve.h"
#include "cli/command.h"
#include "data/tokenizer.h"
#include "plan/gpu_specs.h"
#include "plan/workload.h"
#include "train/bench.h"
#include "train/remote_data.h"
#include "train/train_config.h"

namespace tern::cli {
namespace {

struct BenchCliOptions {
  std::string model = "gpt2-124m", config_path, io_dir;
  std::vector<std::string> overrides;
  BenchOptions bench;
  bool json = false, run = false, no_run = false, dist = false, serve = false, steps_given = false;
  DistBenchFlags dist_flags;
  ServeBenchFlags serve_flags;
  int n_layer = 0, n_head = 0, n_embd = 0, vocab_size = 0;  // overrides of the preset's shape
  // Which of the shape flags were given: with --config, the others come from the config.
  bool batch_given = false, seq_given = false, accum_given = false, precision_given = false,
       device_given = false, recompute_given = false;
  std::optional<AttentionKind> attention;  // --attention, over the config's
};

// A flag's value through the config registry's parser: its error (naming the allowed values) is the flag's.
template <typename T>
T Parsed(const std::string& flag, Result<T> r) {
  if (!r.ok()) throw CLI::ValidationError(flag, r.status().message());
  return std::move(r).value();
}

// The checkpoint directory's nearest existing ancestor: the save is timed on the disk the run will use,
// without creating the run directory.
std::string ExistingAncestor(std::filesystem::path p) {
  std::error_code ec;
  p = std::filesystem::absolute(p, ec);
  while (!p.empty() && !std::filesystem::is_directory(p, ec) && p != p.parent_path()) p = p.parent_path();
  return p.string();
}

// Takes the run from a training config: its optimizer and loss scaling (the step the trainer will run),
// shape, precision, device, data and checkpoint directory; the shape flags given override the config's.
Status ApplyConfig(BenchCliOptions* o) {
  TrainConfig cfg;
  TERN_RETURN_IF_ERROR(LoadTrainConfigFile(o->config_path, &cfg));
  for (const auto& kv : o->overrides) TERN_RETURN_IF_ERROR(ApplyOverride(kv, &cfg));
  const bool remote = IsRemoteData(cfg.data_dir);  // s3://: the bench reads this machine's copy of it
  if (cfg.model.vocab_size == 0) {  // the trainer takes the tokenizer's; so do we when it is there
    if (remote) {
      TERN_ASSIGN_OR_RETURN(const RemoteDataInfo info,
                            ReadRemoteDataInfo(cfg.data_dir, DataMirrorOptionsFor(cfg).s3));
      cfg.model.vocab_size = info.vocab_size;
    } else {
      auto tok = Tokenizer::Load(cfg.data_dir + "/tokenizer.model");
      cfg.model.vocab_size = tok.ok() ? tok->vocab_size() : 4096;
    }
  }
  BenchOptions& b = o->bench;
  b.train = cfg;
  b.model = cfg.model;
  if (!o->batch_given) b.batch = cfg.batch_size;
  if (!o->seq_given) b.seq = cfg.seq_len;
  if (!o->accum_given) b.grad_accum = cfg.grad_accum_steps();
  if (!o->precision_given) b.precision = cfg.precision;
  if (!o->device_given) b.device = cfg.device;
  if (!o->recompute_given) b.recompute = cfg.recompute;
  if (o->attention) b.train.attention = *o->attention;
  if (remote || std::filesystem::exists(cfg.data_dir + "/tokenizer.model")) b.data_dir = cfg.data_dir;
  b.sample_tokens = cfg.sample_tokens;
  b.sample_choices = cfg.num_samples > 0 ? cfg.num_samples : 1;
  b.sample_prompt = cfg.sample_prompt;
  if (o->io_dir.empty())
    o->io_dir = ExistingAncestor(cfg.ckpt.dir.empty() ? cfg.run_dir + "/checkpoints" : cfg.ckpt.dir);
  return Status::Ok();
}

// tern plan's memory model for the bench's shape on one GPU without ZeRO-1: what `tern plan` budgets for it.
// fp16 keeps no 16-bit weight copy, so the planner's fp32 figures are its figures.
std::optional<BenchMemory> PlannedMemory(const BenchOptions& b) {
  plan::WorkloadSpec spec;
  spec.cfg = b.model;
  spec.seq = b.seq;
  spec.tokens = 1;
  spec.micro_batch = b.batch;
  spec.attention = b.train.attention;
  spec.logits_chunk = b.train.logits_chunk;
  auto w = plan::Workload::Make(spec, plan::PlanDefaults());
  if (!w.ok()) return std::nullopt;
  const plan::ActRecompute r = plan::PlanRecompute(b.recompute);
  const plan::Precision p =
      b.precision == TrainPrecision::kBf16 ? plan::Precision::kBf16 : plan::Precision::kFp32;
  const auto m = w->Memory(p, b.batch, false, r, 1);
  return BenchMemory{m.weights, m.grads, m.optimizer, m.activations};
}

void PrintMemory(const BenchResult& r) {
  constexpr double GiB = 1024.0 * 1024 * 1024;
  const GptMemory& a = r.allocated;
  std::printf(
      "memory     model allocated %.2f GiB = weights %.2f + grads %.2f + AdamW %.2f + activations %.2f + "
      "backward scratch %.2f (recompute %s)\n",
      a.total() / GiB, (a.params + a.params_bf16) / GiB, a.grads / GiB, a.adam_state / GiB,
      a.activations / GiB, a.scratch / GiB, RecomputeName(r.options.recompute));
  if (r.planned) {
    const BenchMemory& p = *r.planned;
    std::printf(
        "           tern plan estimate %.2f GiB = weights %.2f + grads %.2f + AdamW %.2f + activations and "
        "scratch %.2f (%+.1f%% of allocated)\n",
        p.total() / GiB, p.weights / GiB, p.grads / GiB, p.optimizer / GiB, p.activations / GiB,
        100 * (p.total() / static_cast<double>(a.total()) - 1));
  }
  if (r.peak_rss_bytes >= 0) {
    std::printf(
        "           measured peak resident %.2f GiB (the whole process: model, backend, libraries, data)\n",
        r.peak_rss_bytes / GiB);
  }
  if (r.device_mem_bytes >= 0) {
    std::printf(
        "           measured GPU memory %.2f GiB in use after the steps less before the model (NVML: the "
        "model plus the backend's scratch)\n",
        r.device_mem_bytes / GiB);
  }
}

int RunBenchCommand(BenchCliOptions o) {
  if (o.dist) {
    if (!o.config_path.empty() || !o.overrides.empty()) {
      std::fprintf(stderr, "tern bench: --dist measures the all-reduce only; drop --config/--set\n");
      return 2;
    }
    DistBenchFlags& d = o.dist_flags;
    d.json = o.json;
    d.iters = o.bench.steps;
    d.warmup = o.bench.warmup;
    if (o.device_given) d.device = DeviceName(o.bench.device);
    return RunDistBench(d);
  }
  if (o.serve) {
    if (!o.config_path.empty() || !o.overrides.empty()) {
      std::fprintf(stderr,
                   "tern bench: --serve times tern serve's forward of a --model; drop --config/--set\n");
      return 2;
    }
    auto preset = GptPreset(o.model);
    if (!preset.ok()) {
      std::fprintf(stderr, "tern bench: %s\n", preset.status().message().c_str());
      return 2;
    }
    GptConfig cfg = *preset;
    if (o.n_layer) cfg.n_layer = o.n_layer;
    if (o.n_head) cfg.n_head = o.n_head;
    if (o.n_embd) cfg.n_embd = o.n_embd;
    if (o.vocab_size) cfg.vocab_size = o.vocab_size;
    ServeBenchFlags f = o.serve_flags;
    f.json = o.json;
    if (o.steps_given) f.steps = o.bench.steps;
    if (o.device_given) f.device = DeviceName(o.bench.device);
    return RunServeBench(f, cfg);
  }
  if (!o.config_path.empty()) {
    Status st = ApplyConfig(&o);
    if (!st.ok()) {
      std::fprintf(stderr, "tern bench: %s\n", st.message().c_str());
      return 2;
    }
  } else {
    if (!o.overrides.empty()) {
      std::fprintf(stderr, "tern bench: --set needs --config (it overrides the config's keys)\n");
      return 2;
    }
    auto preset = GptPreset(o.model);
    if (!preset.ok()) {
      std::fprintf(stderr, "tern bench: %s\n", preset.status().message().c_str());
      return 2;
    }
    o.bench.model = *preset;
  }
  if (o.n_layer) o.bench.model.n_layer = o.n_layer;
  if (o.n_head) o.bench.model.n_head = o.n_head;
  if (o.n_embd) o.bench.model.n_embd = o.n_embd;
  if (o.vocab_size) o.bench.model.vocab_size = o.vocab_size;
  // The run block costs a few seconds (a second peak probe, a sample, a checkpoint save): by default
  // only when a config says which run to predict.
  o.bench.measure_run = !o.no_run && (o.run || !o.config_path.empty());
  o.bench.io_dir = o.bench.measure_run ? o.io_dir : "";
  auto r = RunBench(o.bench);
  if (!r.ok()) {
    std::fprintf(stderr, "tern bench: %s\n", r.status().message().c_str());
    return 1;
  }
  r->gpu = plan::CatalogGpuId(r->gpu_name);
  r->planned = PlannedMemory(o.bench);
  if (!r->gpu_name.empty() && r->gpu.empty()) {
    std::fprintf(stderr,
                 "tern bench: the GPU '%s' matches no catalog GPU; set \"gpu\" in the JSON to its catalog "
                 "name (data/catalog/gpus.csv) to calibrate `tern plan` for it\n",
                 r->gpu_name.c_str());
  }
  if (o.json) {
    std::printf("%s\n", r->ToJson().dump(2).c_str());
    return 0;
  }
  const BenchOptions& b = o.bench;
  std::printf("model      %s, B=%d T=%d x%d accum, %s on %s (%d threads)\n", b.model.ToString().c_str(),
              b.batch, b.seq, b.grad_accum, PrecisionName(b.precision), r->backend.c_str(), r->threads);
  std::printf("cpu        %s (%s), %d of %d logical CPUs\n", r->cpu.model.c_str(),
              r->cpu.isa.empty() ? "no AVX2" : fmt::format("{}", fmt::join(r->cpu.isa, ", ")).c_str(),
              r->threads, r->cpu.logical_cpus);
  if (!r->gpu_name.empty())
    std::printf("gpu        %s (catalog: %s)\n", r->gpu_name.c_str(), r->gpu.empty() ? "?" : r->gpu.c_str());
  std::printf("step       %.1f ms (median of %d after %d warm-up; min %.1f, max %.1f)\n", r->step_ms, b.steps,
              b.warmup, *std::min_element(r->steps_ms.begin(), r->steps_ms.end()),
              *std::max_element(r->steps_ms.begin(), r->steps_ms.end()));
  std::printf("throughput %.1f tokens/s\n", r->tokens_per_s);
  std::printf("achieved   %.1f GFLOP/s (%.1f MFLOP/token)\n", r->achieved_gflops, r->flops_per_token / 1e6);
  std::printf("peak       %.1f GFLOP/s (matmul probe, %s)\n", r->peak_gflops, PrecisionName(b.precision));
  std::printf("MFU        %.1f%%\n", r->mfu * 100);
  PrintMemory(*r);
  if (r->has_run) {
    const BenchRunTimes& t = r->run;
    std::printf("start-up   %.2f s process + %.2f s backend + %.2f s model init + %.2f s peak probe%s\n",
                t.process_start_s, t.backend_init_s, t.model_init_s, t.peak_probe_s,
                t.data_open_s >= 0 ? fmt::format(" + {:.3f} s data open", t.data_open_s).c_str() : "");
    std::printf("eval       %.1f ms per forward-only micro-batch (%.2f of a step's per-token time)\n",
                t.forward_ms, t.forward_ms * b.grad_accum / r->step_ms);
    if (t.sample_ms >= 0) {
      std::printf("sample     %.1f ms for %d choices x %d tokens\n", t.sample_ms, t.sample_choices,
                  t.sample_tokens);
    }
    if (t.checkpoint_persist_ms >= 0) {
      std::printf(
          "save       checkpoint %.0f MB: copy %.0f ms, persist %.0f ms; model.safetensors %.0f MB in %.0f "
          "ms (%s)\n",
          t.checkpoint_bytes / 1e6, t.checkpoint_copy_ms, t.checkpoint_persist_ms, t.model_bytes / 1e6,
          t.model_save_ms, t.io_dir.c_str());
    }
    if (t.checkpoint_load_ms >= 0) {
      std::printf("resume     checkpoint read from disk, verified and restored in %.0f ms\n",
                  t.checkpoint_load_ms);
    }
  }
  return 0;
}

}  // namespace

void AddBenchCommand(CLI::App& root, CommandTable& table) {
  auto o = std::make_shared<BenchCliOptions>();
  auto* sub = root.add_subcommand("bench", "Measure training speed and MFU on synthetic tokens");
  sub->footer(
      "\nMFU = model FLOPs per token x tokens/s / peak FLOP/s, where the peak is measured by a matmul probe\n"
      "in the same process and precision. With --config, the shape, accumulation, precision and device are "
      "the\n"
      "config's (flags override them) and the bench also times what else the run does (start-up, "
      "evaluation,\n"
      "samples, a checkpoint save in the checkpoint directory's disk) for `tern plan --config`. Memory: the\n"
      "model's allocation, `tern plan`'s estimate for the same shape, and the measured peak RSS (CPU) or "
      "NVML\n"
      "memory in use (GPU). Examples:\n"
      "  tern bench --model gpt2-124m --batch 4 --seq 64 --precision bf16\n"
      "  tern bench --config configs/demo.yaml --json > bench.json   # for tern plan --calibrate\n"
      "  mpirun -np 8 tern bench --dist --json > dist.json           # the ranks' all-reduce, for "
      "--calibrate\n\n"
      "--dist times AllReduce (sum, fp32) of the launched ranks (mpirun/srun; one process is world 1) from\n"
      "--dist-min-kb to --dist-max-mb, doubling, --steps times after --warmup: time, algorithm bandwidth\n"
      "(bytes/time) and bus bandwidth (2(W-1)/W x algbw, as nccl-tests); latency is the smallest size's "
      "time.\n"
      "Only rank 0 prints. --device cuda (auto: where there is a GPU) reduces GPU buffers over NCCL.\n\n"
      "--serve times tern serve's own forward with random weights of --model's shape: one prompt of "
      "--context\n"
      "tokens, then decode steps of each --batches count of sequences over a cache of --context tokens each\n"
      "(the median of --steps). The JSON calibrates `tern plan --serve --calibrate serve.json` "
      "(docs/serving-plan.md);\n"
      "the text output prints the fit:\n"
      "  tern bench --serve --model gpt2-124m --weights bf16 --batches 1,4,16,64 --context 512 --json > "
      "serve.json");
  sub->add_option("--model", o->model, "preset: " + GptPresetList());
  sub->add_option("--n-layer", o->n_layer, "override the preset's layers");
  sub->add_option("--n-head", o->n_head, "override the preset's heads");
  sub->add_option("--n-embd", o->n_embd, "override the preset's channels");
  sub->add_option("--vocab-size", o->vocab_size, "override the preset's vocabulary");
  sub->add_option("--config", o->config_path,
                  "take the model, batch, precision and device from a training config");
  sub->add_option("--set", o->overrides, "with --config: override a key, as tern train does (repeatable)");
  sub->add_option_function<int>(
         "--batch", [o](int v) { o->bench.batch = v, o->batch_given = true; }, "micro-batch B")
      ->check(CLI::PositiveNumber);
  sub->add_option_function<int>(
         "--seq", [o](int v) { o->bench.seq = v, o->seq_given = true; }, "sequence length T")
      ->check(CLI::PositiveNumber);
  sub->add_option_function<int>(
         "--accum", [o](int v) { o->bench.grad_accum = v, o->accum_given = true; },
         "micro-batches per step (gradient accumulation)")
      ->check(CLI::PositiveNumber);
  sub->add_option_function<std::string>(
      "--precision",
      [o](const std::string& v) {
        o->bench.precision = Parsed("--precision", ParsePrecision(v)), o->precision_given = true;
      },
      "fp32 | bf16 | fp16 (train.precision)");
  sub->add_option_function<std::string>(
      "--recompute",
      [o](const std::string& v) {
        o->bench.recompute = Parsed("--recompute", ParseRecompute(v)), o->recompute_given = true;
      },
      "none | gelu (train.recompute: recompute the GELU outputs in the backward)");
  sub->add_option_function<std::string>(
      "--attention",
      [o](const std::string& v) {
        o->attention = Parsed("--attention", ParseAttention(v));
        o->bench.train.attention = *o->attention;
      },
      "naive | flash | cudnn (train.attention: the attention kernels)");
  sub->add_option_function<int>(
         "--steps", [o](int v) { o->bench.steps = v, o->steps_given = true; },
         "timed steps (the median is reported; default 20, --serve 8 per batch)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--warmup", o->bench.warmup, "untimed steps first")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option_function<std::string>(
      "--device",
      [o](const std::string& v) {
        o->bench.device = Parsed("--device", ParseDevice(v)), o->device_given = true;
      },
      "cpu | cpu-ref | cuda | auto (train.device)");
  sub->add_option("--io-dir", o->io_dir,
                  "time a checkpoint save here (default with --config: the checkpoint dir's disk)");
  sub->add_flag("--random-tokens", o->bench.random_tokens,
                "with --config: random tokens instead of data.dir's");
  sub->add_flag("--run", o->run,
                "also time start-up, eval, a sample (and a save with --io-dir); default with --config");
  sub->add_flag("--no-run", o->no_run, "time the steps only, even with --config");
  sub->add_flag("--dist", o->dist,
                "time the all-reduce of the launched ranks (mpirun/srun) instead of training steps");
  sub->add_option("--dist-min-kb", o->dist_flags.min_kb, "--dist: smallest message, KiB")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--dist-max-mb", o->dist_flags.max_mb, "--dist: largest message, MiB")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  auto* serve =
      sub->add_option_group("Serving", "tern bench --serve: tern serve's forward, for tern plan --serve");
  serve->add_flag(
      "--serve", o->serve,
      "time tern serve's forward (random weights): a prompt's prefill and decode steps of --batches "
      "sequences over --context cached tokens each");
  serve
      ->add_option("--weights", o->serve_flags.weights,
                   "--serve: fp32 | bf16 | int8 | int4 (tern serve --weights)")
      ->capture_default_str();
  serve
      ->add_option("--kv-dtype", o->serve_flags.kv_dtype,
                   "--serve: auto | fp32 | bf16 | int8 (tern serve --kv-dtype)")
      ->capture_default_str();
  serve->add_option("--batches", o->serve_flags.batches, "--serve: sequences per decode step (1 and larger)")
      ->delimiter(',')
      ->capture_default_str();
  serve
      ->add_option("--context", o->serve_flags.context, "--serve: cached tokens per sequence, and the prompt")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  serve
      ->add_option("--lora-rank", o->serve_flags.lora_rank,
                   "--serve: also time each decode step with every sequence on a LoRA adapter of this rank "
                   "(tern serve --lora), printed as a ratio to the step without")
      ->check(CLI::NonNegativeNumber);
  serve->add_option("--lora-adapters", o->serve_flags.lora_adapters, "--serve --lora-rank: distinct adapters")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_flag("--json", o->json, "print one JSON object (the format tern plan --calibrate reads)");
  table.Add(sub, [o] { return RunBenchCommand(*o); });
}

}  // namespace tern::cli
