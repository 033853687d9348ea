// The whole-run model (run_model.h) against hand-counted schedules and hand-computed seconds.
#include <gtest/gtest.h>

#include "plan/run_model.h"

namespace tern::plan {
namespace {

// configs/demo.yaml with train.steps=150: eval every 100, 16 batches of 16x128, 3 samples of 60 tokens at
// the end, fast tier every 100, durable every 300, best tier with k=2.
TrainRunSpec Demo150() {
  TrainRunSpec s;
  s.config_file = "demo.yaml";
  s.steps = 150;
  s.micro_batch = 16;
  s.seq = 128;
  s.grad_accum = 2;
  s.eval_every = 100;
  s.eval_batches = 16;
  s.sample_tokens = 60;
  s.num_samples = 3;
  s.ckpt_every = 100;
  s.durable_every = 300;
  s.best_k = 2;
  return s;
}

TEST(RunModel, ScheduleFollowsTheTrainerLoop) {
  const RunSchedule r = ScheduleRun(Demo150());
  EXPECT_EQ(r.evals, 2);  // steps 100 and 150 (the last)
  EXPECT_EQ(r.samples_during, 0);
  EXPECT_EQ(r.samples_end, 3);
  ASSERT_EQ(r.saves.size(), 2u);
  EXPECT_EQ(r.saves[0].step, 100);
  EXPECT_EQ(r.saves[0].tiers, 2);  // fast (every 100) + best (an evaluation)
  EXPECT_EQ(r.saves[1].step, 150);
  EXPECT_EQ(r.saves[1].tiers, 3);  // the last step saves to every periodic tier, and it evaluates: best too
  EXPECT_EQ(r.tier_writes(), 5);

  TrainRunSpec s = Demo150();
  s.eval_every = 0;  // only at the end
  s.sample_every = 50;
  s.ckpt_every = 0;  // no periodic saves, no final one either
  s.durable_every = 0;
  s.best_k = 0;
  const RunSchedule q = ScheduleRun(s);
  EXPECT_EQ(q.evals, 1);
  EXPECT_EQ(q.samples_during, 2);  // steps 50 and 100; never at the last step
  EXPECT_EQ(q.sample_calls(), 3);  // + one call for the 3 samples at the end
  EXPECT_TRUE(q.saves.empty());
  s.sample_tokens = 500;  // capped by the 128-token context
  EXPECT_EQ(ScheduleRun(s).sample_tokens, 127);
}

TEST(RunModel, SecondsByHand) {
  TrainRunSpec s;
  s.steps = 10;
  s.micro_batch = 4;
  s.seq = 50;
  s.eval_every = 5;
  s.eval_batches = 2;
  s.sample_tokens = 10;
  s.num_samples = 1;
  s.ckpt_every = 5;
  const RunSchedule sched = ScheduleRun(s);  // evals at 5, 10; saves at 5, 10 (one tier each)
  RunOverheads o;
  o.source = "test";
  o.startup_s = 2;
  o.peak_probe_s = 0.5;
  o.forward_fraction = 0.25;
  o.sample_token_s = 0.1;
  o.state_copy_gb_per_s = 1;
  o.ckpt_write_gb_per_s = 0.5;
  o.model_write_gb_per_s = 0.25;
  // 1 s steps of 1000 tokens; a 1 GB state: copy 1 s, persist 2 s; a 0.5 GB model: 2 s.
  const RunBreakdown b = ModelRun(s, sched, o, 10.0, 1.0, 1000, 1e9, 0.5e9);
  EXPECT_DOUBLE_EQ(b.steps_s, 10);
  EXPECT_DOUBLE_EQ(b.startup_s, 2);
  EXPECT_DOUBLE_EQ(b.probe_s, 0.5);
  EXPECT_DOUBLE_EQ(b.eval_s, 2 * 2 * 200 * 0.25 * 1.0 / 1000);  // 0.2 s
  EXPECT_DOUBLE_EQ(b.sample_s, 1 * 10 * 0.1);                   // one call at the end
  // Save at 5 (async): copy 1 s counted; copy + persist = 3 s < 5 steps of 1 s, so no stall. Save at 10:
  // the last one, waited for in full: 1 + 2 s.
  EXPECT_DOUBLE_EQ(b.ckpt_copy_s, 1);
  EXPECT_DOUBLE_EQ(b.ckpt_stall_s, 0);
  EXPECT_DOUBLE_EQ(b.ckpt_final_s, 3);
  EXPECT_DOUBLE_EQ(b.model_save_s, 2);
  EXPECT_DOUBLE_EQ(b.total_s(), 10 + 2 + 0.5 + 0.2 + 1 + 4 + 2);

  // Saves every 2 steps with a 2 s persist: each async save's copy + persist (3 s) overruns the 2 s gap by 1
  // s.
  s.ckpt_every = 2;
  const RunBreakdown busy = ModelRun(s, ScheduleRun(s), o, 10.0, 1.0, 1000, 1e9, 0.5e9);
  EXPECT_DOUBLE_EQ(busy.ckpt_copy_s, 4);   // saves at 2, 4, 6, 8
  EXPECT_DOUBLE_EQ(busy.ckpt_stall_s, 4);  // 1 s each
  EXPECT_DOUBLE_EQ(busy.ckpt_final_s, 3);  // at 10
  // Synchronous saves stall for everything; a configured peak skips the probe.
  s.ckpt_async = false;
  s.probe_peak = false;
  const RunBreakdown sync = ModelRun(s, ScheduleRun(s), o, 10.0, 1.0, 1000, 1e9, 0.5e9);
  EXPECT_DOUBLE_EQ(sync.ckpt_final_s, 5 * 3);
  EXPECT_DOUBLE_EQ(sync.ckpt_copy_s + sync.ckpt_stall_s, 0);
  EXPECT_DOUBLE_EQ(sync.probe_s, 0);
}

TEST(RunModel, DefaultsComeFromPlanDefaults) {
  PlanDefaults d;
  const RunOverheads o = DefaultRunOverheads(d);
  EXPECT_EQ(o.source, "defaults");
  EXPECT_DOUBLE_EQ(o.forward_fraction, 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(o.ckpt_write_gb_per_s, d.checkpoint_write_gb_per_s);
  EXPECT_DOUBLE_EQ(o.startup_s, d.startup_s);
}

}  // namespace
}  // namespace tern::plan
