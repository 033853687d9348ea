// tern: from raw text to a trained GPT, and what it costs.
#include <cstdio>

#include "cli/command.h"

int main(int argc, char** argv) {
  CLI::App app{
      "tern: train GPT-style language models on rented GPU servers at the lowest cost.\n\n"
      "Typical flow:\n"
      "  tern prepare --input corpus.txt --out data/corpus --vocab-size 4096   # tokenizer + token shards\n"
      "  tern train configs/demo.yaml --set run.dir=runs/demo                   # train, live metrics\n"
      "  tern generate runs/demo --prompt \"In the beginning\"                    # sample from it\n"
      "  tern serve runs/demo --port 8080                                       # OpenAI-compatible API\n"
      "  tern bench --model gpt2-124m --batch 4 --seq 64 --json                 # measure speed and MFU\n"
      "  tern plan --model gpt2-124m --tokens 10B                               # cheapest GPU plan\n"
      "  tern simulate --work-hours 24h --deadline 48h                          # spot policies on real "
      "traces\n"
      "  tern ckpt ls runs/demo                                                 # checkpoints, verify, gc\n"
      "  tern run configs/demo.yaml --instance aws:us-east-1:p5.48xlarge:spot   # a job: relaunched, billed\n"
      "  tern job status runs/demo                                              # its attempts and $\n"
      "  tern diagnose runs/demo                                                # bottlenecks, $, fixes\n\n"
      "  tern report runs/demo [runs/other]                                     # HTML charts, $, A/B\n\n"
      "Run `tern <command> --help` for each command's options.",
      "tern"};
  app.require_subcommand(1);
  app.fallthrough(false);
  tern::cli::CommandTable table;
  tern::cli::AddPrepareCommand(app, table);
  tern::cli::AddTrainCommand(app, table);
  tern::cli::AddGenerateCommand(app, table);
  tern::cli::AddEvalCommand(app, table);
  tern::cli::AddPipelineCommand(app, table);
  tern::cli::AddBenchCommand(app, table);
  tern::cli::AddExportCommand(app, table);
  tern::cli::AddPlanCommand(app, table);
  tern::cli::AddServeCommand(app, table);
  tern::cli::AddCkptCommand(app, table);
  tern::cli::AddRunCommand(app, table);
  tern::cli::AddJobCommand(app, table);
  tern::cli::AddDiagnoseCommand(app, table);
  tern::cli::AddReportCommand(app, table);
  tern::cli::AddSimulateCommand(app, table);
  tern::cli::AddModelsCommand(app, table);
  tern::cli::AddSweepCommand(app, table);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (auto& [sub, run] : table.entries) {
    if (sub->parsed()) return run();
  }
  std::fprintf(stderr, "tern: no command given; run `tern --help`\n");
  return 2;
}
