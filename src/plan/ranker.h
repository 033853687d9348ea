// Ordering the costed options: by expected total cost (then wall time, then name, so that the order is
// deterministic), the Pareto frontier of wall time vs cost, and the recommendation with its reasons.
#pragma once

#include "plan/planner.h"

namespace tern::plan {

// Sorts out->rows, fills out->pareto, out->recommended and out->recommendation.
void Rank(const Catalog& cat, const PlanRequest& req, PlanResult* out);

// Indices of the first `n` rows that lie on their time-cost Pareto frontier (no other of them is both
// no slower and no dearer, and strictly better in one), fastest first.
std::vector<size_t> ParetoFrontier(const std::vector<PlanRow>& rows, size_t n);

// "aws us-east-1 p5.48xlarge x2 spot": how a row is named in prose.
std::string RowName(const Catalog& cat, const PlanRow& r);

}  // namespace tern::plan
