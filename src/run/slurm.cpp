#include "run/slurm.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

#include <fmt/ranges.h>

namespace tern::run {

Result<ProgramResult> RunProgram(const std::vector<std::string>& argv, const std::string& what_to_install) {
  if (argv.empty()) return Status::InvalidArgument("RunProgram: no program");
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return Status::Unavailable(fmt::format("pipe: {}", std::strerror(errno)));
  if (pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return Status::Unavailable(fmt::format("pipe: {}", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  ::close(err[1]);
  if (rc != 0) {
    ::close(out[0]);
    ::close(err[0]);
    if (rc == ENOENT) {
      return Status::NotFound(
          fmt::format("{} is not installed or not on PATH: {}", argv[0], what_to_install));
    }
    return Status::Unavailable(fmt::format("cannot run {}: {}", argv[0], std::strerror(rc)));
  }
  ProgramResult r;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  while (open_fds > 0) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; i++) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        open_fds--;
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) ::close(f.fd);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string ShellQuote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

std::string SbatchScriptPath(const JobSpec& spec) {
  return spec.run_dir + "/slurm/job.sbatch";
}

std::string SbatchScript(const JobSpec& spec, const BatchCommand& c) {
  const std::string name = std::filesystem::path(spec.run_dir).filename().string();
  const int gpus = spec.gpus_per_rank >= 0 ? spec.gpus_per_rank : (spec.cuda ? 1 : 0);
  std::string s = "#!/bin/bash\n";
  s += fmt::format(
      "# Written by `tern run --on slurm` for the job in {} (docs/jobs.md). The supervisor runs here,\n"
      "# inside the allocation, and starts each attempt of the trainer with srun. Submitted again by\n"
      "# `tern run --on slurm`; a requeue (a preemption, the time limit) starts it again and the job\n"
      "# resumes from its newest checkpoint.\n",
      spec.run_dir);
  auto opt = [&](const std::string& o) { s += "#SBATCH " + o + "\n"; };
  opt("--job-name=tern-" + name);
  opt(fmt::format("--nodes={}", spec.nodes));
  opt(fmt::format("--ntasks={}", spec.ranks));
  if (gpus > 0) opt(fmt::format("--gpus-per-task={}", gpus));
  if (!spec.time_limit.empty()) opt("--time=" + spec.time_limit);
  opt("--requeue");
  opt(fmt::format("--signal=B:USR1@{}", static_cast<long>(spec.signal_lead_s)));
  opt("--open-mode=append");
  opt("--output=" + spec.run_dir + "/logs/slurm-%j.out");
  opt("--chdir=" + c.workdir);
  for (const auto& a : spec.sbatch_args) opt(a);
  std::vector<std::string> cmd = {ShellQuote(c.tern), "run"};
  for (const auto& a : c.run_args) cmd.push_back(ShellQuote(a));
  cmd.push_back("--slurm-batch");
  s += fmt::format(
      R"SH(
# USR1 (Slurm's warning before the time limit): the supervisor has the trainer save, then exits 75, and the
# job goes back to the queue. TERM (a preemption, a requeue, scancel) reaches every process of the job:
# the trainer saves and Slurm decides what follows.
requeue=0
trap 'requeue=1; kill -USR1 "$supervisor" 2> /dev/null' USR1
trap 'kill -TERM "$supervisor" 2> /dev/null' TERM
echo "tern: Slurm job $SLURM_JOB_ID (restart ${{SLURM_RESTART_COUNT:-0}}) on $(hostname) at $(date -u +%FT%TZ)"
{} &
supervisor=$!
while kill -0 "$supervisor" 2> /dev/null; do wait "$supervisor"; done
wait "$supervisor"
rc=$?
echo "tern: the supervisor exited $rc at $(date -u +%FT%TZ)"
if [ "$rc" = 75 ] && [ "$requeue" = 1 ]; then
  echo "tern: saved before the time limit; requeueing Slurm job $SLURM_JOB_ID"
  scontrol requeue "$SLURM_JOB_ID"
fi
exit "$rc"
)SH",
      fmt::join(cmd, " "));
  return s;
}

std::vector<std::string> SrunPrefix(const JobSpec& spec) {
  if (spec.ranks == 1) return {};  // the trainer runs in the batch step: Slurm's SIGTERM reaches it
  std::vector<std::string> argv = {"srun", fmt::format("--ntasks={}", spec.ranks), "--kill-on-bad-exit=1"};
  if (!spec.srun_args.empty())
    argv.insert(argv.end(), spec.srun_args.begin(), spec.srun_args.end());
  else
    argv.push_back("--mpi=pmix");
  return argv;
}

bool SlurmJobInfo::active() const {
  return state == "PENDING" || state == "RUNNING" || state == "CONFIGURING" || state == "COMPLETING" ||
         state == "REQUEUED" || state == "REQUEUE_FED" || state == "REQUEUE_HOLD" || state == "RESIZING" ||
         state == "SUSPENDED" || state == "STOPPED" || state == "SIGNALING" || state == "STAGE_OUT" ||
         state == "RESV_DEL_HOLD";
}

namespace {
constexpr const char* kSlurmClient =
    "install Slurm's client commands (Debian: slurm-client; scripts/install-deps installs slurm-wlm), or run "
    "with --on local";
}  // namespace

Result<std::string> SubmitBatch(const std::string& script_path) {
  TERN_ASSIGN_OR_RETURN(ProgramResult r, RunProgram({"sbatch", "--parsable", script_path}, kSlurmClient));
  std::string id = r.out.substr(0, r.out.find_first_of(";\n"));  // "123" or "123;cluster"
  if (r.code != 0 || id.empty() || id.find_first_not_of("0123456789_") != std::string::npos) {
    return Status::Unavailable(
        fmt::format("sbatch refused {} (exit {}): {}{}; is the cluster up (sinfo) and SLURM_CONF right?",
                    script_path, r.code, r.err, r.out));
  }
  return id;
}

Result<SlurmJobInfo> QuerySlurmJob(const std::string& id) {
  TERN_ASSIGN_OR_RETURN(ProgramResult r, RunProgram({"scontrol", "show", "job", "-o", id}, kSlurmClient));
  SlurmJobInfo info;
  info.id = id;
  if (r.code != 0) {
    if (r.err.find("Invalid job id") != std::string::npos) return info;  // finished and forgotten
    return Status::Unavailable(fmt::format("scontrol show job {} failed (exit {}): {}", id, r.code, r.err));
  }
  std::istringstream words(r.out);
  for (std::string w; words >> w;) {
    const size_t eq = w.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = w.substr(0, eq), value = w.substr(eq + 1);
    if (key == "JobState") info.state = value;
    if (key == "Reason") info.reason = value;
    if (key == "NodeList") info.nodes = value;
    if (key == "Restarts") info.restarts = std::atoi(value.c_str());
  }
  return info;
}

Status CancelSlurmJob(const std::string& id) {
  TERN_ASSIGN_OR_RETURN(ProgramResult r, RunProgram({"scancel", id}, kSlurmClient));
  if (r.code != 0)
    return Status::Unavailable(fmt::format("scancel {} failed (exit {}): {}", id, r.code, r.err));
  return Status::Ok();
}

std::string SlurmJobIdFromEnv() {
  const char* id = std::getenv("SLURM_JOB_ID");
  return id ? id : "";
}

int SlurmRestartCountFromEnv() {
  const char* n = std::getenv("SLURM_RESTART_COUNT");
  return n ? std::atoi(n) : 0;
}

}  // namespace tern::run
