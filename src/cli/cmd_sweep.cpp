// `tern sweep SWEEP.yaml`: hyperparameter search with ASHA under a budget in trials and dollars; trials are
// `tern run` jobs of this binary, here or as Slurm jobs (sweep/runner.h, docs/sweep.md). Exit codes: 0 the
// sweep ended (every trial done or stopped), 1 it could not run, 2 bad usage or a bad SWEEP.yaml.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "cli/command.h"
#include "sweep/output.h"
#include "sweep/runner.h"

namespace tern::cli {
namespace {

struct SweepCliOptions {
  std::string spec_path;
  double budget_usd = -1;
  int parallel = 0;
  std::string on;  // "" = the file's job.on, else local
  bool json = false;
};

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "tern sweep: %s\n", message.c_str());
  return code;
}

int RunSweepCommand(const SweepCliOptions& o) {
  if (!o.on.empty() && o.on != "local" && o.on != "slurm")
    return Fail(2, "--on " + o.on + ": give local (child processes here) or slurm (a Slurm job per rung)");
  std::ifstream in(o.spec_path);
  if (!in)
    return Fail(2, "cannot read " + o.spec_path + ": give the sweep file, e.g. `tern sweep sweep.yaml`");
  std::stringstream text;
  text << in.rdbuf();
  Result<sweep::SweepSpec> spec = sweep::ParseSweepSpec(text.str(), o.spec_path);
  if (!spec.ok()) return Fail(2, spec.status().message());
  if (o.budget_usd >= 0) spec->budget_usd = o.budget_usd;
  if (o.parallel > 0) spec->parallel = o.parallel;
  if (!o.on.empty()) spec->on = o.on;
  Result<std::vector<std::string>> warnings = sweep::CheckTrialConfigs(*spec);
  if (!warnings.ok()) return Fail(2, warnings.status().message());
  for (const std::string& w : *warnings) std::fprintf(stderr, "tern sweep: warning: %s\n", w.c_str());
  sweep::SweepOptions so;
  so.spec = *spec;
  so.spec_text = text.str();
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  so.tern = ec ? "tern" : self.string();
  Result<sweep::SweepResult> r = sweep::RunSweep(so);
  if (!r.ok()) return Fail(1, r.status().message());
  if (Status st = sweep::WriteSweepOutputs(*spec, *r); !st.ok()) return Fail(1, st.message());
  if (o.json) {
    std::printf("%s\n", sweep::SweepJson(*spec, *r).dump(2).c_str());
  } else {
    std::printf("%s", sweep::SweepTable(*r).c_str());
    std::printf("best config: %s/best.yaml | page: %s/sweep.html | state: %s/sweep.sqlite\n",
                spec->dir.c_str(), spec->dir.c_str(), spec->dir.c_str());
  }
  return 0;
}

}  // namespace

void AddSweepCommand(CLI::App& root, CommandTable& table) {
  auto o = std::make_shared<SweepCliOptions>();
  auto* sub =
      root.add_subcommand("sweep", "Hyperparameter search with ASHA under a dollar budget (docs/sweep.md)");
  sub->footer(
      "\nSWEEP.yaml names a base training config, a search space (choice, uniform, loguniform, int), random "
      "or\n"
      "grid sampling, trials, asha {eta, min_steps, max_steps}, an instance (priced as by tern run "
      "--instance)\n"
      "and budget_usd. Each trial is a `tern run` job in DIR/trials/NNN; ASHA promotes the top 1/eta of "
      "each\n"
      "rung by validation loss (objective: val_loss), or by the error on the trials' eval.choices set\n"
      "(objective: choice_error | choice_error_norm). Run the same command again after a crash or kill to\n"
      "resume. Writes DIR/best.yaml, DIR/sweep.json, DIR/sweep.html.\n\n"
      "--on slurm: every rung is a Slurm job, submitted as `tern run --on slurm` submits one (sbatch; the\n"
      "supervisor runs in the allocation, a requeue resumes), --parallel of them queued or running at a "
      "time.\n"
      "The sweep follows them with scontrol and records each Slurm job id in DIR/sweep.sqlite: run the same\n"
      "command again after a kill and it follows the jobs still queued or running instead of submitting\n"
      "them again; a job Slurm says failed (FAILED, CANCELLED, TIMEOUT...) is a failed trial. Slurm options\n"
      "go in the sweep file's job: section with tern run's job keys, e.g.\n"
      "  job: {on: slurm, time_limit: \"0:30:00\", sbatch_args: \"--partition=gpu --account=ml\"}\n"
      "The run directories must be on a file system the nodes share. Exit codes: 0 ended, 1 could not run,\n"
      "2 bad usage or sweep file.");
  sub->add_option("sweep", o->spec_path, "the sweep file (YAML)")->required();
  sub->add_option("--budget-usd", o->budget_usd, "dollar budget (replaces the file's budget_usd; 0 = none)");
  sub->add_option("--parallel", o->parallel, "trials at a time (replaces the file's parallel)");
  sub->add_option("--on", o->on,
                  "where trials run: local (child processes, --parallel at a time) or slurm (a Slurm job "
                  "per rung; replaces the file's job.on)");
  sub->add_flag("--json", o->json, "print the result as JSON");
  table.Add(sub, [o] { return RunSweepCommand(*o); });
}

}  // namespace tern::cli
