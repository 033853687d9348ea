// The live spot policy (`tern run --policy uniform-progress`, run/live_policy.h) against a spot market
// replayed from a trace on a fake clock, with an in-process fake trainer that makes one step every
// kStepS seconds of that clock after a start-up of d: the supervisor's decisions (its switches table) are
// the simulator's (plan/spot_sim.h) on the same trace, job and deadline, and a hand-made trace with one
// outage gives the hand-computed switches, attempts and bill.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "plan/spot_sim.h"
#include "run/job_book.h"
#include "run/supervisor.h"
#include "run/supervisor_test_util.h"

namespace tern::run {
namespace {

using plan::Cluster;

// The trainer's state across attempts: the step its last checkpoint holds, and the job's shape.
struct FakeJob {
  Clock* clock = nullptr;
  std::string metrics;
  int total_steps = 0;
  double step_s = 60, startup_s = 300;
  int saved_step = 0;
  int launches = 0;
};

// One attempt of the fake trainer: after the start-up, a step row every step_s of the clock; a signal is
// the spot notice (it saves at once and exits 75); done at the last step (exit 0).
class FakeTrainer : public TrainerProcess {
 public:
  explicit FakeTrainer(FakeJob* job) : job_(job), launch_(job->clock->Now()), first_(job->saved_step) {
    step_ = first_;
    if (step_ > 0) Append(fmt::format(R"({{"event":"resume","step":{}}})", step_));
  }
  pid_t pid() const override { return 0x3ffffff0; }  // no such process: nothing outside is signalled
  std::string start_time() const override { return "fake"; }
  std::optional<ExitStatus> Poll() override {
    Advance();
    return exit_;
  }
  void Signal(int) override {
    Advance();
    if (exit_) return;
    job_->saved_step = step_;
    Append(fmt::format(R"({{"event":"preempted","step":{},"save_s":0}})", step_));
    exit_ = ExitStatus{75, 0};
  }
  void Kill() override {
    if (!exit_) exit_ = ExitStatus{-1, 9};
  }

 private:
  void Append(const std::string& line) { std::ofstream(job_->metrics, std::ios::app) << line << "\n"; }
  void Advance() {
    if (exit_) return;
    const double now = job_->clock->Now();
    while (step_ < job_->total_steps) {
      const double at = launch_ + job_->startup_s + (step_ - first_ + 1) * job_->step_s;
      if (at > now + 1e-6) break;
      step_++;
      Append(fmt::format(R"({{"step":{},"loss":1.5,"tokens":{},"step_ms":{},"elapsed_s":{}}})", step_,
                         step_ * 128, job_->step_s * 1e3, at - launch_));
    }
    if (step_ >= job_->total_steps) {
      job_->saved_step = step_;
      exit_ = ExitStatus{0, 0};
    }
  }
  FakeJob* job_;
  double launch_;
  int first_, step_;
  std::optional<ExitStatus> exit_;
};

class FakeLauncher : public Launcher {
 public:
  explicit FakeLauncher(FakeJob* job) : job_(job) {}
  Result<std::unique_ptr<TrainerProcess>> Launch(const LaunchSpec&) override {
    job_->launches++;
    return std::unique_ptr<TrainerProcess>(new FakeTrainer(job_));
  }

 private:
  FakeJob* job_;
};

// A switch at a time since the start (hours).
struct Switch {
  double t_h;
  std::string from, to;
};
std::ostream& operator<<(std::ostream& os, const Switch& s) {
  return os << fmt::format("{:.4f} h {} -> {}", s.t_h, s.from, s.to);
}
bool operator==(const Switch& a, const Switch& b) {
  return std::abs(a.t_h - b.t_h) < 1e-6 && a.from == b.from && a.to == b.to;
}

// The simulator's decisions as switches: each tick whose cluster differs from the tick before's.
std::vector<Switch> SimSwitches(const std::vector<Cluster>& decisions, double gap_h) {
  std::vector<Switch> out;
  Cluster prev = Cluster::kNone;
  for (size_t i = 0; i < decisions.size(); i++) {
    if (decisions[i] != prev)
      out.push_back(
          {i * gap_h, std::string(plan::ClusterName(prev)), std::string(plan::ClusterName(decisions[i]))});
    prev = decisions[i];
  }
  return out;
}

class LivePolicyTest : public SupervisorTest {
 public:
  static constexpr double kSpotPrice = 1, kOnDemandPrice = 3;

  // The same job in a fresh run directory and ledger named `name`.
  Result<JobOutcome> Run(const plan::SpotTrace& trace, size_t start_tick, int steps, double step_s,
                         double startup_s, double deadline_h, const std::string& name) {
    spec_.run_dir = (dir_ / ("run-" + name)).string();
    ledger_path_ = (dir_ / ("home-" + name) / "ledger.sqlite").string();
    return SuperviseOnTrace(trace, start_tick, steps, step_s, startup_s, fmt::format("{}h", deadline_h),
                            step_s);
  }
  std::vector<Switch> Live(const std::string& job_id) {
    const std::vector<SwitchRow> rows = LedgerSwitches(job_id);
    for (const SwitchRow& r : rows) whys.push_back(r.why);
    return LiveSwitches(rows);
  }
  std::vector<std::string> whys;  // every switch's reason, over the jobs run

 protected:
  // Supervises a job of `steps` steps of `step_s` with start-up `startup_s` under Uniform Progress, on
  // `trace` from `start_tick`, deciding every trace tick; the clock moves `poll_s` per look.
  Result<JobOutcome> SuperviseOnTrace(const plan::SpotTrace& trace, size_t start_tick, int steps,
                                      double step_s, double startup_s, const std::string& deadline,
                                      double poll_s) {
    FakeClock clock(1.7e9, 0);
    job_.clock = &clock;
    job_.metrics = spec_.run_dir + "/metrics.jsonl";
    job_.total_steps = steps;
    job_.step_s = step_s;
    job_.startup_s = startup_s;
    job_.saved_step = 0;
    spec_.total_steps = steps;
    spec_.policy = "uniform-progress";
    spec_.deadline = deadline;
    spec_.restart_overhead_s = startup_s;
    spec_.policy_tick_s = trace.gap_s;
    spec_.spot_price_per_hour = kSpotPrice;
    spec_.ondemand_price_per_hour = kOnDemandPrice;
    spec_.max_attempts = 10000;
    TraceSpotMarket market(trace, clock.Now(), start_tick);
    FakeLauncher launcher(&job_);
    SupervisorOptions o;
    o.spec = spec_;
    o.trainer = {"fake-trainer"};
    o.ledger_path = ledger_path_;
    o.poll_s = poll_s;
    o.save_every_s = 1e9;
    o.handle_signals = false;
    o.echo_trainer = false;
    o.console = nullptr;
    o.market = &market;
    start_unix_ = clock.Now();
    Supervisor s(o, &clock, &launcher);
    return s.Run();
  }

  std::vector<SwitchRow> LedgerSwitches(const std::string& job_id) {
    auto ledger = Ledger::Open(RunDirLedgerPath(spec_.run_dir));
    EXPECT_TRUE(ledger.ok()) << ledger.status().ToString();
    auto rows = (*ledger)->Switches(job_id);
    EXPECT_TRUE(rows.ok()) << rows.status().ToString();
    return rows.ok() ? *rows : std::vector<SwitchRow>{};
  }

  std::vector<Switch> LiveSwitches(const std::vector<SwitchRow>& rows) {
    std::vector<Switch> out;
    for (const SwitchRow& r : rows) out.push_back({(r.at_unix - start_unix_) / 3600, r.from, r.to});
    return out;
  }

  FakeJob job_;
  double start_unix_ = 0;
};

plan::SpotTrace HandTrace(std::vector<uint8_t> up, double gap_s) {
  plan::SpotTrace t;
  t.zone = "hand-1a";
  t.gap_s = gap_s;
  t.up = std::move(up);
  return t;
}

// One outage: spot up for 2 h, down for 3 h, then up. 4 h of work (240 steps of 60 s), d = 6 min, deadline
// 8 h, a decision every hour. By hand (ep(t) = 4 h x t / 8 h, the straight line):
//   0 h  spot is up: spot                                              none -> spot
//   2 h  preempted with 1.9 h done (2 h less d); 1.9 >= ep(2) = 1: wait     spot -> none
//   3 h  1.9 >= ep(3) = 1.5: wait
//   4 h  1.9 < ep(4) = 2: on-demand                                    none -> on-demand
//   5 h  2.8 done >= ep(5 + 2d) = 2.6 and spot is up: spot             on-demand -> spot
//   6.3 h done: d, then the 1.2 h of work left
// Attempts: spot 2 h ($2), on-demand 1 h ($3), spot 1.3 h ($1.30): $6.30 against on-demand's $12.30.
TEST_F(LivePolicyTest, OneOutageGivesTheHandComputedSwitchesAttemptsAndBill) {
  const plan::SpotTrace trace = HandTrace({1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1}, 3600);
  auto out = SuperviseOnTrace(trace, 0, 240, 60, 360, "8h", 60);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->exit_code, kRunDone);
  const std::vector<SwitchRow> rows = LedgerSwitches(out->job.job_id);
  const std::vector<Switch> want = {
      {0, "none", "spot"}, {2, "spot", "none"}, {4, "none", "on-demand"}, {5, "on-demand", "spot"}};
  EXPECT_EQ(LiveSwitches(rows), want);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_NE(rows[1].why.find("preempted"), std::string::npos) << rows[1].why;
  EXPECT_NE(rows[2].why.find("behind the straight line"), std::string::npos) << rows[2].why;
  EXPECT_EQ(rows[3].attempt, 2) << "decided while attempt 2 ran on on-demand";
  ASSERT_EQ(out->attempts.size(), 3u);
  const std::vector<std::string> reasons = {"preempted", "switch", "done"};
  const std::vector<std::string> billing = {"spot", "on-demand", "spot"};
  const std::vector<double> wall_h = {2, 1, 1.3};
  const std::vector<int> last_step = {114, 168, 240};
  double cost = 0;
  for (size_t i = 0; i < 3; i++) {
    const AttemptRow& a = out->attempts[i];
    EXPECT_EQ(a.reason, reasons[i]) << i;
    EXPECT_EQ(a.billing, billing[i]) << i;
    EXPECT_NEAR(a.wall_s / 3600, wall_h[i], 1e-9) << i;
    EXPECT_EQ(a.last_step, last_step[i]) << i;
    EXPECT_DOUBLE_EQ(a.price_per_hour, billing[i] == "spot" ? kSpotPrice : kOnDemandPrice) << i;
    cost += a.cost_usd;
  }
  EXPECT_NEAR(cost, 6.30, 1e-9);
  EXPECT_NEAR(out->attempts[1].start_unix - start_unix_, 4 * 3600, 1e-6) << "waited for spot 2 h -> 4 h";
  // The simulator agrees on the same trace and job.
  plan::SimJob sj;
  sj.work_h = 4;
  sj.deadline_h = 8;
  sj.restart_h = 0.1;
  sj.spot_usd_h = kSpotPrice;
  sj.ondemand_usd_h = kOnDemandPrice;
  std::vector<Cluster> decisions;
  const plan::SimRun sim = plan::Simulate(trace, 0, sj, plan::SpotPolicy::kUniformProgress, &decisions);
  EXPECT_EQ(SimSwitches(decisions, 1), want);
  EXPECT_NEAR(sim.cost_usd, cost, 1e-9);
  EXPECT_NEAR(sim.wall_h, 6.3, 1e-9);
}

// One job on a shipped trace (195 s ticks) from `start`: 222 steps of 65 s (4.0 h of work), d = 390 s (two
// ticks), a decision every tick. The live policy's switches must be the simulator's, one for one at the same
// times, and its bill the simulator's. Returns the simulator's switches.
std::vector<Switch> ExpectSameAsSimulator(LivePolicyTest* t, const std::string& zone, size_t start,
                                          double deadline_h) {
  SCOPED_TRACE(fmt::format("{} from tick {}, deadline {} h", zone, start, deadline_h));
  const char* src = std::getenv("TERN_SOURCE_DIR");
  const std::string file = std::string(src ? src : TERN_TEST_SOURCE_DIR) +
                           "/data/spot-traces/availability/1-node/aws-02-15-2023/" + zone + "_v100_1.json";
  auto traces = plan::LoadSpotTraces({file}, plan::Polarity::kAvailableIfNonzero);
  EXPECT_TRUE(traces.ok()) << traces.status().ToString();
  if (!traces.ok()) return {};
  const plan::SpotTrace& trace = traces->front();
  EXPECT_EQ(trace.gap_s, 195);
  const int steps = 222;
  const double step_s = 65, d = 390;
  plan::SimJob sj;
  sj.work_h = steps * step_s / 3600;
  sj.deadline_h = deadline_h;
  sj.restart_h = d / 3600;
  sj.spot_usd_h = LivePolicyTest::kSpotPrice;
  sj.ondemand_usd_h = LivePolicyTest::kOnDemandPrice;
  std::vector<Cluster> decisions;
  const plan::SimRun sim = plan::Simulate(trace, start, sj, plan::SpotPolicy::kUniformProgress, &decisions);
  EXPECT_TRUE(sim.met_deadline);
  const std::vector<Switch> want = SimSwitches(decisions, trace.gap_h());
  auto out =
      t->Run(trace, start, steps, step_s, d, deadline_h, fmt::format("{}-{}-{}", zone, start, deadline_h));
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  if (!out.ok()) return want;
  EXPECT_EQ(out->exit_code, kRunDone);
  EXPECT_EQ(t->Live(out->job.job_id), want);
  double cost = 0;
  for (const AttemptRow& a : out->attempts) cost += a.cost_usd;
  EXPECT_NEAR(cost, sim.cost_usd, 1e-6) << "billed as the simulator bills";
  return want;
}

size_t Count(const std::vector<Switch>& switches, const std::string& to) {
  return static_cast<size_t>(
      std::count_if(switches.begin(), switches.end(), [&](const Switch& s) { return s.to == to; }));
}

// The shipped traces (45 days of p3.2xlarge in 9 zones): from three starts in three zones of different
// availability (17%, 59%, 90% of the time), an 8 h deadline.
TEST_F(LivePolicyTest, SameSwitchesAsTheSimulatorOnShippedTraces) {
  size_t compared = 0, ondemand = 0;
  for (const char* zone : {"us-east-1a", "us-east-1f", "us-west-2b"}) {
    for (size_t start : {size_t{0}, size_t{6719}, size_t{13438}}) {
      const std::vector<Switch> s = ExpectSameAsSimulator(this, zone, start, 8);
      compared += s.size();
      ondemand += Count(s, "on-demand");
    }
  }
  std::printf("compared %zu switches, %zu to on-demand\n", compared, ondemand);
  EXPECT_GT(compared, 20u) << "the starts chosen exercise the policy";
  EXPECT_GT(ondemand, 2u) << "and its on-demand rules";
}

// A deadline of 4.5 h for the 4 h of work: the safety net (work left + 2d + a tick) takes over.
TEST_F(LivePolicyTest, SameSwitchesAsTheSimulatorUnderATightDeadline) {
  size_t compared = 0, ondemand = 0;
  for (const char* zone : {"us-east-1a", "us-east-1f"}) {
    for (size_t start : {size_t{0}, size_t{6719}, size_t{13438}}) {
      const std::vector<Switch> s = ExpectSameAsSimulator(this, zone, start, 4.5);
      compared += s.size();
      ondemand += Count(s, "on-demand");
    }
  }
  const size_t net = static_cast<size_t>(std::count_if(whys.begin(), whys.end(), [](const std::string& w) {
    return w.find("safety net") != std::string::npos;
  }));
  std::printf("compared %zu switches, %zu to on-demand, %zu by the safety net\n", compared, ondemand, net);
  EXPECT_GT(ondemand, 2u);
  EXPECT_GT(net, 0u) << "the safety net took the job to on-demand";
}

}  // namespace
}  // namespace tern::run
