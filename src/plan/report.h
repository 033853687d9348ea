// Rendering a PlanResult: the ranked table with the Pareto frontier and the recommendation for people,
// and the same data as JSON for machines.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "plan/planner.h"

namespace tern::plan {

struct ReportOptions {
  int top = 10;
  bool show_excluded = false;
  bool ascii = false;  // "x" instead of "×" (golden files and dumb terminals)
};

// Rows of cells as aligned columns: left-aligned text, right-aligned where `right` says; the last column is
// never padded; "×" counts as one column.
std::string Tabulate(const std::vector<std::vector<std::string>>& cells, const std::vector<bool>& right);

std::string RenderHeader(const PlanResult& r, const Catalog& cat, bool ascii = false);
std::string RenderTable(const PlanResult& r, const Catalog& cat, const ReportOptions& opt);
std::string RenderReport(const PlanResult& r, const Catalog& cat, const ReportOptions& opt);
// The ranked rows (opt.top of them) as CSV, one header line; `runs`/`runs_why` say whether tern can run each.
std::string RenderCsv(const PlanResult& r, const Catalog& cat, const ReportOptions& opt);
nlohmann::json ReportJson(const PlanResult& r, const Catalog& cat, const PlanDefaults& d,
                          const ReportOptions& opt);

// The defaults table as Markdown (what docs/planning.md reproduces).
std::string RenderDefaultsMarkdown(const PlanDefaults& d);

}  // namespace tern::plan
