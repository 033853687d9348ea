// The batch script `tern run --on slurm` writes (its #SBATCH lines, the quoting of the supervisor's
// arguments, the traps and the requeue), what it runs inside the allocation, and running a program.
#include "run/slurm.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "run/clock.h"
#include "run/job_book.h"
#include "run/launcher.h"
#include "run/slurm_job.h"
#include "testing/files.h"
#include "testing/processes.h"

namespace tern::run {
namespace {

JobSpec SlurmSpec() {
  JobSpec s;
  s.config_path = "cfg.yaml";
  s.run_dir = "/runs/demo";
  s.where = "slurm";
  s.ranks = 2;
  s.nodes = 1;
  s.time_limit = "4:00:00";
  s.sbatch_args = {"--partition=gpu", "--account=ml"};
  return s;
}

TEST(SlurmScriptTest, TheBatchScriptAsksForTheJobsShapeRequeuesAndQuotesEveryArgument) {
  JobSpec s = SlurmSpec();
  s.cuda = true;
  const std::string script = SbatchScript(
      s, {"/opt/tern/bin/tern", {"cfg.yaml", "--set", "train.lr=3e-4", "--project", "it's"}, "/w"});
  for (const char* line : {"#!/bin/bash\n", "#SBATCH --job-name=tern-demo\n", "#SBATCH --nodes=1\n",
                           "#SBATCH --ntasks=2\n", "#SBATCH --gpus-per-task=1\n", "#SBATCH --time=4:00:00\n",
                           "#SBATCH --requeue\n", "#SBATCH --signal=B:USR1@120\n",
                           "#SBATCH --open-mode=append\n", "#SBATCH --output=/runs/demo/logs/slurm-%j.out\n",
                           "#SBATCH --chdir=/w\n", "#SBATCH --partition=gpu\n", "#SBATCH --account=ml\n",
                           "'/opt/tern/bin/tern' run 'cfg.yaml' '--set' 'train.lr=3e-4' '--project' "
                           "'it'\\''s' --slurm-batch &\n",
                           "scontrol requeue \"$SLURM_JOB_ID\"\n"}) {
    EXPECT_NE(script.find(line), std::string::npos) << "missing: " << line << "\nin:\n" << script;
  }
  // The extra options come after tern's, so that they win (sbatch takes the last of a repeated option).
  EXPECT_LT(script.find("--chdir=/w"), script.find("--partition=gpu"));
  s.cuda = false;
  s.time_limit.clear();
  const std::string cpu = SbatchScript(s, {"/t", {"c"}, "/w"});
  EXPECT_EQ(cpu.find("--gpus-per-task"), std::string::npos);
  EXPECT_EQ(cpu.find("--time="), std::string::npos);
  s.gpus_per_rank = 2;
  EXPECT_NE(SbatchScript(s, {"/t", {"c"}, "/w"}).find("--gpus-per-task=2"), std::string::npos);
}

// bash -n parses the script; and run with the supervisor replaced by a stub, a USR1 to the script reaches
// the stub, whose exit 75 makes the script requeue (scontrol is a stub too, on PATH).
TEST(SlurmScriptTest, AUsr1ReachesTheSupervisorAndItsExit75Requeues) {
  testing::TempDir tmp;
  testing::WriteFile(tmp / "tern", "#!/bin/bash\ntrap 'echo got-usr1 >> " + tmp.path() +
                                       "/trace; exit 75' USR1\necho \"$@\" >> " + tmp.path() +
                                       "/trace\nwhile :; do sleep 0.05; done\n");
  testing::WriteFile(tmp / "bin/scontrol", "#!/bin/bash\necho \"scontrol $*\" >> " + tmp.path() + "/trace\n");
  JobSpec s = SlurmSpec();
  s.run_dir = tmp.path();
  testing::WriteFile(tmp / "job.sbatch", SbatchScript(s, {tmp / "tern", {"c.yaml"}, tmp.path()}));
  ASSERT_EQ(testing::RunCommand("chmod +x " + tmp.path() + "/tern " + tmp.path() + "/bin/scontrol").code, 0);
  ASSERT_EQ(testing::RunCommand("bash -n " + tmp.path() + "/job.sbatch").code, 0);
  const testing::CommandResult r = testing::RunCommand(
      "cd " + tmp.path() + " && PATH=" + tmp.path() + "/bin:$PATH SLURM_JOB_ID=7 bash job.sbatch & pid=$!; " +
      "for i in $(seq 100); do grep -q slurm-batch " + tmp.path() +
      "/trace 2>/dev/null && break; sleep 0.05; " + "done; kill -USR1 $pid; wait $pid");
  EXPECT_EQ(r.code, 75) << r.output;
  EXPECT_EQ(testing::ReadFile(tmp / "trace"), "run c.yaml --slurm-batch\ngot-usr1\nscontrol requeue 7\n");
  EXPECT_NE(r.output.find("requeueing Slurm job 7"), std::string::npos) << r.output;
}

TEST(SlurmScriptTest, InsideTheAllocationAMultiRankAttemptIsAnSrunStep) {
  JobSpec s = SlurmSpec();
  s.run_dir = "/runs/demo";
  const std::vector<std::string> argv = AttemptArgv(s, {"/t", "train"}, AttemptVars{});
  ASSERT_GE(argv.size(), 5u);
  EXPECT_EQ(
      std::vector<std::string>(argv.begin(), argv.begin() + 6),
      (std::vector<std::string>{"srun", "--ntasks=2", "--kill-on-bad-exit=1", "--mpi=pmix", "/t", "train"}));
  s.srun_args = {"--mpi=pmix_v4", "--cpu-bind=cores"};
  const std::vector<std::string> two = AttemptArgv(s, {"/t", "train"}, AttemptVars{});
  EXPECT_EQ(std::vector<std::string>(two.begin(), two.begin() + 5),
            (std::vector<std::string>{"srun", "--ntasks=2", "--kill-on-bad-exit=1", "--mpi=pmix_v4",
                                      "--cpu-bind=cores"}));
  s.ranks = 1;  // in the batch step itself, where Slurm's SIGTERM reaches it
  EXPECT_EQ(AttemptArgv(s, {"/t", "train"}, AttemptVars{})[0], "/t");
}

TEST(SlurmScriptTest, RunProgramReturnsBothStreamsAndNamesWhatToInstall) {
  auto r = RunProgram({"sh", "-c", "echo out; echo err >&2; exit 3"}, "");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->code, 3);
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
  auto missing = RunProgram({"tern-no-such-program"}, "install the thing");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("install the thing"), std::string::npos);
  EXPECT_EQ(ShellQuote("a'b c"), "'a'\\''b c'");
  SlurmJobInfo info;
  info.state = "PENDING";
  EXPECT_TRUE(info.active());
  info.state = "COMPLETED";
  EXPECT_FALSE(info.active());
  info.state = "";
  EXPECT_FALSE(info.active());
}

// sbatch and scontrol stand-ins on PATH: a submission's rows in both ledgers, the id of `sbatch --parsable`
// ("id;cluster"), scontrol's fields, the refusal of a second submission while the first is queued, and a
// refused submission that leaves the job "stopped" with sbatch's words, not "queued" for ever.
TEST(SlurmSubmitTest, TheSubmissionIsInTheLedgerAndARefusalSaysWhy) {
  testing::TempDir tmp;
  const std::string bin = tmp / "bin";
  testing::WriteFile(bin + "/sbatch", "#!/bin/sh\n[ -f " + tmp.path() +
                                          "/refuse ] && { echo 'sbatch: error: invalid partition' >&2; "
                                          "exit 1; }\necho '4242;tern-ci'\n");
  testing::WriteFile(
      bin + "/scontrol",
      "#!/bin/sh\necho 'JobId=4242 JobName=tern-job JobState=PENDING Reason=Priority Restarts=0 "
      "NodeList=(null) Command=/x y'\n");
  ASSERT_EQ(testing::RunCommand("chmod +x " + bin + "/sbatch " + bin + "/scontrol").code, 0);
  const std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  ::setenv("PATH", (bin + ":" + path).c_str(), 1);
  JobSpec s;
  s.config_path = "c.yaml";
  s.run_dir = tmp / "job";
  s.where = "slurm";
  s.project = "p";
  RealClock clock;
  const BatchCommand command{"/t", {"c.yaml"}, tmp.path()};
  auto sub = SubmitSlurmJob(s, command, tmp / "home/ledger.sqlite", &clock);
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  EXPECT_EQ(sub->slurm_job_id, "4242");
  EXPECT_EQ(sub->script, tmp / "job/slurm/job.sbatch");
  EXPECT_NE(testing::ReadFile(sub->script).find("#SBATCH --requeue"), std::string::npos);
  for (const std::string& ledger : {RunDirLedgerPath(s.run_dir), tmp / "home/ledger.sqlite"}) {
    auto l = Ledger::Open(ledger);
    ASSERT_TRUE(l.ok());
    auto job = (*l)->FindJob(s.run_dir);
    ASSERT_TRUE(job.ok() && *job) << ledger;
    EXPECT_EQ((*job)->state, "queued");
    EXPECT_EQ((*job)->slurm_job_id, "4242");
    EXPECT_EQ((*job)->reason, "submitted to Slurm as job 4242");
    EXPECT_EQ((*job)->project, "p");
  }
  auto info = QuerySlurmJob("4242");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state, "PENDING");
  EXPECT_EQ(info->reason, "Priority");
  EXPECT_TRUE(info->active());

  auto again = SubmitSlurmJob(s, command, "", &clock);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("in Slurm already as job 4242 (PENDING)"), std::string::npos)
      << again.status().message();

  s.run_dir = tmp / "other";
  testing::WriteFile(tmp / "refuse", "");
  auto refused = SubmitSlurmJob(s, command, "", &clock);
  ::setenv("PATH", path.c_str(), 1);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("invalid partition"), std::string::npos)
      << refused.status().message();
  auto l = Ledger::Open(RunDirLedgerPath(s.run_dir));
  ASSERT_TRUE(l.ok());
  auto job = (*l)->FindJob(s.run_dir);
  ASSERT_TRUE(job.ok() && *job);
  EXPECT_EQ((*job)->state, "stopped");
  EXPECT_NE((*job)->reason.find("not submitted"), std::string::npos) << (*job)->reason;
}

}  // namespace
}  // namespace tern::run
