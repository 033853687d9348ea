#include "sweep/runner.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "metrics/run_record.h"
#include "run/ledger.h"
#include "sweep/asha.h"
#include "train/train_config.h"

namespace tern::sweep {
namespace {

namespace fs = std::filesystem;

bool Ended(const TrialRow& t) {
  return t.state == "done" || t.state == "stopped" || t.state == "failed";
}

std::vector<AshaTrial> AshaView(const std::vector<TrialRow>& trials) {
  std::vector<AshaTrial> v;
  for (const TrialRow& t : trials) v.push_back({t.id, t.losses, t.state == "waiting"});
  return v;
}

// The command of one rung: `tern run BASE --set ... --set train.steps=R`; the same run directory each rung,
// so that `tern run` continues the trial's job (its checkpoint, its ledger).
std::vector<std::string> TrialArgs(const SweepOptions& o, const TrialRow& t, int steps) {
  const SweepSpec& s = o.spec;
  std::vector<std::string> a = {o.tern, "run", s.base_config, "--quiet"};
  auto set = [&a](const std::string& kv) {
    a.push_back("--set");
    a.push_back(kv);
  };
  for (const std::string& kv : s.overrides) set(kv);
  for (const auto& [k, v] : t.params) set(k + "=" + v);
  set("run.dir=" + t.run_dir);
  set("train.steps=" + std::to_string(steps));
  set("ckpt.every=" + std::to_string(s.asha.min_steps));  // the rung's last step is saved, to go on from
  for (const std::string& kv : TrialOwnTiers(s, t)) set(kv);
  const std::vector<std::string> job = JobFlags(s.job);  // the sweep's job: section
  a.insert(a.end(), job.begin(), job.end());
  if (!s.instance.empty()) {
    a.push_back("--instance");
    a.push_back(s.instance);
  } else if (s.price_per_hour > 0) {
    a.push_back("--price-per-hour");
    a.push_back(fmt::format("{}", s.price_per_hour));
  }
  return a;
}

// The trial's job totals from its run directory's ledger: every attempt at its price, start-ups included.
void ReadCost(TrialRow* t) {
  auto l = run::Ledger::Open(run::RunDirLedgerPath(t->run_dir));
  if (!l.ok()) return;
  auto job = (*l)->FindJob(t->run_dir);
  if (!job.ok() || !*job) return;
  auto attempts = (*l)->Attempts((*job)->job_id);
  if (!attempts.ok()) return;
  const run::JobTotals tot = run::SumAttempts(*attempts);
  t->cost_usd = tot.cost_usd;
  t->steps = std::max(0, tot.last_step);
}

class Loop {
 public:
  Loop(const SweepOptions& o, SweepStore* store, TrialRunner* runner)
      : o_(o), store_(store), runner_(runner), rungs_(RungSteps(o.spec.asha)) {}

  Status Run(std::vector<TrialRow> trials) {
    trials_ = std::move(trials);
    // A restart: the rungs in flight when the sweep died are followed again where they still run (a Slurm
    // job), else run again.
    for (TrialRow& t : trials_) {
      if (t.state != "running") continue;
      TERN_ASSIGN_OR_RETURN(bool followed, runner_->Reattach(&t));
      if (!followed) {
        TERN_RETURN_IF_ERROR(Launch(&t));
        continue;
      }
      TERN_RETURN_IF_ERROR(store_->Put(t));
      running_.insert(t.id);
      Print(
          fmt::format("trial {} rung {}: following Slurm job {} again", t.id, t.target_rung, t.slurm_job_id));
    }
    while (true) {
      TERN_RETURN_IF_ERROR(Reap());
      const bool launched = Fill();
      TERN_RETURN_IF_ERROR(status_);
      if (running_.empty() && !launched) break;
      if (!launched) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    const std::vector<AshaTrial> view = AshaView(trials_);
    for (TrialRow& t : trials_) {
      if (t.state != "waiting") continue;
      t.state = "stopped";
      if (t.reason.empty())
        t.reason = AshaStopReason(view, t.id, o_.spec.asha.eta, rungs_[t.losses.size() - 1],
                                  ObjectiveName(o_.spec.objective));
      TERN_RETURN_IF_ERROR(store_->Put(t));
    }
    return Status::Ok();
  }

  const std::vector<TrialRow>& trials() const { return trials_; }
  const std::string& stopped() const { return stopped_; }

 private:
  void Print(const std::string& line) {
    if (!o_.console) return;
    std::fprintf(o_.console, "tern sweep: %s\n", line.c_str());
    std::fflush(o_.console);
  }

  double Spent() const {
    double s = 0;
    for (const TrialRow& t : trials_) s += t.cost_usd;
    return s;
  }
  // $ per step over everything trained so far (start-ups included); 0 = nothing measured yet.
  double PerStep() const {
    double usd = 0;
    int steps = 0;
    for (const TrialRow& t : trials_) usd += t.cost_usd, steps += t.steps;
    return steps > 0 ? usd / steps : 0;
  }
  // The estimate of the steps still to run for the rungs in flight, and of `more` steps, fits the budget.
  bool Affordable(int more, std::string* why) const {
    if (o_.spec.budget_usd <= 0) return true;
    const double per = PerStep();
    int in_flight = 0;
    for (const TrialRow& t : trials_)
      if (t.state == "running") in_flight += std::max(0, rungs_[t.target_rung] - t.steps);
    const double committed = Spent() + per * in_flight, next = per * more;
    if (committed + next <= o_.spec.budget_usd && (per > 0 || committed < o_.spec.budget_usd)) return true;
    *why = fmt::format("budget: the next rung (~${:.4f}) would exceed the ${:.4f} left of ${:.2f}", next,
                       std::max(0.0, o_.spec.budget_usd - committed), o_.spec.budget_usd);
    return false;
  }

  Status Launch(TrialRow* t) {
    const int steps = rungs_[t->target_rung];
    t->state = "running";
    t->slurm_job_id.clear();                // the previous rung's job is not this one's
    TERN_RETURN_IF_ERROR(store_->Put(*t));  // recorded before it starts: a restart runs it again
    std::error_code ec;
    fs::create_directories(fs::path(t->run_dir).parent_path(), ec);
    TERN_RETURN_IF_ERROR(runner_->Start(t, TrialArgs(o_, *t, steps)));
    if (!t->slurm_job_id.empty()) TERN_RETURN_IF_ERROR(store_->Put(*t));  // to follow it after a restart
    running_.insert(t->id);
    Print(fmt::format("trial {} -> rung {} ({} steps){}", t->id, t->target_rung, steps,
                      t->slurm_job_id.empty() ? "" : ": Slurm job " + t->slurm_job_id));
    return Status::Ok();
  }

  // Records the rungs that finished.
  Status Reap() {
    for (auto it = running_.begin(); it != running_.end();) {
      TrialRow& t = trials_[*it];
      TERN_ASSIGN_OR_RETURN(std::optional<RungEnd> end, runner_->Poll(t));
      if (!end) {
        ++it;
        continue;
      }
      it = running_.erase(it);
      ReadCost(&t);
      const int steps = rungs_[t.target_rung];
      const bool ok = end->ok;
      Result<double> loss = ok ? ObjectiveAt(t.run_dir, steps, o_.spec.objective) : Status::Internal("");
      if (!ok || !loss.ok()) {
        t.state = "failed";
        t.reason = !ok ? end->why : loss.status().message();
      } else {
        t.losses.push_back(*loss);
        t.state = t.target_rung + 1 == static_cast<int>(rungs_.size()) ? "done" : "waiting";
        if (t.state == "done") t.reason = "reached max_steps";
      }
      Print(fmt::format(
          "trial {} rung {}: {} (${:.4f})", t.id, t.target_rung,
          t.state == "failed" ? t.reason : fmt::format("{} {:.4f}", ObjectiveLabel(o_.spec.objective), *loss),
          t.cost_usd));
      TERN_RETURN_IF_ERROR(store_->Put(t));
    }
    return Status::Ok();
  }

  // Starts what ASHA and the budgets allow, up to `parallel` at a time; true when it started something.
  bool Fill() {
    bool launched = false;
    while (static_cast<int>(running_.size()) < o_.spec.parallel) {
      const std::vector<Promotion> promos =
          AshaPromotions(AshaView(trials_), static_cast<int>(rungs_.size()), o_.spec.asha.eta);
      std::string why;
      if (!promos.empty()) {
        TrialRow& t = trials_[promos[0].id];
        if (!stopped_.empty() || !Affordable(rungs_[promos[0].to_rung] - t.steps, &why)) {
          t.state = "stopped";
          t.reason = stopped_.empty() ? why : stopped_;
          if (stopped_.empty()) stopped_ = why;
          status_ = store_->Put(t);
          if (!status_.ok()) return launched;
          continue;
        }
        t.target_rung = promos[0].to_rung;
        status_ = Launch(&t);
        if (!status_.ok()) return launched;
        launched = true;
        continue;
      }
      if (static_cast<int>(trials_.size()) >= TrialCount(o_.spec) || !stopped_.empty()) break;
      if (!Affordable(rungs_[0], &why)) {
        stopped_ = why;
        Print("no more trials: " + why);
        break;
      }
      TrialRow t;
      t.id = static_cast<int>(trials_.size());
      t.params = SampleTrial(o_.spec, t.id);
      t.run_dir = fmt::format("{}/trials/{:03d}", o_.spec.dir, t.id);
      trials_.push_back(t);
      status_ = Launch(&trials_.back());
      if (!status_.ok()) return launched;
      launched = true;
    }
    return launched;
  }

  const SweepOptions& o_;
  SweepStore* store_;
  TrialRunner* runner_;
  std::vector<int> rungs_;
  std::vector<TrialRow> trials_;
  std::set<int> running_;  // trial ids
  std::string stopped_;
  Status status_;
};

}  // namespace

Result<std::vector<std::string>> CheckTrialConfigs(const SweepSpec& spec) {
  int decaying = 0;
  TrainConfig base;
  TERN_RETURN_IF_ERROR(LoadTrainConfigFile(spec.base_config, &base));
  for (int i = 0; i < TrialCount(spec); i++) {
    TrainConfig cfg = base;
    for (const std::string& kv : spec.overrides)
      TERN_RETURN_IF_ERROR(ApplyOverride(kv, &cfg).WithContext("set"));
    for (const auto& [k, v] : SampleTrial(spec, i))
      TERN_RETURN_IF_ERROR(
          ApplyOverride(k + "=" + v, &cfg).WithContext(fmt::format("space.{} (trial {})", k, i)));
    cfg.steps = spec.asha.max_steps;
    TERN_RETURN_IF_ERROR(cfg.Validate().WithContext(fmt::format("trial {}", i)));
    const bool mix_objective =
        spec.objective == Objective::kValLossMean || spec.objective == Objective::kValLossMax;
    if (mix_objective && cfg.data_mix.empty())
      return Status::InvalidArgument(
          fmt::format("objective: {} ranks trials by the validation losses of data.dir and the datasets of "
                      "data.mix, but trial {} mixes none: set data.mix (DIR:SHARE,...) in the base config or "
                      "the sweep's set: section, or use objective: val_loss",
                      ObjectiveName(spec.objective), i));
    if (!mix_objective && spec.objective != Objective::kValLoss && cfg.eval_choices.empty())
      return Status::InvalidArgument(
          fmt::format("objective: {} ranks trials by their eval.choices accuracy, but trial {} has no "
                      "eval.choices: set it "
                      "in the base config or the sweep's set: section (eval.choices: FILE.jsonl)",
                      ObjectiveName(spec.objective), i));
    decaying += cfg.schedule != LrScheduleKind::kConstant;
  }
  std::vector<std::string> warnings;
  if (decaying > 0)
    warnings.push_back(fmt::format(
        "{} trials use a train.schedule that decays (cosine, linear or wsd) over train.steps = the rung: "
        "each "
        "promotion stretches the schedule (docs/sweep.md); set train.schedule: constant for a sweep",
        decaying));
  return warnings;
}

std::vector<std::string> TrialOwnTiers(const SweepSpec& spec, const TrialRow& t) {
  TrainConfig cfg;
  if (!LoadTrainConfigFile(spec.base_config, &cfg).ok()) return {};  // CheckTrialConfigs said why
  for (const std::string& kv : spec.overrides) (void)ApplyOverride(kv, &cfg);
  for (const auto& [k, v] : t.params) (void)ApplyOverride(k + "=" + v, &cfg);
  const std::string leaf = "trial_" + fs::path(t.run_dir).filename().string();
  std::vector<std::string> out;
  auto own = [&](const char* key, std::string dir) {
    if (dir.empty()) return;  // the default is inside the trial's run directory already
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    out.push_back(fmt::format("{}={}/{}", key, dir, leaf));
  };
  own("ckpt.dir", cfg.ckpt.dir);
  own("ckpt.durable", cfg.ckpt.durable);
  own("ckpt.best_dir", cfg.ckpt.best_dir);
  return out;
}

std::optional<double> ObjectiveOf(const EvalRecord& e, Objective objective) {
  switch (objective) {
    case Objective::kValLoss:
      return e.val_loss;
    case Objective::kChoiceError:
      if (e.choice_acc) return 1 - *e.choice_acc;
      break;
    case Objective::kChoiceErrorNorm:
      if (e.choice_acc_norm) return 1 - *e.choice_acc_norm;
      break;
    case Objective::kValLossMean:
    case Objective::kValLossMax: {
      if (e.val_loss_mix.empty()) break;
      double sum = e.val_loss, worst = e.val_loss;
      for (const auto& [dir, loss] : e.val_loss_mix) {
        sum += loss;
        worst = std::max(worst, loss);
      }
      return objective == Objective::kValLossMax ? worst
                                                 : sum / static_cast<double>(e.val_loss_mix.size() + 1);
    }
  }
  return std::nullopt;
}

Result<double> ObjectiveAt(const std::string& run_dir, int step, Objective objective) {
  TERN_ASSIGN_OR_RETURN(std::vector<RunRow> rows, ReadMetricsFile(run_dir + "/metrics.jsonl"));
  const EvalRecord* at = nullptr;  // a resumed run may have evaluated the step twice: the last row counts
  for (const RunRow& r : rows)
    if (const auto* e = std::get_if<EvalRecord>(&r.record); e && e->step == step) at = e;
  if (!at)
    return Status::NotFound(fmt::format("{}/metrics.jsonl has no evaluation at step {}", run_dir, step));
  const std::optional<double> v = ObjectiveOf(*at, objective);
  if (!v)
    return Status::NotFound(fmt::format(
        "{}/metrics.jsonl: the evaluation at step {} has no {} for objective {}: the trial ran without {}",
        run_dir, step,
        objective == Objective::kValLossMean || objective == Objective::kValLossMax ? "val_loss_mix"
                                                                                    : "choice accuracy",
        ObjectiveName(objective),
        objective == Objective::kValLossMean || objective == Objective::kValLossMax ? "data.mix"
                                                                                    : "eval.choices"));
  return *v;
}

SweepResult Summarize(const SweepSpec& spec, std::vector<TrialRow> trials) {
  SweepResult r;
  r.objective = spec.objective;
  r.rung_steps = RungSteps(spec.asha);
  size_t top = 0;
  for (const TrialRow& t : trials) {
    r.spent_usd += t.cost_usd;
    top = std::max(top, t.losses.size());
  }
  for (const TrialRow& t : trials) {
    if (top == 0 || t.losses.size() != top) continue;
    if (r.best < 0 || t.losses.back() < trials[r.best].losses.back()) r.best = t.id;
  }
  r.trials = std::move(trials);
  return r;
}

Result<SweepResult> RunSweep(const SweepOptions& o) {
  std::error_code ec;
  fs::create_directories(o.spec.dir, ec);
  if (ec)
    return Status::IoError(fmt::format("cannot create the sweep directory {}: {}", o.spec.dir, ec.message()));
  TERN_ASSIGN_OR_RETURN(auto store, SweepStore::Open(o.spec.dir + "/sweep.sqlite"));
  TERN_ASSIGN_OR_RETURN(std::string recorded, store->Spec());
  if (recorded.empty()) {
    TERN_RETURN_IF_ERROR(store->SetSpec(o.spec_text));
  } else if (recorded != o.spec_text) {
    return Status::InvalidArgument(
        fmt::format("{} holds a sweep started from another SWEEP.yaml; restore that file to resume it, or "
                    "give another dir:",
                    o.spec.dir));
  }
  TERN_ASSIGN_OR_RETURN(std::vector<TrialRow> trials, store->Trials());
  if (!trials.empty()) {
    int ended = 0;
    for (const TrialRow& t : trials) ended += Ended(t);
    if (o.console)
      std::fprintf(o.console, "tern sweep: resuming %s: %zu trials recorded, %d ended\n", o.spec.dir.c_str(),
                   trials.size(), ended);
  }
  for (const TrialRow& t : trials) {  // a rung still in Slurm must not be run again here
    if (o.spec.on != "slurm" && t.state == "running" && !t.slurm_job_id.empty()) {
      return Status::InvalidArgument(fmt::format(
          "trial {}'s rung {} was submitted to Slurm as job {}: resume with --on slurm (or `tern job cancel "
          "{}` first)",
          t.id, t.target_rung, t.slurm_job_id, t.run_dir));
    }
  }
  std::unique_ptr<TrialRunner> own;
  RealSlurmClient slurm;
  TrialRunner* runner = o.runner;
  if (!runner) {
    if (o.spec.on == "slurm")
      own = std::make_unique<SlurmTrials>(&slurm);
    else
      own = std::make_unique<LocalTrials>();
    runner = own.get();
  }
  Loop loop(o, store.get(), runner);
  TERN_RETURN_IF_ERROR(loop.Run(std::move(trials)));
  SweepResult r = Summarize(o.spec, loop.trials());
  r.stopped = loop.stopped();
  return r;
}

}  // namespace tern::sweep
