// How long `tern plan` takes over the whole shipped catalog for one workload (target: well under
// 50 ms), next to the time to load and validate the catalog it plans over.
//   build/bench/plan_bench [data/catalog] [repetitions]
// Prints medians; the planning figure excludes catalog loading (the CLI pays both once).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "plan/catalog.h"
#include "plan/model_spec.h"
#include "plan/planner.h"

namespace {

// Median and minimum: the machine is shared, so the minimum is the better estimate of the work itself.
struct Timing {
  double median_ms, min_ms;
};

template <typename F>
Timing Time(int reps, F&& f) {
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front()};
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tern::plan;
  std::string dir;
  if (argc > 1) {
    dir = argv[1];
  } else {
    auto found = FindCatalogDir();
    if (!found.ok()) {
      std::fprintf(stderr, "plan_bench: %s\n", found.status().message().c_str());
      return 1;
    }
    dir = found.value();
  }
  const int reps = argc > 2 ? std::atoi(argv[2]) : 50;
  const PlanDefaults d;
  const auto files = ShippedCatalogFiles(dir);
  Catalog cat;
  const Timing load = Time(reps, [&] {
    auto c = LoadCatalog(files, d);
    if (!c.ok()) {
      std::fprintf(stderr, "plan_bench: %s\n", c.status().message().c_str());
      std::exit(1);
    }
    cat = std::move(c).value();
  });
  PlanRequest req;
  req.workload.cfg = tern::GptPreset("gpt2-124m").value();
  req.workload.model_label = "gpt2-124m";
  req.workload.tokens = 10e9;
  size_t rows = 0, excluded = 0;
  const Timing plan = Time(reps, [&] {
    auto r = MakePlan(cat, req, d);
    rows = r->rows.size();
    excluded = r->excluded.size();
  });
  std::printf("catalog: %zu offers, %zu GPU specs from %s\n", cat.offers.size(), cat.gpus.size(),
              dir.c_str());
  std::printf("load+validate catalog: %8.3f ms median, %8.3f ms min (%d runs)\n", load.median_ms, load.min_ms,
              reps);
  std::printf("plan gpt2-124m 10B:    %8.3f ms median, %8.3f ms min: %zu ranked, %zu excluded\n",
              plan.median_ms, plan.min_ms, rows, excluded);
  std::printf("plan / load ratio:     %8.2f (medians)\n", plan.median_ms / load.median_ms);
  std::printf("target: planning well under 50 ms -> %s\n", plan.median_ms < 50 ? "ok" : "TOO SLOW");
  return plan.median_ms < 50 ? 0 : 1;
}
