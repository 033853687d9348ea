// tern pipeline PIPELINE.yaml: train -> evaluate -> compare -> register -> promote (pipeline/pipeline.h).
#include <cstdio>
#include <filesystem>

#include "cli/command.h"
#include "core/file_util.h"
#include "pipeline/pipeline.h"

namespace tern::cli {
namespace {

struct PipelineCmdOptions {
  std::string spec, report;
  bool quiet = false, json = false;
};

int RunPipelineCmd(const PipelineCmdOptions& o) {
  auto spec = pipeline::LoadPipelineSpec(o.spec);
  if (!spec.ok()) {
    std::fprintf(stderr, "tern pipeline: %s\n", spec.status().message().c_str());
    return 2;
  }
  pipeline::PipelineOptions po;
  std::error_code ec;
  po.tern_binary = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  po.quiet = o.quiet;
  pipeline::PipelineOutcome out = pipeline::RunPipeline(*spec, po);
  const nlohmann::json j = out.ToJson(*spec);
  if (!o.report.empty()) {
    if (Status st = WriteFileAtomic(o.report, j.dump(2) + "\n"); !st.ok())
      std::fprintf(stderr, "tern pipeline: writing --report: %s\n", st.message().c_str());
  }
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    auto line = [](const char* what, const std::optional<pipeline::Judgement>& m) {
      if (!m) return;
      std::printf("  %-10s loss %.4f (perplexity %.2f) over %lld windows", what, m->loss, m->perplexity,
                  static_cast<long long>(m->windows));
      if (m->prompt_logprob) std::printf(", prompts %.3f", *m->prompt_logprob);
      if (m->choice_acc)
        std::printf(", choices acc %.4f acc_norm %.4f (%lld items)", *m->choice_acc,
                    m->choice_acc_norm.value_or(0), static_cast<long long>(m->choice_items));
      std::printf("\n");
    };
    line("candidate", out.candidate);
    line("baseline", out.baseline);
  }
  std::fprintf(stderr, "tern pipeline: %s\n", out.decision.c_str());
  return out.exit_code;
}

}  // namespace

void AddPipelineCommand(CLI::App& root, CommandTable& table) {
  auto o = std::make_shared<PipelineCmdOptions>();
  auto* sub = root.add_subcommand("pipeline", "Train, evaluate, compare, register and promote a model");
  sub->footer(
      "\nPIPELINE.yaml (docs/mlops.md):\n"
      "  name: demo\n"
      "  train: {config: configs/demo.yaml, set: [train.steps=200], run_args: [--price-per-hour, \"0.1\"]}\n"
      "  evaluate: {prompts: prompts.txt}          # data, split, seq_len, windows: default the run's\n"
      "  compare: {alias: production, metric: loss, margin: 0.01}\n"
      "  register: {registry: s3://bucket/models, note: nightly}\n"
      "The candidate and the version under the alias are evaluated on the same windows; the candidate is\n"
      "registered either way and takes the alias only when better by the margin.\n"
      "Exit codes: 0 promoted (or the first version), 3 not better (registered, alias unchanged),\n"
      "1 failed (training, evaluation or the registry; no alias moved), 2 bad pipeline file.");
  sub->add_option("pipeline", o->spec, "the PIPELINE.yaml")->required();
  sub->add_option("--report", o->report, "also write the decision as JSON to this file");
  sub->add_flag("--quiet", o->quiet, "hide the trainer's output");
  sub->add_flag("--json", o->json, "print the decision as JSON");
  table.Add(sub, [o] { return RunPipelineCmd(*o); });
}

}  // namespace tern::cli
