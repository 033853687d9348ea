// `tern plan ... --explain ROW`: the arithmetic of one ranked row, step by step, with the numbers that
// went in, so that a user can check it by hand (or in a spreadsheet) and see which input to change.
#pragma once

#include <string>

#include "plan/planner.h"

namespace tern::plan {

// `row` is 1-based, as printed in the table. Errors if it is out of range.
Result<std::string> ExplainRow(const PlanResult& r, const Catalog& cat, const PlanRequest& req,
                               const PlanDefaults& d, int row);

}  // namespace tern::plan
