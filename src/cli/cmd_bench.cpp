// tern bench --model gpt2-124m --batch 4 --seq 64 --precision bf16 --json
#include <cstdio>
#include <memory>

#include "cli/command.h"
#include "train/bench.h"
#include "train/train_config.h"

namespace tern::cli {
namespace {

struct BenchCliOptions {
  std::string model = "gpt2-124m", config_path;
  BenchOptions bench;
  bool json = false;
  int n_layer = 0, n_head = 0, n_embd = 0, vocab_size = 0;  // overrides of the preset's shape
};

int RunBenchCommand(BenchCliOptions o) {
  if (!o.config_path.empty()) {
    TrainConfig cfg;
    Status st = LoadTrainConfigFile(o.config_path, &cfg);
    if (!st.ok()) {
      std::fprintf(stderr, "tern bench: %s\n", st.message().c_str());
      return 2;
    }
    if (cfg.model.vocab_size == 0) cfg.model.vocab_size = 4096;  // the tokenizer decides in training; assume demo's
    o.bench.model = cfg.model;
  } else {
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
  auto r = RunBench(o.bench);
  if (!r.ok()) {
    std::fprintf(stderr, "tern bench: %s\n", r.status().message().c_str());
    return 1;
  }
  if (o.json) {
    std::printf("%s\n", r->ToJson().dump(2).c_str());
    return 0;
  }
  std::printf("model      %s, B=%d T=%d, %s on %s (%d threads)\n", o.bench.model.ToString().c_str(), o.bench.batch,
              o.bench.seq, o.bench.precision.c_str(), r->backend.c_str(), r->threads);
  std::printf("step       %.1f ms (median of %d)\n", r->step_ms, o.bench.steps);
  std::printf("throughput %.1f tokens/s\n", r->tokens_per_s);
  std::printf("achieved   %.1f GFLOP/s (%.1f MFLOP/token)\n", r->achieved_gflops, r->flops_per_token / 1e6);
  std::printf("peak       %.1f GFLOP/s (matmul probe, %s)\n", r->peak_gflops, o.bench.precision.c_str());
  std::printf("MFU        %.1f%%\n", r->mfu * 100);
  return 0;
}

}  // namespace

void AddBenchCommand(CLI::App& root, CommandTable& table) {
  auto o = std::make_shared<BenchCliOptions>();
  auto* sub = root.add_subcommand("bench", "Measure training speed and MFU on synthetic tokens");
  sub->footer("\nMFU = model FLOPs per token x tokens/s / peak FLOP/s, where the peak is measured by a matmul probe\n"
              "in the same process and precision. Examples:\n"
              "  tern bench --model gpt2-124m --batch 4 --seq 64 --precision bf16\n"
              "  tern bench --config configs/demo.yaml --batch 8 --seq 128 --json > bench.json   # for tern plan --calibrate");
  sub->add_option("--model", o->model, "preset: gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m");
  sub->add_option("--n-layer", o->n_layer, "override the preset's layers");
  sub->add_option("--n-head", o->n_head, "override the preset's heads");
  sub->add_option("--n-embd", o->n_embd, "override the preset's channels");
  sub->add_option("--vocab-size", o->vocab_size, "override the preset's vocabulary");
  sub->add_option("--config", o->config_path, "take the model shape from a training config instead");
  sub->add_option("--batch", o->bench.batch, "micro-batch B")->check(CLI::PositiveNumber);
  sub->add_option("--seq", o->bench.seq, "sequence length T")->check(CLI::PositiveNumber);
  sub->add_option("--precision", o->bench.precision, "fp32 | bf16")->check(CLI::IsMember({"fp32", "bf16"}));
  sub->add_option("--steps", o->bench.steps, "timed steps")->check(CLI::PositiveNumber);
  sub->add_option("--warmup", o->bench.warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
  sub->add_option("--device", o->bench.device, "cpu | cpu-ref | cuda | auto");
  sub->add_flag("--json", o->json, "print one JSON object (the format tern plan --calibrate reads)");
  table.Add(sub, [o] { return RunBenchCommand(*o); });
}

}  // namespace tern::cli
