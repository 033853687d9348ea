// tern train CONFIG.yaml [--set key=value]... [--resume auto|none|PATH]
// Exit codes: 0 done, 1 failed, 2 bad usage or config (also a config the trainer refuses at start), 75
// preempted after an emergency checkpoint (resumable).
#include <cstdio>
#include <memory>

#include "ckpt/preemption.h"
#include "cli/command.h"
#include "core/progress.h"
#include "plan/units.h"
#include "registry/model_uri.h"
#include "train/trainer.h"

namespace tern::cli {
namespace {

struct TrainOptions {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string resume;  // empty = the config's ckpt.resume
  double price_per_hour = -1;
  int metrics_port = -1;  // -1 = the config's metrics.port
  bool list_keys = false;
  bool quiet = false;
};

void PrintSummary(const TrainSummary& s, const TrainConfig& cfg) {
  std::printf("\n== summary ==\n");
  std::printf("  steps            %d (%llu tokens)\n", s.steps, static_cast<unsigned long long>(s.tokens));
  std::printf("  final loss       train %.4f | val %.4f%s\n", s.train_loss, s.val_loss,
              s.val_loss_mix.empty() ? "" : (" (" + cfg.data_dir + ")").c_str());
  for (const auto& [dir, loss] : s.val_loss_mix)
    std::printf("  mixed-in data    val %.4f (%s)\n", loss, dir.c_str());
  if (s.choice_acc)
    std::printf("  choices          acc %.4f | acc_norm %.4f on %s\n", *s.choice_acc,
                s.choice_acc_norm.value_or(0), cfg.eval_choices.c_str());
  std::printf("  wall time        %s (training %s)\n", ProgressBar::FormatDuration(s.wall_s).c_str(),
              ProgressBar::FormatDuration(s.train_s).c_str());
  std::printf("  throughput       %.0f tokens/s, MFU %.1f%% of %.0f GFLOP/s (%s)\n", s.tokens_per_s,
              s.mfu * 100, s.peak_gflops, PrecisionName(cfg.precision));
  if (cfg.price_per_hour > 0) {
    // FormatUsd keeps four decimals under $0.10: a small run's $ per 1M tokens is not "$0.00".
    std::printf("  cost             %s at %s/h = %s per 1M tokens\n", plan::FormatUsd(s.cost_usd).c_str(),
                plan::FormatUsd(cfg.price_per_hour).c_str(),
                plan::FormatUsd(cfg.price_per_hour / 3600.0 / std::max(1e-9, s.tokens_per_s) * 1e6).c_str());
  }
  std::printf("  run directory    %s (model.safetensors, metrics.jsonl, config.yaml, summary.json)\n",
              s.run_dir.c_str());
  for (size_t i = 0; i < s.samples.size(); i++)
    std::printf("\n-- sample %zu --\n%s\n", i + 1, s.samples[i].c_str());
}

int RunTrain(const TrainOptions& o) {
  TrainConfig cfg;
  if (!o.config_path.empty()) {
    Status st = LoadTrainConfigFile(o.config_path, &cfg);
    if (!st.ok()) {
      std::fprintf(stderr, "tern train: %s\n", st.message().c_str());
      return 2;
    }
  }
  for (const auto& kv : o.overrides) {
    Status st = ApplyOverride(kv, &cfg);
    if (!st.ok()) {
      std::fprintf(stderr, "tern train: %s\n", st.message().c_str());
      return 2;
    }
  }
  if (o.price_per_hour >= 0) cfg.price_per_hour = o.price_per_hour;
  if (o.metrics_port >= 0) cfg.metrics_port = o.metrics_port;
  if (!o.resume.empty()) {  // an empty --resume is the config's ckpt.resume
    auto from = ParseResume(o.resume);
    if (!from.ok()) {
      std::fprintf(stderr, "tern train: --resume: %s\n", from.status().message().c_str());
      return 2;
    }
    cfg.ckpt.resume = *from;
  }
  if (o.list_keys) {
    std::printf("%s", DescribeTrainConfigKeys(cfg).c_str());
    return 0;
  }
  if (o.config_path.empty()) {
    std::fprintf(stderr, "tern train: give a config file, e.g. `tern train configs/demo.yaml`\n");
    return 2;
  }
  // models:/NAME@alias is pinned to the version it names now: config.yaml records what the run started from.
  if (registry::IsModelUri(cfg.init_from)) {
    auto pinned = registry::PinModelUri(cfg.init_from);
    if (!pinned.ok()) {
      std::fprintf(stderr, "tern train: train.init_from: %s\n", pinned.status().message().c_str());
      return 2;
    }
    cfg.init_from = *pinned;
  }
  TrainerEnv env;
  env.resolve_model = [](const std::string& p) { return registry::ResolveModelUri(p); };
  auto trainer = Trainer::Create(cfg, o.quiet, std::move(env));
  if (!trainer.ok()) {
    std::fprintf(stderr, "tern train: %s\n", trainer.status().message().c_str());
    // A config that cannot work (a bad value, missing data, a refused resume) is a usage error: exit 2, which
    // `tern run` does not retry. Anything else (I/O, a store down) may pass: exit 1.
    const Status::Code code = trainer.status().code();
    return code == Status::Code::kInvalidArgument || code == Status::Code::kNotFound ? 2 : 1;
  }
  auto summary = (*trainer)->Run();
  if (!summary.ok()) {
    std::fprintf(stderr, "tern train: %s\n", summary.status().message().c_str());
    return 1;
  }
  if (summary->preempted) {
    std::fprintf(stderr, "tern train: %s\n", summary->preempt_report.c_str());
    return ckpt::kExitPreempted;
  }
  if ((*trainer)->writer()) PrintSummary(*summary, (*trainer)->config());  // rank 0 speaks for the job
  return 0;
}

}  // namespace

void AddTrainCommand(CLI::App& root, CommandTable& table) {
  auto o = std::make_shared<TrainOptions>();
  auto* sub =
      root.add_subcommand("train", "Train a GPT from a YAML config; live metrics, eval, samples, summary");
  sub->footer(
      "\nThe config is YAML with sections model, data, train, eval, sample, run (see configs/demo.yaml;\n"
      "`tern train --list-keys` lists every key with its default). Any key can be overridden:\n"
      "  tern train configs/demo.yaml --set train.steps=200 --set train.precision=bf16 --set run.dir=runs/x\n"
      "Writes RUN_DIR/metrics.jsonl (one JSON object per step), config.yaml, model.safetensors, "
      "summary.json.\n"
      "Checkpoints (docs/checkpoints.md): --set ckpt.every=100 saves to RUN_DIR/checkpoints "
      "(ckpt.every=auto:\n"
      "the Young/Daly interval from the measured saves and ckpt.mtbf); ckpt.durable=DIR or\n"
      "s3://bucket/prefix adds a durable tier; --resume auto continues from the newest valid checkpoint.\n"
      "On SIGTERM, SIGUSR1 or a spot notice (ckpt.notice_url) it saves and exits with code 75 (resumable).\n"
      "Fine-tune (docs/finetune.md): --set train.init_from=RUN_DIR|CHECKPOINT|models:/NAME@REF starts from\n"
      "those weights, on data prepared with their tokenizer (tern prepare --tokenizer RUN_DIR).\n"
      "Less memory: --set train.recompute=blocks re-runs each layer's forward in the backward (same\n"
      "gradients, about a third more compute).\n"
      "Live metrics (docs/report.md): --metrics-port 9400 serves Prometheus text at "
      "http://127.0.0.1:9400/metrics\n"
      "while training (step, losses, tokens/s, MFU, $ so far, data wait, checkpoint stall, communication, "
      "GPU);\n"
      "metrics.bind=0.0.0.0 listens on every interface. A port in use stops the run at start (exit 2).");
  sub->add_option("config", o->config_path, "YAML config file");
  sub->add_option("--set", o->overrides, "override a key: section.key=value (repeatable)");
  sub->add_option("--price-per-hour", o->price_per_hour,
                  "USD/hour of this machine: adds cost_usd and usd_per_mtok");
  sub->add_option("--metrics-port", o->metrics_port,
                  "serve live Prometheus metrics on this port at /metrics (metrics.port; 0 = off)")
      ->check(CLI::Range(0, 65535));
  sub->add_option("--resume", o->resume,
                  "auto (newest valid checkpoint, else fresh) | none | PATH; overrides ckpt.resume");
  sub->add_flag("--list-keys", o->list_keys, "list every config key with its value and meaning, then exit");
  sub->add_flag("--quiet", o->quiet, "no progress line (metrics.jsonl and the summary are still written)");
  table.Add(sub, [o] { return RunTrain(*o); });
}

}  // namespace tern::cli
