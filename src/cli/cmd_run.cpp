// tern run CONFIG [--set k=v]... [--instance P:R:T[:BILLING] | --price-per-hour P] [--ranks N]
//          [--on local|slurm [--wait]] [--max-attempts N] [--budget USD] [--deadline 12h] [--project TAG] ...
// Supervises `tern train CONFIG --resume auto` until the job is done (run/supervisor.h, docs/jobs.md);
// --on slurm submits a batch script whose supervisor does the same inside the allocation (run/slurm.h).
// Exit codes: 0 done, 1 stopped (max attempts, budget, deadline, cancelled), 2 bad usage or config,
// 75 interrupted (SIGTERM/SIGUSR1/SIGINT: the trainer saved; run the same command again to continue).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>

#include "cli/command.h"
#include "run/instance_price.h"
#include "run/job_report.h"
#include "run/slurm_job.h"
#include "run/supervisor.h"

namespace tern::cli {
namespace {

struct RunOptions {
  std::string config_path;
  std::vector<std::string> overrides;
  std::vector<std::pair<std::string, std::string>> job_flags;  // (job key, value), in the order given
  std::string trainer;
  bool quiet = false;
  bool wait = false;         // --on slurm: follow the Slurm job to its end
  bool slurm_batch = false;  // the supervisor inside the allocation (what the batch script runs)
};

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "tern run: %s\n", message.c_str());
  return code;
}

// The arguments to give `tern run` again inside the allocation: the same config, overrides and flags.
std::vector<std::string> RunArgs(const RunOptions& o) {
  std::vector<std::string> args = {o.config_path};
  for (const auto& v : o.overrides) args.insert(args.end(), {"--set", v});
  for (const auto& [key, value] : o.job_flags) {
    std::string flag = "--" + key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    args.insert(args.end(), {flag, value});
  }
  if (!o.trainer.empty()) args.insert(args.end(), {"--trainer", o.trainer});
  if (o.quiet) args.push_back("--quiet");
  return args;
}

std::string SelfPath() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "tern" : self.string();
}

// --on slurm, from the submitting side.
int Submit(const RunOptions& o, const run::JobSpec& spec) {
  run::BatchCommand command{SelfPath(), RunArgs(o), std::filesystem::current_path().string()};
  run::RealClock clock;
  Result<run::Submitted> sub = run::SubmitSlurmJob(spec, command, run::DefaultLedgerPath(), &clock);
  if (!sub.ok()) return Fail(1, sub.status().message());
  std::fprintf(stderr,
               "tern run: submitted job %s as Slurm job %s (%s)\n"
               "tern run: its output: %s; follow it with `tern job status %s`\n",
               sub->job_id.c_str(), sub->slurm_job_id.c_str(), sub->script.c_str(), sub->slurm_log.c_str(),
               spec.run_dir.c_str());
  if (!o.wait) return 0;
  Result<run::JobOutcome> out = run::WaitForSlurmJob(spec, *sub, run::DefaultLedgerPath(), &clock, stderr);
  if (!out.ok()) return Fail(1, out.status().message());
  return out->exit_code;
}

// --policy: the instance's spot and on-demand prices, between which each attempt is billed.
Status PricePolicy(run::JobSpec* spec) {
  if (spec->instance.empty()) {
    return Status::InvalidArgument(
        fmt::format("--policy {} switches between the instance's spot and on-demand prices: give --instance "
                    "provider:region:type (e.g. aws:us-west-2:p3.2xlarge), not a price per hour",
                    spec->policy));
  }
  const std::string base = spec->instance.substr(0, spec->instance.rfind(':'));  // normalised: has billing
  TERN_ASSIGN_OR_RETURN(run::InstancePrice spot, run::PriceInstanceFromShippedCatalog(base + ":spot"));
  TERN_ASSIGN_OR_RETURN(run::InstancePrice od, run::PriceInstanceFromShippedCatalog(base + ":on-demand"));
  spec->spot_price_per_hour = spot.price_per_hour;
  spec->ondemand_price_per_hour = od.price_per_hour;
  std::fprintf(stderr, "tern run: policy %s: spot $%.4f/h, on-demand $%.4f/h, deadline %s\n",
               spec->policy.c_str(), spot.price_per_hour, od.price_per_hour, spec->deadline.c_str());
  return Status::Ok();
}

// The job from the config's job: section, the environment's mpirun arguments, and the flags (a flag wins).
Result<run::JobSpec> BuildSpec(const RunOptions& o) {
  run::JobSpec spec;
  spec.config_path = o.config_path;
  spec.overrides = o.overrides;
  if (const char* args = std::getenv("TERN_MPIRUN_ARGS"); args && *args)
    TERN_RETURN_IF_ERROR(run::SetJobKey("mpirun_args", args, &spec).WithContext("TERN_MPIRUN_ARGS"));
  TERN_RETURN_IF_ERROR(run::LoadJobSection(o.config_path, &spec));
  for (const auto& [key, value] : o.job_flags) {
    if (key == "instance") spec.billing = "none";  // a flag's instance replaces the section's price
    if (key == "price_per_hour") spec.instance.clear();
    TERN_RETURN_IF_ERROR(run::SetJobKey(key, value, &spec));
  }
  double config_price = 0;
  TERN_RETURN_IF_ERROR(run::ReadTrainConfig(&spec, &config_price));
  if (!spec.instance.empty()) {
    TERN_ASSIGN_OR_RETURN(run::InstancePrice p, run::PriceInstanceFromShippedCatalog(spec.instance));
    spec.instance = p.instance;
    spec.billing = p.billing;
    spec.price_per_hour = p.price_per_hour;
    std::fprintf(stderr, "tern run: %s: $%.4f/h (%d x %s) from the catalog\n", p.instance.c_str(),
                 p.price_per_hour, p.gpu_count, p.gpu.c_str());
    for (const auto& w : p.warnings) std::fprintf(stderr, "tern run: catalog warning: %s\n", w.c_str());
  } else if (spec.billing != "custom" && config_price > 0) {
    spec.price_per_hour = config_price;  // the config's run.price_per_hour
    spec.billing = "custom";
  }
  TERN_RETURN_IF_ERROR(run::ValidateJobSpec(spec));
  if (!spec.policy.empty()) TERN_RETURN_IF_ERROR(PricePolicy(&spec));
  if (spec.budget_usd > 0 && spec.price_per_hour <= 0) {
    return Status::InvalidArgument(
        "--budget needs a price: give --instance (priced from the catalog) or --price-per-hour");
  }
  TERN_RETURN_IF_ERROR(run::CheckMpirunAllowed(spec));
  return spec;
}

int RunJob(const RunOptions& o) {
  if (o.config_path.empty()) return Fail(2, "give a config file, e.g. `tern run configs/demo.yaml`");
  Result<run::JobSpec> spec = BuildSpec(o);
  if (!spec.ok()) return Fail(2, spec.status().message());
  if (o.slurm_batch && (spec->where != "slurm" || run::SlurmJobIdFromEnv().empty())) {
    return Fail(2,
                "--slurm-batch is what the batch script of `tern run --on slurm` runs inside its Slurm "
                "allocation; submit with `tern run CONFIG --on slurm`");
  }
  if (spec->where == "slurm" && !o.slurm_batch) return Submit(o, *spec);
  if (o.wait) return Fail(2, "--wait follows a Slurm job: it goes with --on slurm");
  run::SupervisorOptions so;
  so.spec = *spec;
  if (!o.trainer.empty()) {
    std::istringstream words(o.trainer);
    for (std::string w; words >> w;) so.trainer.push_back(w);
  } else {
    so.trainer = {SelfPath(), "train"};
  }
  so.ledger_path = run::DefaultLedgerPath();
  so.echo_trainer = !o.quiet;
  run::RealClock clock;
  run::LocalLauncher launcher;
  run::Supervisor supervisor(so, &clock, &launcher);
  Result<run::JobOutcome> out = supervisor.Run();
  if (!out.ok()) return Fail(1, out.status().message());
  if (out->exit_code == run::kRunInterrupted) {
    std::fprintf(stderr,
                 "tern run: interrupted; the trainer saved. Run the same command again to continue.\n");
  }
  return out->exit_code;
}

}  // namespace

void AddRunCommand(CLI::App& root, CommandTable& table) {
  auto o = std::make_shared<RunOptions>();
  auto* sub = root.add_subcommand(
      "run", "Run a training job to the end: relaunch on preemption and crashes, resume, bill every attempt");
  sub->footer(
      "\nA job is `tern train CONFIG --resume auto`, launched again until it finishes:\n"
      "  exit 0 -> done | 75 (preempted, saved) -> again at once | crash, signal, hung -> again after a\n"
      "  backoff (10 s, doubling) | 2 (bad config) -> stop with the trainer's message |\n"
      "  max attempts, budget or deadline reached -> stop and say which.\n"
      "SIGTERM/SIGUSR1/Ctrl-C: the trainer saves, and tern run exits 75; run it again to continue.\n"
      "Every attempt is a row of the ledger ($TERN_HOME/ledger.sqlite, default ~/.tern/, and "
      "RUN_DIR/ledger.sqlite):\n"
      "start, end, exit reason, steps, wall time with start-up, steps redone, $. The trainer's cost_usd is "
      "the\n"
      "job's, and summary.json gets a \"job\" block with the totals.\n\n"
      "Examples:\n"
      "  tern run configs/demo.yaml --price-per-hour 0.10\n"
      "  tern run configs/demo.yaml --instance aws:us-east-1:p5.48xlarge:spot --budget 50 --deadline 12h\n"
      "  tern run configs/demo.yaml --on slurm --ranks 8 --time-limit 4:00:00   # sbatch; a requeue resumes\n"
      "  tern run configs/demo.yaml --instance aws:us-west-2:p3.2xlarge --policy uniform-progress "
      "--deadline 48h\n"
      "      # spot or on-demand per attempt by Uniform Progress (as `tern simulate`), switches in the "
      "ledger\n"
      "  tern job status runs/demo            # attempts, reasons, time, lost work and $\n\n"
      "The same options can live in the config, in a job: section (flags win):\n" +
      run::DescribeJobKeys() +
      "Exit codes: 0 done, 1 stopped, 2 bad usage or config, 75 interrupted. docs/jobs.md.");
  sub->add_option("config", o->config_path, "YAML training config (as for tern train)");
  sub->add_option("--set", o->overrides, "override a training key: section.key=value (repeatable)");
  auto flag = [&](const char* name, const char* key, const char* help) {
    sub->add_option_function<std::string>(
        name, [o, key](const std::string& v) { o->job_flags.emplace_back(key, v); }, help);
  };
  flag("--instance", "instance", "provider:region:type[:on-demand|spot|reserved]: priced from the catalog");
  flag("--price-per-hour", "price_per_hour", "USD per hour of the machine, instead of --instance");
  flag("--ranks", "ranks",
       "trainer processes (> 1: through mpirun -np N; srun -n N under Slurm); MIN-MAX (1-2) is elastic: each "
       "attempt starts with the ranks that can run then");
  flag("--ranks-probe", "ranks_probe",
       "elastic: a shell command printing how many ranks can run now (default: nvidia-smi -L's GPUs for a "
       "cuda "
       "config)");
  flag("--on", "on",
       "where: local (this machine) or slurm (writes RUN_DIR/slurm/job.sbatch and submits it: --requeue, "
       "--signal=B:USR1@120; a requeued job resumes)");
  flag("--nodes", "nodes", "Slurm: nodes (sbatch --nodes; default 1)");
  flag("--gpus-per-rank", "gpus_per_rank",
       "Slurm: GPUs per trainer process (default 1 for train.device cuda)");
  flag("--time-limit", "time_limit",
       "Slurm: sbatch --time, e.g. 4:00:00; the trainer saves before it and "
       "the job is requeued");
  flag("--signal-lead", "signal_lead", "Slurm: seconds before the time limit to save (default 120)");
  flag("--sbatch-args", "sbatch_args", "Slurm: more sbatch options, e.g. \"--partition=gpu --account=ml\"");
  flag("--srun-args", "srun_args", "Slurm: srun options for the trainer (default --mpi=pmix when ranks > 1)");
  flag("--max-attempts", "max_attempts", "attempts in all before giving up (default 10)");
  flag("--budget", "budget", "USD the job may spend in all; it stops (after a save) when spent");
  flag("--deadline", "deadline", "12h, 2d (after the job's first start) or a UTC time 2025-01-02T00:00:00Z");
  flag("--policy", "policy",
       "uniform-progress: each attempt on spot or on-demand by the Uniform Progress rules of `tern simulate` "
       "(behind the straight line to the deadline: on-demand; spot whenever up; a safety net near the "
       "deadline), billed at the instance's spot or on-demand price, each switch a ledger row; needs "
       "--deadline and --instance, e.g. --instance aws:us-west-2:p3.2xlarge --policy uniform-progress "
       "--deadline 48h");
  flag("--restart-overhead", "restart_overhead",
       "the policy's d: start-up and resume of a new instance (default 5m)");
  flag("--policy-tick", "policy_tick", "how often the policy decides while an attempt runs (default 60 s)");
  flag("--project", "project", "a tag for the spend reports (tern job ls --json)");
  flag("--heartbeat", "heartbeat", "metrics.jsonl silent this long = hung (default 600 s; 0 = off)");
  flag("--kill-grace", "kill_grace", "seconds a stopped trainer may take to save before SIGKILL (120)");
  flag("--backoff", "backoff", "first wait after a crash, doubling per failure in a row (10 s)");
  flag("--backoff-max", "backoff_max", "the longest wait (600 s)");
  flag("--mpirun-args", "mpirun_args",
       "extra mpirun arguments when ranks > 1, e.g. \"--allow-run-as-root --oversubscribe\" "
       "(default $TERN_MPIRUN_ARGS)");
  sub->add_option("--trainer", o->trainer,
                  "the command before CONFIG (default: this tern's `train`), e.g. a wrapper script");
  sub->add_flag("--quiet", o->quiet, "only tern run's own lines, not the trainer's output");
  sub->add_flag(
      "--wait", o->wait,
      "with --on slurm: follow the Slurm job until it ends (requeues included), then print the bill "
      "and exit as a local tern run would");
  sub->add_flag("--slurm-batch", o->slurm_batch, "internal: the supervisor inside a Slurm allocation")
      ->group("");
  table.Add(sub, [o] { return RunJob(*o); });
}

}  // namespace tern::cli
