#include "report/diagnose.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace tern::report {
namespace {

double Price(const RunInput& run) {
  return run.start ? run.start->price_per_hour : 0;
}

// The step rows the time rules read: all of them but the first when there are ten or more (the first step
// waits for the loader's first batch and warms the caches: start-up, not the steady state).
std::vector<const StepRecord*> SteadySteps(const RunInput& run) {
  std::vector<const StepRecord*> out;
  for (size_t i = 0; i < run.steps.size(); ++i) {
    if (i == 0 && run.steps.size() >= 10) continue;
    out.push_back(&run.steps[i]);
  }
  return out;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// A finding whose cost is a fraction of step time, priced at the run's $/h.
Finding TimeFinding(const RunInput& run, std::string rule, double fraction) {
  Finding f;
  f.rule = std::move(rule);
  f.step_fraction = fraction;
  f.usd_per_hour = fraction * Price(run);
  return f;
}

// The $ the run had spent by `step` (the step rows' cost_usd), or -1 without prices.
double CostAt(const RunInput& run, int step) {
  double c = -1;
  for (const auto& s : run.steps)
    if (s.cost_usd && s.step <= step) c = *s.cost_usd;
  return c;
}
double LastCost(const RunInput& run) {
  if (run.end && run.end->cost_usd > 0) return run.end->cost_usd;
  for (auto it = run.steps.rbegin(); it != run.steps.rend(); ++it)
    if (it->cost_usd) return *it->cost_usd;
  return -1;
}

// Training wall time in seconds: summary's train_s, else the last step's elapsed_s, else the sum of step_ms.
double TrainSeconds(const RunInput& run) {
  if (run.end && run.end->train_s > 0) return run.end->train_s;
  if (!run.steps.empty() && run.steps.back().elapsed_s && *run.steps.back().elapsed_s > 0)
    return *run.steps.back().elapsed_s;
  double ms = 0;
  for (const auto& s : run.steps) ms += s.step_ms;
  return ms / 1e3;
}

}  // namespace

std::string RulesHelp(const DiagnoseOptions& o) {
  return fmt::format(
      "Rules (docs/report.md, \"Diagnosis\"):\n"
      "  data_bound        data wait > {:.0f}% of step time (data_wait_ms / step_ms)\n"
      "  checkpoint_stall  checkpoint stalls > {:.0f}% of training time (checkpoint rows' stall_ms)\n"
      "  exposed_comm      communication waited for > {:.0f}% of step time (comm_ms / step_ms)\n"
      "  low_mfu           median MFU < {:.0f}% of a bench's for the same device and precision "
      "(--calibration)\n"
      "  gpu_idle          mean GPU utilisation < {:.0f}% (GPU runs with NVML fields)\n"
      "  loss_spike        a step's loss > {:g}x the median of the {} steps before it\n"
      "  divergence        a NaN/inf loss, or the mean of the last {} losses > {:g}x the {} before them\n"
      "  preemption_loss   steps redone after preemptions or crashes (RUN_DIR/ledger.sqlite of `tern run`)\n"
      "  memory_headroom   the planner's memory model fits a {}x larger train.batch_size on the device\n"
      "  cheaper_instance  a catalog instance does the measured work >= {:.0f}% cheaper (peak FLOPs scaled)\n"
      "  forgetting        a data.mix dataset's val loss > {:.0f}% above its best evaluation (val_loss_mix)\n"
      "  data_fetch        fetching data.dir's s3:// dataset > {:.0f}% of fetch + training time (start "
      "rows)\n"
      "Findings are ranked by $ cost: $/h at the start row's price_per_hour, else $ already lost.",
      o.data_wait_fraction * 100, o.ckpt_stall_fraction * 100, o.comm_fraction * 100, o.mfu_ratio * 100,
      o.gpu_util_pct, o.spike_factor, o.spike_window, o.rising_window, o.rising_factor, o.rising_window,
      o.headroom_factor, o.cheaper_fraction * 100, o.forget_rise * 100, o.data_fetch_fraction * 100);
}

std::optional<Finding> DataBoundRule(const RunInput& run, const DiagnoseOptions& o) {
  double wait = 0, step = 0;
  for (const auto* s : SteadySteps(run)) {
    wait += s->data_wait_ms;
    step += s->step_ms;
  }
  if (step <= 0 || wait / step <= o.data_wait_fraction) return std::nullopt;
  Finding f = TimeFinding(run, "data_bound", wait / step);
  f.title = "data-bound: the trainer waits for the data loader";
  f.evidence = fmt::format(
      "data wait {:.1f}% of step time ({:.1f} of {:.1f} ms summed over the step rows; "
      "threshold {:.0f}%)",
      100 * wait / step, wait, step, 100 * o.data_wait_fraction);
  f.numbers = {{"data_wait_ms", wait}, {"step_ms", step}, {"threshold", o.data_wait_fraction}};
  f.fix =
      "keep the shards of `tern prepare` on local disk (data.dir on NVMe, not a network mount); if they are, "
      "raise train.batch_size (more compute per batch read) or train.seq_len";
  return f;
}

std::optional<Finding> CheckpointStallRule(const RunInput& run, const DiagnoseOptions& o) {
  double stall_ms = 0;
  int saves = 0;
  for (const auto& e : run.events) {
    if (e.event != "checkpoint") continue;
    stall_ms += e.Number("stall_ms");
    ++saves;
  }
  double train_s = TrainSeconds(run);
  if (saves == 0 || train_s <= 0) return std::nullopt;
  double frac = stall_ms / 1e3 / train_s;
  if (frac <= o.ckpt_stall_fraction) return std::nullopt;
  Finding f = TimeFinding(run, "checkpoint_stall", frac);
  f.title = "checkpoint stalls: training waits for saves";
  f.evidence = fmt::format("{} saves stalled training {:.2f} s of {:.1f} s ({:.1f}%; threshold {:.0f}%)",
                           saves, stall_ms / 1e3, train_s, 100 * frac, 100 * o.ckpt_stall_fraction);
  f.numbers = {
      {"saves", saves}, {"stall_ms", stall_ms}, {"train_s", train_s}, {"threshold", o.ckpt_stall_fraction}};
  f.fix =
      "ckpt.async: true (save from a snapshot while training goes on) and ckpt.every: auto (Young/Daly "
      "interval from the measured save cost)";
  return f;
}

std::optional<Finding> ExposedCommRule(const RunInput& run, const DiagnoseOptions& o) {
  double comm = 0, step = 0;
  for (const auto* s : SteadySteps(run)) {
    comm += s->comm_ms;
    step += s->step_ms;
  }
  if (step <= 0 || comm / step <= o.comm_fraction) return std::nullopt;
  Finding f = TimeFinding(run, "exposed_comm", comm / step);
  f.title = "exposed communication: ranks wait for gradients and weights";
  f.evidence = fmt::format(
      "communication waited for {:.1f}% of step time ({:.1f} of {:.1f} ms; threshold {:.0f}%; "
      "world {})",
      100 * comm / step, comm, step, 100 * o.comm_fraction, run.start ? run.start->world : 1);
  f.numbers = {{"comm_ms", comm}, {"step_ms", step}, {"threshold", o.comm_fraction}};
  f.fix =
      "overlap more: tune dist.bucket_mb (docs/distributed.md), raise train.batch_size or gradient "
      "accumulation (train.total_batch_tokens) so each all-reduce serves more compute, or fewer ranks on a "
      "faster interconnect (`tern plan`)";
  return f;
}

std::optional<Finding> LowMfuRule(const RunInput& run, const DiagnoseOptions& o) {
  if (!run.calibration || !run.start || run.calibration->mfu <= 0) return std::nullopt;
  const MfuCalibration& c = *run.calibration;
  if (c.device != run.start->device || c.precision != run.start->precision) return std::nullopt;
  std::vector<double> mfu;
  for (const auto* s : SteadySteps(run))
    if (s->mfu > 0) mfu.push_back(s->mfu);
  if (mfu.empty()) return std::nullopt;
  double m = Median(mfu);
  if (m >= o.mfu_ratio * c.mfu) return std::nullopt;
  Finding f = TimeFinding(run, "low_mfu", 1 - m / c.mfu);
  f.title = "MFU below the bench's for this device and precision";
  f.evidence = fmt::format(
      "median MFU {:.1f}% vs {:.1f}% in {} (batch {} seq {}; this run batch {} seq {}); "
      "threshold {:.0f}% of it",
      100 * m, 100 * c.mfu, c.file, c.batch, c.seq, run.start->batch_size, run.start->seq_len,
      100 * o.mfu_ratio);
  f.numbers = {{"mfu", m}, {"calibration_mfu", c.mfu}, {"calibration", c.file}, {"threshold", o.mfu_ratio}};
  f.fix = "run the bench's shape (train.batch_size, train.seq_len) or `tern plan --calibrate " + c.file +
          "` for the micro-batch that fits; check the other findings (data wait, communication) first";
  return f;
}

std::optional<Finding> GpuIdleRule(const RunInput& run, const DiagnoseOptions& o) {
  double sum = 0;
  int n = 0;
  for (const auto* s : SteadySteps(run)) {
    if (!s->gpu) continue;
    sum += s->gpu->util_pct;
    ++n;
  }
  if (n == 0 || sum / n >= o.gpu_util_pct) return std::nullopt;
  double util = sum / n;
  Finding f = TimeFinding(run, "gpu_idle", 1 - util / 100);
  f.title = "GPU idle: utilisation below threshold";
  f.evidence = fmt::format("mean GPU utilisation {:.0f}% over {} step rows (threshold {:.0f}%)", util, n,
                           o.gpu_util_pct);
  f.numbers = {{"util_pct", util}, {"rows", n}, {"threshold", o.gpu_util_pct}};
  f.fix =
      "see data_bound / checkpoint_stall / exposed_comm for where the time goes; else raise train.batch_size "
      "(larger kernels) — `tern plan` gives the micro-batch that fits";
  return f;
}

std::vector<Finding> LossRules(const RunInput& run, const DiagnoseOptions& o) {
  std::vector<Finding> out;
  const auto& st = run.steps;
  double spent_end = LastCost(run);
  // NaN or inf.
  for (const auto& s : st) {
    if (std::isfinite(s.loss)) continue;
    Finding f;
    f.rule = "divergence";
    f.title = "divergence: the loss is not finite";
    f.evidence = fmt::format("loss {} at step {}", s.loss, s.step);
    f.numbers = {{"step", s.step}, {"loss", nullptr}};
    double at = CostAt(run, s.step);
    if (at >= 0 && spent_end >= at) f.usd_spent = spent_end - at;
    f.fix =
        "lower train.lr or raise train.warmup_steps; keep train.grad_clip on (e.g. 1.0); resume from the "
        "last "
        "good checkpoint (`tern ckpt ls`)";
    out.push_back(f);
    return out;  // nothing after a NaN means anything
  }
  // Spikes: a loss > k x the median of the window before it.
  int spikes = 0, worst_step = -1;
  double worst_ratio = 0, worst_loss = 0, worst_median = 0;
  for (size_t i = static_cast<size_t>(o.spike_window); i < st.size(); ++i) {
    std::vector<double> w;
    for (size_t j = i - o.spike_window; j < i; ++j) w.push_back(st[j].loss);
    double med = Median(w);
    if (med <= 0 || st[i].loss <= o.spike_factor * med) continue;
    ++spikes;
    if (st[i].loss / med > worst_ratio) {
      worst_ratio = st[i].loss / med;
      worst_step = st[i].step;
      worst_loss = st[i].loss;
      worst_median = med;
    }
  }
  if (spikes > 0) {
    Finding f;
    f.rule = "loss_spike";
    f.title = "loss spikes";
    f.evidence = fmt::format(
        "{} step(s) with loss > {:g}x the median of the {} before; worst at step {}: {:.3f} vs "
        "median {:.3f} ({:.1f}x)",
        spikes, o.spike_factor, o.spike_window, worst_step, worst_loss, worst_median, worst_ratio);
    f.numbers = {{"spikes", spikes},
                 {"worst_step", worst_step},
                 {"worst_loss", worst_loss},
                 {"median", worst_median},
                 {"factor", o.spike_factor}};
    f.fix =
        "lower train.lr, keep train.grad_clip (e.g. 1.0), or raise train.warmup_steps; with fp16 prefer "
        "train.precision: bf16";
    out.push_back(f);
  }
  // Rising: the mean of the last N losses > factor x the mean of the N before them.
  size_t n = static_cast<size_t>(o.rising_window);
  if (n > 0 && st.size() >= 2 * n) {
    double last = 0, prev = 0;
    for (size_t i = st.size() - n; i < st.size(); ++i) last += st[i].loss / n;
    for (size_t i = st.size() - 2 * n; i < st.size() - n; ++i) prev += st[i].loss / n;
    if (prev > 0 && last > o.rising_factor * prev) {
      Finding f;
      f.rule = "divergence";
      f.title = "divergence: the loss is rising";
      int from = st[st.size() - n].step;
      f.evidence = fmt::format(
          "mean loss of the last {} step rows {:.3f} vs {:.3f} for the {} before ({:.2f}x; "
          "threshold {:g}x)",
          n, last, prev, n, last / prev, o.rising_factor);
      f.numbers = {{"last_mean", last}, {"previous_mean", prev}, {"window", n}, {"from_step", from}};
      double at = CostAt(run, from);
      if (at >= 0 && spent_end >= at) f.usd_spent = spent_end - at;
      f.fix = "lower train.lr or raise train.warmup_steps; resume from a checkpoint before step " +
              std::to_string(from) + " (`tern ckpt ls`)";
      out.push_back(f);
    }
  }
  return out;
}

std::optional<Finding> PreemptionLossRule(const RunInput& run, const DiagnoseOptions&) {
  int steps = 0, attempts = 0;
  double lost_s = 0, lost_usd = 0;
  for (const auto& a : run.attempts) {
    if (a.lost_steps <= 0 && a.lost_usd <= 0) continue;
    steps += a.lost_steps;
    lost_s += a.lost_s;
    lost_usd += a.lost_usd;
    ++attempts;
  }
  if (attempts == 0) return std::nullopt;
  Finding f;
  f.rule = "preemption_loss";
  f.title = "work lost to preemptions and restarts";
  f.evidence = fmt::format("{} attempt(s) of {} redid {} steps: {:.0f} s, ${:.4f} (RUN_DIR/ledger.sqlite)",
                           attempts, run.attempts.size(), steps, lost_s, lost_usd);
  f.numbers = {{"attempts", attempts}, {"lost_steps", steps}, {"lost_s", lost_s}, {"lost_usd", lost_usd}};
  f.usd_spent = lost_usd;
  f.fix =
      "ckpt.every: auto (Young/Daly from the measured save cost and ckpt.mtbf), ckpt.on_notice with a "
      "preemption notice (ckpt.notice_kind), or on-demand billing (`tern plan` compares spot and on-demand)";
  return f;
}

// data.mix: a mixed-in dataset (the old data replayed during a fine-tune, typically) whose validation loss
// climbed back above its best evaluation: the model is forgetting it. One finding, the worst dataset's.
std::optional<Finding> ForgettingRule(const RunInput& run, const DiagnoseOptions& o) {
  if (run.evals.size() < 2) return std::nullopt;
  std::optional<Finding> worst;
  double worst_rise = o.forget_rise;
  for (const auto& [dir, last] : run.evals.back().val_loss_mix) {
    double best = last;
    int best_step = run.evals.back().step;
    double dir_val_then = run.evals.back().val_loss;
    for (const EvalRecord& e : run.evals) {
      for (const auto& [d, loss] : e.val_loss_mix) {
        if (d == dir && loss < best) {
          best = loss;
          best_step = e.step;
          dir_val_then = e.val_loss;
        }
      }
    }
    if (best <= 0 || last / best - 1 <= worst_rise) continue;
    worst_rise = last / best - 1;
    const EvalRecord& end = run.evals.back();
    Finding f;
    f.rule = "forgetting";
    f.title = "forgetting: a mixed-in dataset's validation loss is rising";
    f.evidence = fmt::format(
        "{}: val loss {:.4f} at step {} vs its best {:.4f} at step {} (+{:.1f}%; threshold {:.0f}%), while "
        "data.dir's went {:.4f} -> {:.4f}",
        dir, last, end.step, best, best_step, 100 * worst_rise, 100 * o.forget_rise, dir_val_then,
        end.val_loss);
    f.numbers = {{"dataset", dir},         {"val_loss", last},   {"best", best},
                 {"best_step", best_step}, {"rise", worst_rise}, {"threshold", o.forget_rise}};
    const double at = CostAt(run, best_step), spent_end = LastCost(run);
    if (at >= 0 && spent_end >= at) f.usd_spent = spent_end - at;
    f.fix = fmt::format(
        "raise {}'s share in data.mix (more of it in every batch) or lower train.lr; the weights at step {} "
        "were its best (a checkpoint near it: `tern ckpt ls`)",
        dir, best_step);
    worst = f;
  }
  return worst;
}

// data.dir on S3: the attempts' fetches before their first steps. Several attempts that each fetched mean the
// copy did not outlive the machine (or its disk); one long fetch means a slow link for the data's size.
std::optional<Finding> DataFetchRule(const RunInput& run, const DiagnoseOptions& o) {
  const double train_s = TrainSeconds(run);
  const double total = train_s + run.data_fetch_s;
  if (run.data_fetch_attempts == 0 || total <= 0) return std::nullopt;
  const double frac = run.data_fetch_s / total;
  if (frac <= o.data_fetch_fraction) return std::nullopt;
  Finding f;
  f.rule = "data_fetch";
  f.title = "fetching the data from S3 takes a share of the run";
  const double mb_s = run.data_fetch_s > 0 ? run.data_fetch_bytes / 1e6 / run.data_fetch_s : 0;
  f.evidence = fmt::format(
      "{} of {} attempt(s) fetched data.dir: {:.1f} MB in {:.1f} s ({:.1f} MB/s), {:.1f}% of fetch + "
      "training "
      "time {:.1f} s (threshold {:.0f}%)",
      run.data_fetch_attempts, run.attempts_started, run.data_fetch_bytes / 1e6, run.data_fetch_s, mb_s,
      100 * frac, total, 100 * o.data_fetch_fraction);
  f.numbers = {{"fetch_s", run.data_fetch_s},
               {"fetch_bytes", run.data_fetch_bytes},
               {"fetch_attempts", run.data_fetch_attempts},
               {"attempts", run.attempts_started},
               {"train_s", train_s},
               {"threshold", o.data_fetch_fraction}};
  f.usd_spent = run.start ? run.start->price_per_hour * run.data_fetch_s / 3600 : 0;
  f.fix = run.data_fetch_attempts > 1
              ? "keep the copy across relaunches: data.cache_dir on a disk that outlives the instance (an "
                "attached volume, a shared filesystem under Slurm), so later attempts fetch nothing"
              : "an instance with more network bandwidth (tern plan prices the fetch: data_fetch_gbps), or "
                "data.dir on the machine's disk for runs this short";
  return f;
}

std::vector<Finding> Diagnose(const RunInput& run, const DiagnoseOptions& o) {
  std::vector<Finding> out;
  for (auto* rule :
       {DataBoundRule, CheckpointStallRule, ExposedCommRule, LowMfuRule, GpuIdleRule, PreemptionLossRule,
        MemoryHeadroomRule, CheaperInstanceRule, ForgettingRule, DataFetchRule})
    if (auto f = rule(run, o)) out.push_back(std::move(*f));
  for (auto& f : LossRules(run, o)) out.push_back(std::move(f));
  std::stable_sort(out.begin(), out.end(), [](const Finding& a, const Finding& b) {
    if (a.RankUsd() != b.RankUsd()) return a.RankUsd() > b.RankUsd();
    return a.step_fraction > b.step_fraction;
  });
  return out;
}

nlohmann::json ToJson(const Finding& f) {
  return {{"rule", f.rule},
          {"title", f.title},
          {"evidence", f.evidence},
          {"numbers", f.numbers},
          {"step_fraction", f.step_fraction},
          {"usd_per_hour", f.usd_per_hour},
          {"usd_spent", f.usd_spent},
          {"fix", f.fix}};
}

std::string FormatFindings(const RunInput& run, const std::vector<Finding>& findings) {
  std::string s = fmt::format("{}: {} step rows", run.run_dir, run.steps.size());
  if (run.start)
    s += fmt::format(", {} {} {}, ${:.2f}/h", run.start->model, run.start->device, run.start->precision,
                     run.start->price_per_hour);
  s += "\n";
  if (findings.empty())
    return s + "no findings: every rule is within its threshold (`tern diagnose --help`)\n";
  int i = 0;
  for (const auto& f : findings) {
    s += fmt::format("\n{}. [{}] {}\n   evidence: {}\n", ++i, f.rule, f.title, f.evidence);
    if (f.step_fraction > 0)
      s += fmt::format("   cost: {:.1f}% of step time, ${:.4f}/h at the run's price\n", 100 * f.step_fraction,
                       f.usd_per_hour);
    if (f.usd_spent > 0) s += fmt::format("   cost: ${:.4f} spent\n", f.usd_spent);
    s += fmt::format("   fix: {}\n", f.fix);
  }
  return s;
}

}  // namespace tern::report
