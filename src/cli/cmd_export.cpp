// tern export RUN_DIR --out model.safetensors
#include <cstdio>
#include <memory>

#include "cli/command.h"
#include "model/safetensors.h"
#include "registry/model_uri.h"

namespace tern::cli {
namespace {

struct ExportOptions {
  std::string run_dir, out;
};

int RunExport(const ExportOptions& o) {
  auto run_dir = registry::ResolveModelUri(o.run_dir);  // models:/NAME@ALIAS -> a local directory
  auto w = run_dir.ok() ? ReadGptSafetensors(*run_dir + "/model.safetensors") : run_dir.status();
  if (!w.ok()) {
    std::fprintf(stderr, "tern export: %s\n", w.status().message().c_str());
    return 1;
  }
  Status st = WriteGptSafetensors(o.out, w->config, w->params, w->metadata);
  if (!st.ok()) {
    std::fprintf(stderr, "tern export: %s\n", st.message().c_str());
    return 1;
  }
  std::printf("wrote %s: %s, %zu parameters, Hugging Face GPT-2 tensor names (fp32)\n", o.out.c_str(),
              w->config.ToString().c_str(), w->params.size());
  return 0;
}

}  // namespace

void AddExportCommand(CLI::App& root, CommandTable& table) {
  auto o = std::make_shared<ExportOptions>();
  auto* sub =
      root.add_subcommand("export", "Write a run's weights as .safetensors with Hugging Face GPT-2 names");
  sub->footer(
      "\nExample:\n  tern export runs/demo --out demo.safetensors\n"
      "Readable by any safetensors reader; Conv1D weights are stored [in, out] as in HF's GPT-2.");
  sub->add_option("run_dir", o->run_dir, "run directory written by `tern train`")->required();
  sub->add_option("--out", o->out, "output .safetensors path")->required();
  table.Add(sub, [o] { return RunExport(*o); });
}

}  // namespace tern::cli
