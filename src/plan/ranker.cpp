#include "plan/ranker.h"

#include <algorithm>
#include <limits>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "plan/units.h"

namespace tern::plan {

std::string RowName(const Catalog& cat, const PlanRow& r) {
  const InstanceOffer& o = cat.offers[r.offer];
  return fmt::format("{} {} {}{} ({}x{}) {}", o.provider, o.region, o.instance_type,
                     r.nodes > 1 ? fmt::format(" x{}", r.nodes) : "", r.gpus, o.gpu, BillingName(r.billing));
}

std::vector<size_t> ParetoFrontier(const std::vector<PlanRow>& rows, size_t n) {
  n = std::min(n, rows.size());
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::tie(rows[a].wall_s, rows[a].total_usd, a) < std::tie(rows[b].wall_s, rows[b].total_usd, b);
  });
  std::vector<size_t> frontier;
  double best_cost = std::numeric_limits<double>::infinity();
  for (size_t i : order) {
    if (rows[i].total_usd < best_cost) {  // faster rows all cost more: i is not dominated
      frontier.push_back(i);
      best_cost = rows[i].total_usd;
    }
  }
  return frontier;
}

void Rank(const Catalog& cat, const PlanRequest& req, PlanResult* out) {
  auto& rows = out->rows;
  // Rows built on a catalog row with a warning rank after every clean row: a suspicious price is shown
  // (the report names the cheapest one) but never outranks one that can be trusted.
  // Rows tern cannot run rank after every row it can (they are shown, marked, as what it would take).
  auto less = [&](const PlanRow& a, const PlanRow& b) {
    if (a.runs != b.runs) return a.runs;
    const bool wa = !a.warnings.empty(), wb = !b.warnings.empty();
    if (wa != wb) return wb;
    if (a.total_usd != b.total_usd) return a.total_usd < b.total_usd;
    if (a.wall_s != b.wall_s) return a.wall_s < b.wall_s;
    // Ties (same price in every region): catalog order, then size and billing; deterministic.
    return std::tie(a.offer, a.nodes, a.billing) < std::tie(b.offer, b.nodes, b.billing);
  };
  // Sort indices, then move each row once: PlanRow is large, and swapping it dominated planning time.
  std::vector<size_t> order(rows.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return less(rows[a], rows[b]); });
  std::vector<PlanRow> sorted;
  sorted.reserve(rows.size());
  for (size_t i : order) sorted.push_back(std::move(rows[i]));
  rows = std::move(sorted);
  std::stable_sort(out->excluded.begin(), out->excluded.end(), [](const Exclusion& a, const Exclusion& b) {
    return std::tie(a.category, a.offer, a.nodes) < std::tie(b.category, b.offer, b.nodes);
  });
  // Clean rows: tern runs them and their catalog row raised no warning; they lead the order.
  size_t clean = 0;
  while (clean < rows.size() && rows[clean].runs && rows[clean].warnings.empty()) ++clean;
  size_t runnable = clean;
  while (runnable < rows.size() && rows[runnable].runs) ++runnable;
  out->pareto = ParetoFrontier(rows, clean > 0 ? clean : rows.size());
  auto& why = out->recommendation;
  if (rows.empty()) {
    why.push_back("no option meets the constraints; see --show-excluded for what ruled each out");
    // The nearest misses: what it would take to relax the constraint.
    const Exclusion* cheapest = nullptr;
    const Exclusion* fastest = nullptr;
    for (const auto& e : out->excluded) {
      if (e.total_usd < 0) continue;
      if (!cheapest || e.total_usd < cheapest->total_usd) cheapest = &e;
      if (!fastest || e.wall_s < fastest->wall_s) fastest = &e;
    }
    for (const Exclusion* e : {cheapest, fastest}) {
      if (!e || (e == fastest && fastest == cheapest)) continue;
      const InstanceOffer& o = cat.offers[e->offer];
      why.push_back(fmt::format("{}: {} {} {}{} {}: {} in {} ({})", e == cheapest ? "Cheapest" : "Fastest",
                                o.provider, o.region, o.instance_type,
                                e->nodes > 1 ? fmt::format(" x{}", e->nodes) : "",
                                e->billing ? BillingName(*e->billing) : "", FormatUsd(e->total_usd),
                                FormatHours(e->wall_s / 3600), e->reason));
    }
    return;
  }
  out->recommended = 0;
  const PlanRow& r = rows[0];
  std::string constraints;
  if (req.deadline_h) constraints += fmt::format(" within the {} deadline", FormatHours(*req.deadline_h));
  if (req.budget_usd)
    constraints +=
        fmt::format("{} under the {} budget", constraints.empty() ? "" : " and", FormatUsd(*req.budget_usd));
  std::vector<std::string> others;
  if (clean > 0 && runnable > clean)
    others.push_back(fmt::format("{} more rest on catalog rows with warnings", runnable - clean));
  if (clean > 0 && rows.size() > runnable)
    others.push_back(fmt::format("{} more need what tern train lacks", rows.size() - runnable));
  const std::string more = others.empty() ? "" : fmt::format(" ({})", fmt::join(others, "; "));
  const size_t considered = clean > 0 ? clean : rows.size();
  why.push_back(fmt::format(
      "#1 {}: {} in {}, {} per 1M tokens; {}{}{}.", RowName(cat, r), FormatUsd(r.total_usd),
      FormatHours(r.wall_s / 3600), FormatUsd(r.usd_per_mtok),
      considered == 1 ? std::string("the only option") : fmt::format("cheapest of {} options", considered),
      constraints, more));
  if (!r.runs) {
    why.push_back(fmt::format("Caution: tern cannot run any option; #1 {}.", r.runs_why));
  } else if (clean == 0) {
    why.push_back(fmt::format("Caution: every option rests on a catalog row with a warning; #1's: {}.",
                              r.warnings.front()));
  }
  why.push_back(fmt::format(
      "It runs {} tokens/s at MFU {:.2f} ({}), micro-batch {} x {} accumulation steps, {}/{} per GPU.",
      FormatCount(r.step.tokens_per_s), r.step.mfu, r.step.mfu_source, r.fit.micro_batch, r.fit.grad_accum,
      FormatGiB(r.fit.used.total()), FormatGiB(r.fit.available)));
  if (r.billing == Billing::kSpot) {
    why.push_back(
        fmt::format("Spot risk: {:.1f} expected preemptions (MTBF {} per job), checkpoint every {}, {} lost "
                    "in expectation.",
                    r.spot.expected_preemptions, FormatHours(r.spot.job_mtbf_h),
                    FormatHours(r.spot.interval_s / 3600), FormatHours(r.spot.time_lost_s / 3600)));
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i].billing != Billing::kSpot) {
        why.push_back(fmt::format("Without preemption risk: #{} {}, {} in {}.", i + 1, RowName(cat, rows[i]),
                                  FormatUsd(rows[i].total_usd), FormatHours(rows[i].wall_s / 3600)));
        break;
      }
    }
  }
  if (!out->pareto.empty() && out->pareto.front() != 0) {
    const PlanRow& f = rows[out->pareto.front()];
    why.push_back(fmt::format("Fastest: #{} {}, {} for {} ({:.1f}x faster for {:.1f}x the cost).",
                              out->pareto.front() + 1, RowName(cat, f), FormatHours(f.wall_s / 3600),
                              FormatUsd(f.total_usd), r.wall_s / f.wall_s, f.total_usd / r.total_usd));
  }
  // The cheapest option that was ranked down for a catalog warning, so nobody misses a real bargain.
  if (clean > 0 && clean < runnable && rows[clean].total_usd < r.total_usd) {
    why.push_back(
        fmt::format("Cheaper on paper: #{} {} at {}, ranked after the clean rows because its catalog row is "
                    "suspicious: {}.",
                    clean + 1, RowName(cat, rows[clean]), FormatUsd(rows[clean].total_usd),
                    rows[clean].warnings.front()));
  }
  // The cheapest option tern cannot run, when it is cheaper: what the missing feature would be worth.
  for (size_t i = runnable; r.runs && i < rows.size(); ++i) {
    if (rows[i].total_usd < r.total_usd) {
      why.push_back(fmt::format("Cheaper, but tern cannot run it: #{} {} at {}: {}.", i + 1,
                                RowName(cat, rows[i]), FormatUsd(rows[i].total_usd), rows[i].runs_why));
      break;
    }
  }
}

}  // namespace tern::plan
