// `tern diagnose --serve URL|FILE`: the diagnosis of a running (or scraped) `tern serve` from its /metrics
// (docs/report.md, "Serving diagnosis"): what the server did since it started (or in a window between two
// scrapes: PromDelta), what of its hours was paid for
// nothing or lost, and the fix. The same Finding as a run's diagnosis (diagnose.h), ranked by $ per hour.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/gpt_config.h"
#include "plan/catalog.h"
#include "report/diagnose.h"
#include "report/prom_text.h"

namespace tern::report {

// What the counters say since the server started (or over the window of a PromDelta).
struct ServeSummary {
  double hours = 0;                                 // busy + idle
  double busy_fraction = 0;                         // of that time, with a generation request in flight
  double requests = 0;                              // generations finished (stop or length)
  double cancelled = 0;                             // ... and cancelled (client gone, timeout, shutdown)
  double requests_per_s = 0;                        // finished / (busy + idle)
  double prompt_tokens = 0, completion_tokens = 0;  // per finished request, mean
  double ttft_s = 0, tpot_s = 0;                    // means of the histograms (0: none observed)
  double batch = 0;                                 // sequences per forward, mean
  double generation_requests = 0;                   // HTTP requests to the completion routes, any status
  double refused_capacity = 0;                      // of which 429 for a full queue (not a key's own limits)
  double preemptions = 0;
  double spec_draft_tokens = 0, spec_accepted_tokens = 0;
  double spec_drafts_per_step = 0;  // draft tokens per sequence step (a step yields 1 + its accepted ones)
  double SpecAcceptance() const {   // the share of draft tokens kept (0: no drafts)
    return spec_draft_tokens > 0 ? spec_accepted_tokens / spec_draft_tokens : 0;
  }
  double lora_loads = 0, lora_load_s = 0;  // adapters read back into memory (--max-loaded-loras), seconds
  double lora_in_memory = 0;               // adapters in memory when scraped
  double price_per_hour = 0;               // --price-per-hour (0: not given)
  double usd_per_mtok = 0;                 // the server's $ per 1M generated tokens (0: no price)
  std::optional<GptConfig> model;          // tern_model_info (servers before it: none)
  std::string model_name, weights = "fp32", kv_dtype = "fp32", device;
};

ServeSummary SummarizeServe(const PromMetrics& m);

struct ServeDiagnoseOptions {
  double idle_fraction = 0.5;        // idle_server: idle more than half the time
  double refused_fraction = 0.01;    // refused_capacity: 1% of generation requests got 429 for a full queue
  double cancelled_fraction = 0.05;  // cancelled_requests: 5% of generations cancelled
  double preempt_fraction = 0.05;    // preemptions: 5 per 100 requests
  double spec_acceptance = 0.3;      // speculative_rejects: fewer than 30% of draft tokens accepted
  double lora_load_fraction = 0.1;   // lora_reloads: an adapter read back for more than 10% of requests
  double cheaper_fraction = 0.10;    // cheaper_serving: the planner serves the load for 10% fewer $ per hour
};

std::string ServeRulesHelp(const ServeDiagnoseOptions& o);

// Every rule, ranked by $ per hour (then the others). catalog: the offers cheaper_serving plans on (null: the
// rule is skipped).
std::vector<Finding> DiagnoseServe(const ServeSummary& s, const ServeDiagnoseOptions& o,
                                   const plan::Catalog* catalog);

// The summary and the findings as `tern diagnose --serve` prints them.
std::string FormatServeFindings(const std::string& source, const ServeSummary& s,
                                const std::vector<Finding>& findings);
nlohmann::json ServeSummaryJson(const ServeSummary& s);

}  // namespace tern::report
