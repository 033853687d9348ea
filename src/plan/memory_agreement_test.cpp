// The planner's memory model against what the model really allocates: for each config, precision and
// recompute mode tern train offers, Workload::Memory (one GPU, no ZeRO-1) must give the bytes of
// Gpt::Allocation (the sizing code the Gpt constructor runs; model/gpt_recompute_test.cpp checks that a
// constructed Gpt allocates exactly that). Agreement within 10% would do; both sides describe the
// same buffers, so the test holds them to the byte, and prints the relative error when they drift.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <fmt/format.h>

#include "backend/backend.h"
#include "model/gpt.h"
#include "plan/workload.h"

namespace tern::plan {
namespace {

struct Shape {
  const char* what;
  GptConfig cfg;
  int B, T;
};

void ExpectSameBytes(const char* part, double planned, double allocated) {
  const double rel = allocated > 0 ? std::abs(planned - allocated) / allocated : std::abs(planned);
  EXPECT_EQ(planned, allocated) << part << ": planner " << planned << " B, model " << allocated << " B ("
                                << 100 * rel << "% apart)";
  EXPECT_LE(rel, 0.10) << part;
}

TEST(MemoryAgreement, PlannerEstimateIsTheModelsAllocation) {
  const Shape shapes[] = {
      {"gpt2-124m B=16 T=1024", {12, 12, 768, 50257, 1024}, 16, 1024},
      {"gpt2-124m B=4 T=64 (tern bench's README line)", {12, 12, 768, 50257, 1024}, 4, 64},
      {"demo L4 H4 C256 V4096 B=16 T=128", {4, 4, 256, 4096, 128}, 16, 128},
      {"odd L3 H2 C20 V31 B=3 T=7", {3, 2, 20, 31, 9}, 3, 7},
  };
  // The trainer's precisions, as the planner sees them: fp16 has no 16-bit weight copy (the operands are
  // rounded per matmul), so its memory is fp32's.
  const struct {
    Compute compute;
    Precision planned;
  } precisions[] = {{Compute::kF32, Precision::kFp32},
                    {Compute::kBF16, Precision::kBf16},
                    {Compute::kF16, Precision::kFp32}};
  for (const Shape& s : shapes) {
    for (const auto& p : precisions) {
      for (Recompute r : {Recompute::kNone, Recompute::kGelu}) {
        SCOPED_TRACE(fmt::format("{}, compute {}, recompute {}", s.what, static_cast<int>(p.compute),
                                 RecomputeName(r)));
        WorkloadSpec spec;
        spec.cfg = s.cfg;
        spec.seq = s.T;
        spec.tokens = 1e9;
        spec.micro_batch = s.B;
        Result<Workload> w = Workload::Make(spec, PlanDefaults());
        ASSERT_TRUE(w.ok()) << w.status().message();
        const ActRecompute ar = r == Recompute::kGelu ? ActRecompute::kGelu : ActRecompute::kNone;
        const MemoryBreakdown planned = w->Memory(p.planned, s.B, false, ar, 1);
        const GptMemory a = Gpt::Allocation(s.cfg, s.B, s.T, p.compute, r);
        ExpectSameBytes("weights", planned.weights, static_cast<double>(a.params + a.params_bf16));
        ExpectSameBytes("grads", planned.grads, static_cast<double>(a.grads));
        ExpectSameBytes("optimizer", planned.optimizer, static_cast<double>(a.adam_state));
        ExpectSameBytes("activations + scratch", planned.activations,
                        static_cast<double>(a.activations + a.scratch));
        ExpectSameBytes("total", planned.total(), static_cast<double>(a.total()));
      }
    }
  }
}

// The saving the docs quote (docs/gpu.md, Memory): GPT-2 124M, B=16, T=1024: (L-1) x B*T x 4C floats.
TEST(MemoryAgreement, GeluRecomputeSavesLMinusOneGeluOutputs) {
  const GptConfig cfg{12, 12, 768, 50257, 1024};
  const GptMemory none = Gpt::Allocation(cfg, 16, 1024, Compute::kBF16, Recompute::kNone);
  const GptMemory gelu = Gpt::Allocation(cfg, 16, 1024, Compute::kBF16, Recompute::kGelu);
  EXPECT_EQ(none.activations - gelu.activations, size_t{11} * 16 * 1024 * 4 * 768 * 4);  // 2,214,592,512 B
  EXPECT_EQ(none.activations - gelu.activations, size_t{2214592512});
}

}  // namespace
}  // namespace tern::plan
