#include "run/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "run/slurm.h"

namespace tern::run {
namespace {

class LocalProcess : public TrainerProcess {
 public:
  LocalProcess(pid_t pid, std::string start) : pid_(pid), start_(std::move(start)) {}
  ~LocalProcess() override {
    if (!exit_) {  // the supervisor is going away without it: do not leave it running
      Kill();
      int status = 0;
      waitpid(pid_, &status, 0);
    }
  }
  pid_t pid() const override { return pid_; }
  std::string start_time() const override { return start_; }
  std::optional<ExitStatus> Poll() override {
    if (exit_) return exit_;
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r != pid_) return std::nullopt;
    ExitStatus e;
    if (WIFEXITED(status)) e.code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
    exit_ = e;
    return exit_;
  }
  void Signal(int sig) override {
    if (!exit_) kill(pid_, sig);
  }
  void Kill() override {
    if (!exit_) kill(-pid_, SIGKILL);  // the group: mpirun's ranks too
  }

 private:
  pid_t pid_;
  std::string start_;
  std::optional<ExitStatus> exit_;
};

}  // namespace

std::string ExitStatus::Describe() const {
  if (signal != 0) {
    const char* name = sigabbrev_np(signal);
    return fmt::format("killed by SIG{}", name ? name : std::to_string(signal));
  }
  return fmt::format("exit {}", code);
}

Result<std::unique_ptr<TrainerProcess>> LocalLauncher::Launch(const LaunchSpec& spec) {
  if (spec.argv.empty()) return Status::InvalidArgument("nothing to launch");
  // Everything the child needs is prepared before fork: only async-signal-safe calls after it.
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_text;
  for (char** e = environ; *e; e++) {
    const std::string kv = *e;
    bool replaced = false;
    for (const auto& [k, v] : spec.env) replaced = replaced || kv.rfind(k + "=", 0) == 0;
    if (!replaced) env_text.push_back(kv);
  }
  for (const auto& [k, v] : spec.env) env_text.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  const int log = ::open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) {
    return Status::IoError(
        fmt::format("cannot open the attempt log {}: {}", spec.log_path, std::strerror(errno)));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    ::close(log);
    return Status::Unavailable(fmt::format("fork failed: {}", std::strerror(errno)));
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(75);  // the supervisor died before prctl: stop, resumable
    dup2(log, STDOUT_FILENO);
    dup2(log, STDERR_FILENO);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execvpe(argv[0], argv.data(), envp.data());
    const char msg[] = "tern run: cannot execute the trainer\n";
    (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
    _exit(127);
  }
  ::close(log);
  setpgid(pid, pid);  // also from here, so that the group exists before we signal it
  return std::unique_ptr<TrainerProcess>(new LocalProcess(pid, ProcessStartTime(pid)));
}

std::vector<std::string> AttemptArgv(const JobSpec& spec, const std::vector<std::string>& trainer,
                                     const AttemptVars& vars) {
  std::vector<std::string> argv;
  if (spec.where == "slurm") {
    argv = SrunPrefix(spec);  // inside the allocation (the supervisor of the batch script); may be empty
  } else if (spec.ranks > 1) {
    argv.push_back("mpirun");
    argv.insert(argv.end(), spec.mpirun_args.begin(), spec.mpirun_args.end());
    argv.insert(argv.end(), {"-np", std::to_string(spec.ranks)});
  }
  argv.insert(argv.end(), trainer.begin(), trainer.end());
  argv.insert(argv.end(), {spec.config_path, "--resume", "auto"});
  for (const auto& o : spec.overrides) argv.insert(argv.end(), {"--set", o});
  argv.insert(argv.end(), {"--set", "run.dir=" + spec.run_dir});
  argv.insert(argv.end(), {"--set", fmt::format("run.price_per_hour={}", spec.price_per_hour)});
  argv.insert(argv.end(), {"--set", fmt::format("run.cost_offset_usd={}", vars.cost_offset_usd)});
  argv.insert(argv.end(), {"--set", fmt::format("run.billing_start_unix={:.3f}", vars.billing_start_unix)});
  if (vars.mtbf_s > 0) {
    argv.insert(argv.end(), {"--set", fmt::format("ckpt.mtbf={:.0f}", vars.mtbf_s), "--set",
                             "ckpt.mtbf_source=" + vars.mtbf_source});
  }
  return argv;
}

std::vector<std::pair<std::string, std::string>> AttemptEnv(const AttemptVars& vars) {
  return {{"TERN_JOB_ID", vars.job_id}, {"TERN_ATTEMPT", std::to_string(vars.attempt)}};
}

Status CheckMpirunAllowed(const JobSpec& spec) {
  if (spec.ranks <= 1 || spec.where != "local" || geteuid() != 0) return Status::Ok();
  for (const auto& a : spec.mpirun_args)
    if (a == "--allow-run-as-root") return Status::Ok();
  const char* allow = std::getenv("OMPI_ALLOW_RUN_AS_ROOT");
  const char* confirm = std::getenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM");
  if (allow && confirm && std::string(allow) == "1" && std::string(confirm) == "1") return Status::Ok();
  return Status::InvalidArgument(
      "ranks > 1 runs mpirun, which refuses to run as root: run as another user, or pass "
      "--mpirun-args \"--allow-run-as-root\" (or set OMPI_ALLOW_RUN_AS_ROOT=1 "
      "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)");
}

std::string ProcessStartTime(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = s.rfind(')');
  if (paren == std::string::npos) return "";
  std::istringstream rest(s.substr(paren + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; i++)
    if (i == 22) return field;
  return "";
}

bool ProcessAlive(pid_t pid, const std::string& start_time) {
  if (pid <= 0 || start_time.empty()) return false;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = s.rfind(')');
  if (paren == std::string::npos || paren + 2 >= s.size()) return false;
  if (s[paren + 2] == 'Z' || s[paren + 2] == 'X') return false;  // exited, not yet reaped
  return ProcessStartTime(pid) == start_time;
}

}  // namespace tern::run
