// `tern plan` against published GPT-2 reproductions on the same hardware (docs/planning.md, "Published
// runs"): the predicted wall time of the run's steps within 25% of what the authors reported.
#include <gtest/gtest.h>

#include "model/gpt_config.h"
#include "plan/planner.h"

namespace tern::plan {
namespace {

double PredictedHours(const std::string& model, double tokens, double batch_tokens, const std::string& gpu,
                      const std::string& instance) {
  const PlanDefaults d;
  auto dir = FindCatalogDir();
  EXPECT_TRUE(dir.ok()) << dir.status().ToString();
  auto cat = LoadCatalog(ShippedCatalogFiles(*dir), d);
  EXPECT_TRUE(cat.ok()) << cat.status().ToString();
  PlanRequest req;
  req.workload.cfg = GptPreset(model).value();
  req.workload.model_label = model;
  req.workload.tokens = tokens;
  req.workload.global_batch_tokens = batch_tokens;
  req.gpus = {gpu};
  req.instances = {instance};
  req.billing = {Billing::kOnDemand};
  req.max_gpus = 8;
  auto plan = MakePlan(*cat, req, d);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  for (const PlanRow& r : plan->rows)
    if (r.gpus == 8) return r.wall_s / 3600;
  ADD_FAILURE() << "no 8-GPU row for " << instance;
  return 0;
}

// llm.c discussion #481 (https://github.com/karpathy/llm.c/blob/master/scripts/run_gpt2_124M.sh): GPT-2 124M,
// 10B FineWeb tokens, 2^19 tokens per step, about 90 minutes on 8xA100 80GB SXM.
TEST(PublishedRuns, Gpt2_124mOn8xA100WithinAQuarter) {
  const double h = PredictedHours("gpt2-124m", 10e9, 524288, "A100-80GB", "gpu_8x_a100_80gb_sxm4");
  EXPECT_NEAR(h / 1.5, 1.0, 0.25) << h << " h predicted, 1.5 h published";
}

// llm.c discussion #677 (https://github.com/karpathy/llm.c/blob/master/scripts/run_gpt2_1558M.sh): GPT-2
// 1558M, 32,000 steps x 2^20 tokens, 24 hours on 8xH100 (evaluations included).
TEST(PublishedRuns, Gpt2_1558mOn8xH100WithinAQuarter) {
  const double h = PredictedHours("gpt2-1.5b", 32000.0 * 1048576, 1048576, "H100", "gpu_8x_h100_sxm5");
  EXPECT_NEAR(h / 24.0, 1.0, 0.25) << h << " h predicted, 24 h published";
}

}  // namespace
}  // namespace tern::plan
