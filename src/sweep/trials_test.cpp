// The sweep's restart under --on slurm, against a fake Slurm: the rungs recorded as running are followed
// again while Slurm still has them (not submitted twice), one Slurm says failed is a failed trial, one
// submitted just before the kill (its id only in the trial's ledger) is adopted, and one never submitted is
// submitted; the sweep's job: keys reach every `tern run --on=slurm`.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "metrics/run_record.h"
#include "sweep/runner.h"
#include "testing/files.h"

namespace tern::sweep {
namespace {

// Each job goes through its states, one per query (the last repeats); on COMPLETED it has written the rung's
// evaluation into its run directory, as the trainer in the allocation would.
class FakeSlurm : public SlurmClient {
 public:
  struct Job {
    std::string run_dir;
    int step = 0;
    double loss = 0;
    std::vector<std::string> states;
    size_t queries = 0;
  };

  Result<std::string> Submit(const std::vector<std::string>& args, const std::string& run_dir,
                             const std::string&) override {
    submits.push_back(args);
    const std::string id = std::to_string(next_id++);
    int step = 0;
    for (const std::string& a : args)
      if (a.rfind("train.steps=", 0) == 0) step = std::stoi(a.substr(12));
    jobs[id] = {run_dir, step, loss_of[run_dir] - 0.1 * step, {"PENDING", "RUNNING", "COMPLETED"}};
    ledger_ids[run_dir] = id;
    return id;
  }
  Result<run::SlurmJobInfo> Query(const std::string& id) override {
    queried.push_back(id);
    Job& j = jobs.at(id);
    run::SlurmJobInfo info;
    info.id = id;
    info.state = j.states[std::min(j.queries++, j.states.size() - 1)];
    if (info.state == "COMPLETED" && j.queries == j.states.size()) {
      std::filesystem::create_directories(j.run_dir);
      EvalRecord e;
      e.step = j.step;
      e.val_loss = j.loss;
      std::ofstream(j.run_dir + "/metrics.jsonl", std::ios::app) << ToJson(e).dump() << "\n";
    }
    return info;
  }
  Result<std::string> LedgerSlurmJob(const std::string& run_dir) override { return ledger_ids[run_dir]; }
  std::string LedgerJobState(const std::string&) override { return ""; }

  std::map<std::string, Job> jobs;
  std::map<std::string, std::string> ledger_ids;  // run dir -> the Slurm job its ledger names
  std::map<std::string, double> loss_of;          // run dir -> the loss at step 0 of the line it follows
  std::vector<std::vector<std::string>> submits;
  std::vector<std::string> queried;
  int next_id = 100;
};

bool Has(const std::vector<std::string>& args, const std::string& word) {
  return std::find(args.begin(), args.end(), word) != args.end();
}

TEST(SweepSlurmRestartTest, LiveJobsAreFollowedAgainFailedOnesFailAndOnlyTheUnsubmittedIsSubmitted) {
  testing::TempDir tmp;
  const std::string text =
      "base: tiny.yaml\ndir: s\ntrials: 4\nparallel: 4\nasha: {eta: 2, min_steps: 2, max_steps: 4}\n"
      "job: {on: slurm, time_limit: \"5:00\"}\nspace: {train.lr: {uniform: [0.001, 0.01]}}\n";
  Result<SweepSpec> spec = ParseSweepSpec(text, tmp.path() + "/sweep.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->on, "slurm");
  FakeSlurm slurm;
  auto dir = [&](int id) { return spec->dir + "/trials/00" + std::to_string(id); };
  // The state a sweep killed with -9 leaves: four rungs running at rung 0 (2 steps).
  std::filesystem::create_directories(spec->dir);
  {
    auto store = SweepStore::Open(spec->dir + "/sweep.sqlite");
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->SetSpec(text).ok());
    for (int i = 0; i < 4; i++) {
      TrialRow t;
      t.id = i;
      t.params = SampleTrial(*spec, i);
      t.run_dir = dir(i);
      ASSERT_TRUE((*store)->Put(t).ok());
    }
    // Trial 3 is left without one: killed after `tern run --on slurm` submitted job 9, before the sweep
    // recorded it (the id is in the trial's ledger only). Trial 2 was never submitted.
    TrialRow t0, t1;
    t0.id = 0, t0.run_dir = dir(0), t0.params = SampleTrial(*spec, 0),
    t0.slurm_job_id = "7";  // still running
    t1.id = 1, t1.run_dir = dir(1), t1.params = SampleTrial(*spec, 1),
    t1.slurm_job_id = "8";  // failed in Slurm
    ASSERT_TRUE((*store)->Put(t0).ok());
    ASSERT_TRUE((*store)->Put(t1).ok());
  }
  slurm.loss_of = {{dir(0), 3.0}, {dir(2), 3.5}, {dir(3), 3.2}};
  slurm.jobs["7"] = {dir(0), 2, 3.0, {"RUNNING", "RUNNING", "COMPLETED"}};
  slurm.jobs["8"] = {dir(1), 2, 0, {"FAILED"}};
  slurm.jobs["9"] = {dir(3), 2, 3.2, {"RUNNING", "COMPLETED"}};
  slurm.ledger_ids[dir(3)] = "9";
  slurm.ledger_ids[dir(1)] = "8";

  SlurmTrials runner(&slurm, /*poll_s=*/0);
  SweepOptions o;
  o.spec = *spec;
  o.spec_text = text;
  o.tern = "/bin/tern";
  o.console = nullptr;
  o.runner = &runner;
  Result<SweepResult> r = RunSweep(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->trials.size(), 4u);

  // Submitted: trial 2's rung 0 (never submitted), then the best of rung 0 (trial 0) to rung 1.
  ASSERT_EQ(slurm.submits.size(), 2u);
  EXPECT_TRUE(Has(slurm.submits[0], "run.dir=" + dir(2)));
  EXPECT_TRUE(Has(slurm.submits[0], "train.steps=2"));
  EXPECT_TRUE(Has(slurm.submits[1], "run.dir=" + dir(0)));
  EXPECT_TRUE(Has(slurm.submits[1], "train.steps=4"));
  for (const auto& args : slurm.submits) {
    EXPECT_TRUE(Has(args, "--on=slurm"));
    EXPECT_TRUE(Has(args, "--time-limit=5:00")) << "the sweep's job: section";
    EXPECT_EQ(args[1], "run");
  }
  const std::vector<TrialRow>& t = r->trials;
  EXPECT_EQ(t[0].state, "done");
  EXPECT_EQ(t[0].losses, (std::vector<double>{3.0, 2.6}));
  EXPECT_EQ(t[0].slurm_job_id, "101");
  EXPECT_EQ(t[1].state, "failed");
  EXPECT_NE(t[1].reason.find("Slurm job 8 ended FAILED at rung 0"), std::string::npos) << t[1].reason;
  EXPECT_TRUE(t[1].losses.empty());
  EXPECT_EQ(t[2].state, "stopped");
  EXPECT_EQ(t[2].slurm_job_id, "100");
  EXPECT_EQ(t[3].slurm_job_id, "9") << "adopted from its ledger, not submitted again";
  EXPECT_EQ(t[3].losses, (std::vector<double>{3.2}));
  EXPECT_EQ(t[3].state, "stopped");
  EXPECT_EQ(r->best, 0);

  // Recorded: a second restart has nothing left to run and submits nothing.
  auto store = SweepStore::Open(spec->dir + "/sweep.sqlite");
  ASSERT_TRUE(store.ok());
  auto rows = (*store)->Trials();
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ((*rows)[3].slurm_job_id, "9");
  EXPECT_EQ((*rows)[0].slurm_job_id, "101");
  ASSERT_TRUE(RunSweep(o).ok());
  EXPECT_EQ(slurm.submits.size(), 2u);
}

TEST(SweepSlurmRestartTest, ARungStillInSlurmIsNotRunAgainLocally) {
  testing::TempDir tmp;
  const std::string text =
      "base: tiny.yaml\ndir: s\ntrials: 1\nasha: {eta: 2, min_steps: 2, max_steps: 4}\n"
      "space: {train.lr: {uniform: [0.001, 0.01]}}\n";
  Result<SweepSpec> spec = ParseSweepSpec(text, tmp.path() + "/sweep.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  std::filesystem::create_directories(spec->dir);
  {
    auto store = SweepStore::Open(spec->dir + "/sweep.sqlite");
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->SetSpec(text).ok());
    TrialRow t;
    t.run_dir = spec->dir + "/trials/000";
    t.slurm_job_id = "7";
    ASSERT_TRUE((*store)->Put(t).ok());
  }
  SweepOptions o;
  o.spec = *spec;  // on: local
  o.spec_text = text;
  o.tern = "/nonexistent/tern";
  o.console = nullptr;
  Result<SweepResult> r = RunSweep(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("Slurm as job 7: resume with --on slurm"), std::string::npos)
      << r.status().message();
}

TEST(SweepSlurmSpecTest, TheJobSectionTakesTernRunsJobKeysAndRefusesOthers) {
  const std::string head =
      "base: b.yaml\ntrials: 2\nasha: {min_steps: 2, max_steps: 4}\nspace: {train.lr: {uniform: [0, 1]}}\n";
  Result<SweepSpec> ok = ParseSweepSpec(
      head + "job: {time_limit: \"1:00:00\", sbatch_args: \"--partition=gpu -A ml\"}\n", "s.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->on, "local");
  EXPECT_EQ(JobFlags(ok->job),
            (std::vector<std::string>{"--time-limit=1:00:00", "--sbatch-args=--partition=gpu -A ml"}));
  Result<SweepSpec> bad = ParseSweepSpec(head + "job: {partiton: gpu}\n", "s.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("job.partiton"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("job.sbatch_args"), std::string::npos) << "names what is allowed";
  Result<SweepSpec> where = ParseSweepSpec(head + "job: {on: cloud}\n", "s.yaml");
  ASSERT_FALSE(where.ok());
  EXPECT_NE(where.status().message().find("local, slurm"), std::string::npos);
  Result<SweepSpec> price = ParseSweepSpec(head + "job: {price_per_hour: 2}\n", "s.yaml");
  ASSERT_FALSE(price.ok());
  EXPECT_NE(price.status().message().find("top of the sweep file"), std::string::npos);
}

// A sweep directory written before --on slurm (no slurm_job_id column) opens, keeps its rows and records ids.
// Before anything runs, a schedule that decays over train.steps (= the rung) is named: every promotion would
// stretch it. Only trials with constant are quiet. (A grid: 2 learning rates x the schedules listed.)
TEST(SweepCheckTest, DecayingSchedulesAreWarnedAbout) {
  testing::TempDir dir;
  testing::WriteFile(dir / "tiny.yaml", "data: {dir: /tmp/data}\ntrain: {schedule: constant}\n");
  for (const auto& [space, warned] : std::vector<std::pair<std::string, int>>{
           {"[constant]", 0}, {"[cosine]", 2}, {"[linear, wsd]", 4}, {"[constant, wsd]", 2}}) {
    auto spec = ParseSweepSpec(
        "base: tiny.yaml\ntrials: 4\nsampler: grid\nasha: {min_steps: 2, max_steps: 8}\n"
        "space: {train.schedule: {choice: " +
            space + "}, train.lr: {choice: [0.001, 0.002]}}\n",
        dir / "sweep.yaml");
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    auto w = CheckTrialConfigs(*spec);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    if (warned == 0) {
      EXPECT_TRUE(w->empty()) << space;
      continue;
    }
    ASSERT_EQ(w->size(), 1u) << space;
    EXPECT_EQ(w->front().rfind(std::to_string(warned) + " trials use a train.schedule that decays", 0), 0u)
        << w->front();
  }
}

// objective: choice_error ranks by 1 - choice_acc of the rung's evaluation (the last row of a step evaluated
// twice); a trial without eval.choices is refused before anything runs, and a row without the accuracy is an
// error that says why.
TEST(SweepCheckTest, AChoiceObjectiveReadsTheAccuracyAndNeedsEvalChoices) {
  testing::TempDir dir;
  testing::WriteFile(dir / "metrics.jsonl", ToJson(EvalRecord{4, 3.5, 1, 0.25, 0.5}).dump() + "\n" +
                                                ToJson(EvalRecord{8, 3.0, 1, 0.40, 0.30}).dump() + "\n" +
                                                ToJson(EvalRecord{8, 2.9, 1, 0.45, 0.35}).dump() + "\n" +
                                                ToJson(EvalRecord{12, 2.5, 1}).dump() + "\n");
  EXPECT_DOUBLE_EQ(ObjectiveAt(dir.path(), 4, Objective::kValLoss).value(), 3.5);
  EXPECT_DOUBLE_EQ(ObjectiveAt(dir.path(), 4, Objective::kChoiceError).value(), 0.75);
  EXPECT_DOUBLE_EQ(ObjectiveAt(dir.path(), 4, Objective::kChoiceErrorNorm).value(), 0.5);
  EXPECT_DOUBLE_EQ(ObjectiveAt(dir.path(), 8, Objective::kChoiceError).value(), 0.55) << "the later row";
  auto missing = ObjectiveAt(dir.path(), 12, Objective::kChoiceError);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("without eval.choices"), std::string::npos);
  EXPECT_FALSE(ObjectiveAt(dir.path(), 16, Objective::kValLoss).ok()) << "no evaluation at that step";

  testing::WriteFile(dir / "tiny.yaml", "data: {dir: /tmp/data}\ntrain: {schedule: constant}\n");
  const std::string head =
      "base: tiny.yaml\ntrials: 2\nobjective: choice_error\nasha: {min_steps: 2, max_steps: 8}\n"
      "space: {train.lr: {choice: [0.001, 0.002]}}\n";
  auto spec = ParseSweepSpec(head, dir / "sweep.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->objective, Objective::kChoiceError);
  auto refused = CheckTrialConfigs(*spec);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("eval.choices: FILE.jsonl"), std::string::npos);
  auto with = ParseSweepSpec(head + "set: {eval.choices: /tmp/set.jsonl}\n", dir / "sweep.yaml");
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  EXPECT_TRUE(CheckTrialConfigs(*with).ok());
}

// objective: val_loss_mean / val_loss_max rank by the mean / the worst of data.dir's and every mixed-in
// dataset's validation loss; a trial without data.mix is refused before anything runs, naming the fix.
TEST(SweepCheckTest, AMixObjectiveReadsEveryDatasetsLossAndNeedsDataMix) {
  testing::TempDir dir;
  EvalRecord e{4, 3.0, 1};
  e.val_loss_mix = {{"/d/a", 4.0}, {"/d/b", 2.0}};
  testing::WriteFile(dir / "metrics.jsonl",
                     ToJson(e).dump() + "\n" + ToJson(EvalRecord{8, 2.5, 1}).dump() + "\n");
  EXPECT_DOUBLE_EQ(ObjectiveAt(dir.path(), 4, Objective::kValLoss).value(), 3.0);
  EXPECT_DOUBLE_EQ(ObjectiveAt(dir.path(), 4, Objective::kValLossMean).value(), 3.0);
  EXPECT_DOUBLE_EQ(ObjectiveAt(dir.path(), 4, Objective::kValLossMax).value(), 4.0);
  auto missing = ObjectiveAt(dir.path(), 8, Objective::kValLossMax);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("without data.mix"), std::string::npos)
      << missing.status().message();

  testing::WriteFile(dir / "tiny.yaml", "data: {dir: /tmp/data}\ntrain: {schedule: constant}\n");
  const std::string head =
      "base: tiny.yaml\ntrials: 2\nobjective: val_loss_max\nasha: {min_steps: 2, max_steps: 8}\n"
      "space: {train.lr: {choice: [0.001, 0.002]}}\n";
  auto spec = ParseSweepSpec(head, dir / "sweep.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->objective, Objective::kValLossMax);
  auto refused = CheckTrialConfigs(*spec);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("set data.mix"), std::string::npos) << refused.status().message();
  auto with = ParseSweepSpec(head + "set: {data.mix: '/tmp/other:0.3'}\n", dir / "sweep.yaml");
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  EXPECT_TRUE(CheckTrialConfigs(*with).ok()) << CheckTrialConfigs(*with).status().ToString();
}

// A base config with a shared durable tier (configs/demo.yaml has one) gives each trial its own folder in it,
// and in any other tier it names; tiers left to their defaults are already in the trial's run directory.
TEST(SweepCheckTest, EachTrialCheckpointsIntoItsOwnFolderOfASharedTier) {
  testing::TempDir dir;
  testing::WriteFile(dir / "base.yaml",
                     "data: {dir: /tmp/data}\nckpt: {durable: s3://b/runs/, durable_every: 5}\n");
  auto spec = ParseSweepSpec(
      "base: base.yaml\ntrials: 2\nasha: {min_steps: 2, max_steps: 8}\n"
      "set: {ckpt.best_dir: /shared/best}\nspace: {train.lr: {choice: [0.001, 0.002]}}\n",
      dir / "sweep.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  TrialRow t;
  t.run_dir = dir / "sweeps/x/trials/003";
  EXPECT_EQ(TrialOwnTiers(*spec, t), (std::vector<std::string>{"ckpt.durable=s3://b/runs/trial_003",
                                                               "ckpt.best_dir=/shared/best/trial_003"}));
  testing::WriteFile(dir / "base.yaml", "data: {dir: /tmp/data}\n");
  EXPECT_TRUE(TrialOwnTiers(*spec, t).size() == 1u) << "only the best tier the sweep's set: names";
}

TEST(SweepSlurmStoreTest, AnOlderStateGainsTheSlurmJobColumn) {
  testing::TempDir tmp;
  const std::string path = tmp.path() + "/sweep.sqlite";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(
      sqlite3_exec(db,
                   "CREATE TABLE trials (id INTEGER PRIMARY KEY, params TEXT NOT NULL, run_dir TEXT NOT "
                   "NULL, state TEXT NOT NULL, target_rung INTEGER NOT NULL, losses TEXT NOT NULL, "
                   "cost_usd REAL NOT NULL, steps INTEGER NOT NULL, reason TEXT NOT NULL);"
                   "INSERT INTO trials VALUES (0, '[[\"train.lr\",\"0.01\"]]', '/r/000', 'waiting', 0,"
                   " '[3.5]', 0.25, 2, '');",
                   nullptr, nullptr, nullptr),
      SQLITE_OK);
  sqlite3_close(db);
  auto store = SweepStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status().message();
  auto rows = (*store)->Trials();
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].losses, std::vector<double>{3.5});
  EXPECT_EQ((*rows)[0].slurm_job_id, "");
  TrialRow t = (*rows)[0];
  t.slurm_job_id = "42";
  ASSERT_TRUE((*store)->Put(t).ok());
  auto again = (*store)->Trials();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[0].slurm_job_id, "42");
}

}  // namespace
}  // namespace tern::sweep
