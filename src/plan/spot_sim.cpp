#include "plan/spot_sim.h"

#include <algorithm>
#include <cmath>

#include "plan/cost.h"

namespace tern::plan {

namespace {

constexpr double kEps = 1e-9;

// One job's state while it is replayed.
struct SimState {
  Cluster on = Cluster::kNone;
  double saved_h = 0, unsaved_h = 0;  // progress: safe in a checkpoint / since the last save
  double restart_left_h = 0, save_left_h = 0;
  double done() const { return saved_h + unsaved_h; }
};

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

}  // namespace

double SimIntervalHours(const SimJob& job, const SpotTrace& trace) {
  if (job.interval_h > 0) return job.interval_h;
  if (job.checkpoint_h <= 0) return 0;  // saves are free: the emergency save always fits
  const double mtbf_h = EstimateHazard(trace).mtbf_h;
  return YoungDalyIntervalSeconds(job.checkpoint_h * 3600, mtbf_h * 3600) / 3600;
}

SimRun Simulate(const SpotTrace& trace, size_t start_tick, const SimJob& job, SpotPolicy policy,
                std::vector<Cluster>* decisions) {
  if (policy == SpotPolicy::kOmniscient) return OmniscientBound(trace, start_tick, job);
  SimRun run;
  SimState s;
  PolicyRunner runner(policy);
  const double g = trace.gap_h();
  const double interval = SimIntervalHours(job, trace);
  const bool emergency_save_fits = job.checkpoint_h <= job.notice_h;
  const double horizon = 3 * std::max(job.deadline_h, job.work_h);
  for (size_t i = 0; i * g < horizon; i++) {
    const double t = static_cast<double>(i) * g;
    const bool up = trace.Up(start_tick + i);
    if (s.on == Cluster::kSpot && !up) {  // preempted at this tick
      run.preemptions++;
      if (emergency_save_fits) {
        s.saved_h += s.unsaved_h;
      } else {
        run.lost_h += s.unsaved_h;
      }
      s.unsaved_h = 0;
      s.restart_left_h = s.save_left_h = 0;
      s.on = Cluster::kNone;
    }
    PolicyView v;
    v.t_h = t;
    v.deadline_h = job.deadline_h;
    v.work_h = job.work_h;
    v.done_h = s.done();
    v.at_risk_h = emergency_save_fits ? 0 : s.unsaved_h;
    v.restart_h = job.restart_h;
    v.switch_h = job.checkpoint_h;
    v.tick_h = g;
    v.current = s.on;
    v.spot_up = up;
    Cluster next = runner.Decide(v);
    if (next == Cluster::kSpot && !up) next = Cluster::kNone;
    if (decisions) decisions->push_back(next);
    if (next != s.on) {
      double save = 0;
      if (s.on != Cluster::kNone && s.unsaved_h > 0) {  // leave with a save: nothing is lost
        s.saved_h += s.unsaved_h;
        s.unsaved_h = 0;
        save = job.checkpoint_h;
      }
      s.on = next;
      s.save_left_h = 0;
      s.restart_left_h = next == Cluster::kNone ? 0 : job.restart_h + save;
      if (next != Cluster::kNone) run.switches++;
    }
    if (s.on == Cluster::kNone) continue;
    // One tick on an instance: restart, then work with saves every `interval` of work on spot.
    double left = g;
    bool finished = false;
    while (left > kEps && !finished) {
      if (s.restart_left_h > 0) {
        const double u = std::min(left, s.restart_left_h);
        s.restart_left_h -= u;
        left -= u;
        run.restart_h += u;
      } else if (s.save_left_h > 0) {
        const double u = std::min(left, s.save_left_h);
        s.save_left_h -= u;
        left -= u;
        run.checkpoint_h += u;
        if (s.save_left_h <= kEps) {
          s.saved_h += s.unsaved_h;
          s.unsaved_h = 0;
        }
      } else {
        double cap = job.work_h - s.done();
        const bool periodic = s.on == Cluster::kSpot && interval > 0;
        if (periodic) cap = std::min(cap, interval - s.unsaved_h);
        const double u = std::min(left, std::max(cap, 0.0));
        s.unsaved_h += u;
        left -= u;
        if (s.done() >= job.work_h - kEps) {
          finished = true;
        } else if (periodic && s.unsaved_h >= interval - kEps) {
          s.save_left_h = job.checkpoint_h;
          if (s.save_left_h <= 0) {
            s.saved_h += s.unsaved_h;
            s.unsaved_h = 0;
          }
        }
      }
    }
    const double used = g - left;
    if (s.on == Cluster::kSpot) {
      run.spot_h += used;
      run.cost_usd += used * job.spot_usd_h;
    } else {
      run.ondemand_h += used;
      run.cost_usd += used * job.ondemand_usd_h;
    }
    if (finished) {
      run.finished = true;
      run.wall_h = t + used;
      run.met_deadline = run.wall_h <= job.deadline_h + kEps;
      return run;
    }
  }
  run.wall_h = horizon;
  return run;
}

SimRun OmniscientBound(const SpotTrace& trace, size_t start_tick, const SimJob& job) {
  SimRun run;
  const double g = trace.gap_h();
  double spot_up_h = 0;
  for (size_t i = 0; static_cast<double>(i) * g < job.deadline_h; i++)
    if (trace.Up(start_tick + i)) spot_up_h += g;
  run.spot_h = std::min(job.work_h, spot_up_h);
  run.ondemand_h = job.work_h - run.spot_h;
  run.cost_usd = run.spot_h * job.spot_usd_h + run.ondemand_h * job.ondemand_usd_h;
  run.finished = run.met_deadline = job.work_h + job.restart_h <= job.deadline_h + kEps;
  run.wall_h = run.met_deadline ? job.deadline_h : 3 * job.deadline_h;
  return run;
}

namespace {

// Runs of one policy, summarised.
SimStats Summarise(const std::vector<SimRun>& runs) {
  SimStats st;
  std::vector<double> costs, walls;
  double spot_h = 0, billed_h = 0;
  int misses = 0;
  for (const SimRun& r : runs) {
    costs.push_back(r.cost_usd);
    walls.push_back(r.wall_h);
    misses += r.met_deadline ? 0 : 1;
    st.mean_preemptions += r.preemptions;
    st.mean_lost_h += r.lost_h;
    st.mean_cost += r.cost_usd;
    st.mean_wall_h += r.wall_h;
    spot_h += r.spot_h;
    billed_h += r.spot_h + r.ondemand_h;
  }
  const double k = static_cast<double>(std::max<size_t>(1, runs.size()));
  st.runs = static_cast<int>(runs.size());
  st.mean_cost /= k;
  st.mean_wall_h /= k;
  st.p50_cost = Percentile(costs, 0.5);
  st.p95_cost = Percentile(costs, 0.95);
  st.p95_wall_h = Percentile(walls, 0.95);
  st.miss_rate = misses / k;
  st.mean_preemptions /= k;
  st.mean_lost_h /= k;
  st.spot_share = billed_h > 0 ? spot_h / billed_h : 0;
  return st;
}

std::vector<SimRun> RunStarts(const SpotTrace& trace, const SimJob& job, SpotPolicy p, int starts) {
  const size_t n = trace.ticks();
  const size_t k = static_cast<size_t>(std::max(1, starts));
  std::vector<SimRun> runs;
  runs.reserve(k);
  for (size_t i = 0; i < k; i++) runs.push_back(Simulate(trace, i * n / k, job, p));
  return runs;
}

}  // namespace

std::vector<SimStats> SimulateStarts(const SpotTrace& trace, const SimJob& job,
                                     const std::vector<SpotPolicy>& policies, int starts) {
  std::vector<SimStats> out;
  double ondemand_mean = 0;
  for (SpotPolicy p : policies) {
    SimStats st = Summarise(RunStarts(trace, job, p, starts));
    st.zone = trace.zone;
    st.polarity = trace.polarity;
    st.policy = p;
    if (p == SpotPolicy::kOnDemand) ondemand_mean = st.mean_cost;
    out.push_back(st);
  }
  // On-demand's cost does not depend on the trace: the comparison needs no simulated on-demand row.
  if (ondemand_mean <= 0) ondemand_mean = (job.work_h + job.restart_h) * job.ondemand_usd_h;
  for (auto& st : out) st.vs_ondemand = ondemand_mean > 0 ? st.mean_cost / ondemand_mean : 0;
  return out;
}

SimStats SimulatePooled(const std::vector<const SpotTrace*>& traces, const SimJob& job, SpotPolicy policy,
                        int starts) {
  std::vector<SimRun> runs;
  for (const SpotTrace* t : traces) {
    std::vector<SimRun> r = RunStarts(*t, job, policy, starts);
    runs.insert(runs.end(), r.begin(), r.end());
  }
  SimStats st = Summarise(runs);
  st.policy = policy;
  if (traces.size() == 1) {
    st.zone = traces.front()->zone;
  } else {
    st.zone = std::to_string(traces.size()) + " zones";
  }
  if (!traces.empty()) st.polarity = traces.front()->polarity;
  const double ondemand = (job.work_h + job.restart_h) * job.ondemand_usd_h;
  st.vs_ondemand = ondemand > 0 ? st.mean_cost / ondemand : 0;
  return st;
}

}  // namespace tern::plan
