// tern job status RUN_DIR [--json] | tern job ls [--json] | tern job cancel RUN_DIR
// What the ledger (run/ledger.h) says about jobs started with `tern run`, and stopping one.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include "cli/command.h"
#include "run/job_book.h"
#include "run/job_report.h"
#include "run/ledger.h"
#include "run/slurm.h"

namespace tern::cli {
namespace {

struct JobOptions {
  std::string run_dir;
  bool json = false;
  std::string ledger;  // ls: default $TERN_HOME/ledger.sqlite
  double wait_s = 30;  // cancel: how long to wait for the supervisor to stop
};

int Fail(const std::string& message) {
  std::fprintf(stderr, "tern job: %s\n", message.c_str());
  return 1;
}

std::string Absolute(const std::string& dir) {
  std::string p = std::filesystem::absolute(dir).lexically_normal().string();
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

// The run directory's ledger and its job, or an error naming what to do.
Result<std::pair<std::unique_ptr<run::Ledger>, run::JobRow>> OpenRunDirJob(const std::string& dir) {
  const std::string run_dir = Absolute(dir);
  const std::string path = run::RunDirLedgerPath(run_dir);
  if (!std::filesystem::exists(path)) {
    return Status::NotFound(fmt::format(
        "{} has no ledger.sqlite: no job was run there with `tern run` (tern job ls lists the jobs)",
        run_dir));
  }
  TERN_ASSIGN_OR_RETURN(auto ledger, run::Ledger::Open(path));
  TERN_ASSIGN_OR_RETURN(auto job, ledger->FindJob(run_dir));
  if (!job) return Status::NotFound(fmt::format("{}'s ledger has no job for {}", path, run_dir));
  return std::make_pair(std::move(ledger), *job);
}

// A job marked running whose supervisor is not (it was killed): say so. (Under Slurm the supervisor is
// Slurm's to keep: its state says.)
bool SupervisorGone(const run::JobRow& job) {
  return job.state == "running" && job.where != "slurm" && job.host == run::HostName() &&
         (job.supervisor_pid <= 0 || (kill(job.supervisor_pid, 0) != 0 && errno == ESRCH));
}

int ShowStatus(const JobOptions& o) {
  auto opened = OpenRunDirJob(o.run_dir);
  if (!opened.ok()) return Fail(opened.status().message());
  auto& [ledger, job] = *opened;
  auto attempts = ledger->Attempts(job.job_id);
  if (!attempts.ok()) return Fail(attempts.status().message());
  const bool gone = SupervisorGone(job);
  std::optional<run::SlurmJobInfo> slurm;
  std::string slurm_error;
  if (job.where == "slurm" && !job.slurm_job_id.empty()) {
    auto info = run::QuerySlurmJob(job.slurm_job_id);
    if (info.ok())
      slurm = *info;
    else
      slurm_error = info.status().message();
  }
  auto switches = ledger->Switches(job.job_id);
  if (!switches.ok()) return Fail(switches.status().message());
  if (o.json) {
    nlohmann::json j = run::JobJson(job, *attempts);
    if (!switches->empty()) j["switches"] = run::SwitchesJson(*switches);
    j["supervisor_alive"] = job.state == "running" && !gone;
    if (slurm) {
      j["slurm"] = {{"job_id", slurm->id},   {"state", slurm->state},       {"reason", slurm->reason},
                    {"nodes", slurm->nodes}, {"restarts", slurm->restarts}, {"active", slurm->active()}};
    } else if (!slurm_error.empty()) {
      j["slurm"] = {{"job_id", job.slurm_job_id}, {"error", slurm_error}};
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::fputs(run::JobTable(job, *attempts).c_str(), stdout);
  std::fputs(run::SwitchTable(*switches).c_str(), stdout);
  if (slurm) {
    std::string state = slurm->state.empty() ? "no longer in Slurm's records" : slurm->state;
    if (slurm->state == "PENDING") state += " (" + slurm->reason + ")";
    if (slurm->state == "RUNNING") state += " on " + slurm->nodes;
    std::printf("  Slurm job %s: %s, %d restart%s\n", slurm->id.c_str(), state.c_str(), slurm->restarts,
                slurm->restarts == 1 ? "" : "s");
  } else if (!slurm_error.empty()) {
    std::printf("  Slurm job %s: cannot ask Slurm: %s\n", job.slurm_job_id.c_str(), slurm_error.c_str());
  }
  if (gone) {
    std::printf("  its supervisor (pid %d) is gone: run `tern run %s` again to continue the job\n",
                job.supervisor_pid, job.config.c_str());
  }
  return 0;
}

int List(const JobOptions& o) {
  const std::string path = o.ledger.empty() ? run::DefaultLedgerPath() : o.ledger;
  if (!std::filesystem::exists(path)) {
    if (o.json) {
      std::printf("%s\n", run::JobsJson({}).dump(2).c_str());
    } else {
      std::printf("no jobs yet in %s (start one with `tern run CONFIG`)\n", path.c_str());
    }
    return 0;
  }
  auto ledger = run::Ledger::Open(path);
  if (!ledger.ok()) return Fail(ledger.status().message());
  auto jobs = (*ledger)->Jobs();
  if (!jobs.ok()) return Fail(jobs.status().message());
  std::vector<run::JobWithAttempts> all;
  for (const run::JobRow& j : *jobs) {
    auto attempts = (*ledger)->Attempts(j.job_id);
    if (!attempts.ok()) return Fail(attempts.status().message());
    all.push_back({j, *attempts});
  }
  if (o.json) {
    std::printf("%s\n", run::JobsJson(all).dump(2).c_str());
  } else {
    std::fputs(run::JobsTable(all).c_str(), stdout);
  }
  return 0;
}

// Sets the cancel flag in both ledgers (the run directory's is the one that counts).
Status RequestCancel(run::Ledger* ledger, const run::JobRow& job) {
  TERN_RETURN_IF_ERROR(ledger->SetCancel(job.job_id, true));
  if (auto global = run::Ledger::Open(run::DefaultLedgerPath()); global.ok())
    (void)(*global)->SetCancel(job.job_id, true);
  return Status::Ok();
}

// Waits up to --wait for the job's supervisor to leave "running"; prints what it found.
void AwaitSupervisor(const JobOptions& o, run::Ledger* ledger, const run::JobRow& job) {
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::duration<double>(o.wait_s)) {
    auto now = ledger->GetJob(job.job_id);
    if (now.ok() && *now && (*now)->state != "running") {
      std::printf("job %s: %s\n", job.job_id.c_str(), (*now)->state.c_str());
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::printf("job %s: still stopping (the trainer is saving); `tern job status %s` shows when it is done\n",
              job.job_id.c_str(), o.run_dir.c_str());
}

// A job under Slurm: the flag first (no supervisor relaunches or requeues it). Running: its supervisor
// stops the trainer, which saves, and ends the batch script (a scancel would make srun SIGKILL a
// multi-rank step). Waiting in the queue: scancel, and the job is marked cancelled here.
int CancelSlurm(const JobOptions& o, run::Ledger* ledger, run::JobRow job) {
  auto info = run::QuerySlurmJob(job.slurm_job_id);
  if (!info.ok()) return Fail(info.status().message());
  if (!info->active()) {
    std::printf("job %s: its Slurm job %s is %s: nothing to cancel\n", job.job_id.c_str(),
                job.slurm_job_id.c_str(), info->state.empty() ? "gone" : info->state.c_str());
    return 0;
  }
  if (Status st = RequestCancel(ledger, job); !st.ok()) return Fail(st.message());
  if (info->state == "RUNNING") {
    std::printf("job %s: cancel requested; its supervisor in Slurm job %s stops the trainer (it saves)...\n",
                job.job_id.c_str(), job.slurm_job_id.c_str());
    AwaitSupervisor(o, ledger, job);
    return 0;
  }
  if (Status st = run::CancelSlurmJob(job.slurm_job_id); !st.ok()) return Fail(st.message());
  job.state = "cancelled";
  job.reason =
      fmt::format("cancelled by `tern job cancel` (scancel {} while {})", job.slurm_job_id, info->state);
  if (Status st = ledger->PutJob(job); !st.ok()) return Fail(st.message());
  if (auto global = run::Ledger::Open(run::DefaultLedgerPath()); global.ok()) (void)(*global)->PutJob(job);
  std::printf("job %s: Slurm job %s cancelled while %s\n", job.job_id.c_str(), job.slurm_job_id.c_str(),
              info->state.c_str());
  return 0;
}

int Cancel(const JobOptions& o) {
  auto opened = OpenRunDirJob(o.run_dir);
  if (!opened.ok()) return Fail(opened.status().message());
  auto& [ledger, job] = *opened;
  if (job.where == "slurm" && !job.slurm_job_id.empty()) return CancelSlurm(o, ledger.get(), job);
  if (job.state != "running") {
    std::printf("job %s is %s already: nothing to cancel\n", job.job_id.c_str(), job.state.c_str());
    return 0;
  }
  // The supervisor reads the run directory's flag every second (also from another machine sharing it).
  if (Status st = RequestCancel(ledger.get(), job); !st.ok()) return Fail(st.message());
  if (SupervisorGone(job)) {
    job.state = "cancelled";
    job.reason = "cancelled by `tern job cancel` (no supervisor was running)";
    if (Status st = ledger->PutJob(job); !st.ok()) return Fail(st.message());
    std::printf("job %s: no supervisor was running; marked cancelled\n", job.job_id.c_str());
    return 0;
  }
  std::printf("job %s: cancel requested; waiting for its supervisor (pid %d on %s) to stop the trainer...\n",
              job.job_id.c_str(), job.supervisor_pid, job.host.c_str());
  AwaitSupervisor(o, ledger.get(), job);
  return 0;
}

}  // namespace

void AddJobCommand(CLI::App& root, CommandTable& table) {
  auto* job = root.add_subcommand("job", "Jobs started with `tern run`: status, list, cancel (the ledger)");
  job->require_subcommand(1);
  job->footer(
      "\nThe ledger is $TERN_HOME/ledger.sqlite (default ~/.tern/ledger.sqlite) for every job, and\n"
      "RUN_DIR/ledger.sqlite for each; plain SQLite (`sqlite3 ~/.tern/ledger.sqlite 'select * from "
      "job_totals'`).\nSchema and meaning of every column: docs/jobs.md.");

  auto s = std::make_shared<JobOptions>();
  auto* status =
      job->add_subcommand("status", "One job: each attempt's exit reason, steps, time, lost work, $");
  status->add_option("run_dir", s->run_dir, "the job's run directory")->required();
  status->add_flag("--json", s->json, "the job, its totals and every attempt as JSON");
  table.Add(status, [s] { return ShowStatus(*s); });

  auto l = std::make_shared<JobOptions>();
  auto* ls = job->add_subcommand("ls", "Every job in the ledger, newest first, with its attempts and $");
  ls->add_flag("--json", l->json, "as JSON, with the spend per project and per UTC day");
  ls->add_option("--ledger", l->ledger, "another ledger file (default $TERN_HOME/ledger.sqlite)");
  table.Add(ls, [l] { return List(*l); });

  auto c = std::make_shared<JobOptions>();
  auto* cancel = job->add_subcommand(
      "cancel", "Stop a job for good: its trainer saves (SIGTERM) and the supervisor does not relaunch it");
  cancel->add_option("run_dir", c->run_dir, "the job's run directory")->required();
  cancel->add_option("--wait", c->wait_s, "seconds to wait for the supervisor to stop (default 30)");
  table.Add(cancel, [c] { return Cancel(*c); });
}

}  // namespace tern::cli
