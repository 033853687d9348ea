#include "report/serve_diagnose.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "plan/serve_plan.h"

namespace tern::report {
namespace {

constexpr const char* kGenerationRoutes[] = {"/v1/completions", "/v1/chat/completions"};

double Mean(const PromMetrics& m, const std::string& histogram) {
  const double n = m.Sum(histogram + "_count");
  return n > 0 ? m.Sum(histogram + "_sum") / n : 0;
}

int LabelInt(const std::map<std::string, std::string>& labels, const char* key) {
  const auto it = labels.find(key);
  if (it == labels.end()) return 0;
  try {
    return std::stoi(it->second);
  } catch (...) {
    return 0;
  }
}

std::string Hours(double h) {
  return h >= 1        ? fmt::format("{:.1f} h", h)
         : h * 60 >= 1 ? fmt::format("{:.0f} min", h * 60)
                       : fmt::format("{:.0f} s", h * 3600);
}

// `tern plan --serve` for the load the server saw (what the cheaper-serving fix prints): the preset of the
// model's shape, else its run's config.yaml.
std::string PlanCommand(const ServeSummary& s, const std::string& weights, double max_tpot_ms) {
  const GptConfig& c = *s.model;
  std::string model = "RUN_DIR/config.yaml";
  for (const GptPresetEntry& p : GptPresets())
    if (p.cfg.n_layer == c.n_layer && p.cfg.n_head == c.n_head && p.cfg.n_embd == c.n_embd &&
        p.cfg.vocab_size == c.vocab_size && p.cfg.block_size == c.block_size)
      model = p.name;
  std::string command = fmt::format(
      "tern plan --serve --model {} --weights {} --requests-per-s {:.3g} --prompt-tokens {:.0f} "
      "--completion-tokens {:.0f} --max-tpot-ms {:.0f}",
      model, weights, s.requests_per_s, s.prompt_tokens, s.completion_tokens, max_tpot_ms);
  if (s.spec_draft_tokens > 0)
    command += fmt::format(" --speculative-tokens {:.2g} --acceptance {:.2g}", s.spec_drafts_per_step,
                           s.SpecAcceptance());
  return command;
}

std::optional<Finding> IdleServer(const ServeSummary& s, const ServeDiagnoseOptions& o) {
  const double idle = 1 - s.busy_fraction;
  if (s.hours <= 0 || idle <= o.idle_fraction) return std::nullopt;
  Finding f;
  f.rule = "idle_server";
  f.title = fmt::format("the server was idle {:.0f}% of its {}", 100 * idle, Hours(s.hours));
  f.evidence = fmt::format("busy (a generation in flight) {:.0f}% of the time; {:.3g} requests/s on average",
                           100 * s.busy_fraction, s.requests_per_s);
  f.numbers = {{"idle_fraction", idle}, {"hours", s.hours}, {"requests_per_s", s.requests_per_s}};
  f.step_fraction = idle;
  f.usd_per_hour = idle * s.price_per_hour;
  f.fix =
      "serve this load from a smaller or cheaper instance (see cheaper_serving, or `tern plan --serve "
      "--requests-per-s R`), share the GPU with another model, or stop the server while nobody uses it";
  return f;
}

std::optional<Finding> RefusedCapacity(const ServeSummary& s, const ServeDiagnoseOptions& o) {
  if (s.generation_requests <= 0 || s.refused_capacity / s.generation_requests <= o.refused_fraction)
    return std::nullopt;
  Finding f;
  f.rule = "refused_capacity";
  f.title = fmt::format("{:.0f} generation requests ({:.1f}%) were refused with 429: the queue was full",
                        s.refused_capacity, 100 * s.refused_capacity / s.generation_requests);
  f.evidence = fmt::format("{:.0f} requests to the completion routes; mean batch {:.1f} sequences",
                           s.generation_requests, s.batch);
  f.numbers = {{"refused", s.refused_capacity}, {"generation_requests", s.generation_requests}};
  f.fix =
      "more room for bursts (--max-queue, --max-batch with --kv-cache-mb to hold them), or another replica: "
      "`tern plan --serve --requests-per-s PEAK` sizes the fleet for the peak, not the mean";
  return f;
}

std::optional<Finding> CancelledRequests(const ServeSummary& s, const ServeDiagnoseOptions& o) {
  const double all = s.requests + s.cancelled;
  if (all <= 0 || s.cancelled / all <= o.cancelled_fraction) return std::nullopt;
  Finding f;
  f.rule = "cancelled_requests";
  f.title = fmt::format("{:.1f}% of generations were cancelled before their end", 100 * s.cancelled / all);
  f.evidence = fmt::format(
      "{:.0f} cancelled of {:.0f} (clients that left, --timeout, shutdown); their tokens "
      "were computed for nobody",
      s.cancelled, all);
  f.numbers = {{"cancelled", s.cancelled}, {"finished", s.requests}};
  f.step_fraction = s.busy_fraction * s.cancelled / all;  // about their share of the busy time
  f.usd_per_hour = f.step_fraction * s.price_per_hour;
  f.fix =
      "lower max_tokens to what clients read, stream (a streaming client that leaves frees its slot at "
      "the next token), or raise the clients' timeouts above the measured latency";
  return f;
}

std::optional<Finding> Preemptions(const ServeSummary& s, const ServeDiagnoseOptions& o) {
  if (s.requests <= 0 || s.preemptions / s.requests <= o.preempt_fraction) return std::nullopt;
  Finding f;
  f.rule = "preemptions";
  f.title = fmt::format("{:.0f} running requests were preempted for higher priorities ({:.0f} per 100)",
                        s.preemptions, 100 * s.preemptions / s.requests);
  f.evidence = "each preemption computes its sequence again (what the prefix cache still holds is reused)";
  f.numbers = {{"preemptions", s.preemptions}, {"requests", s.requests}};
  f.fix =
      "more KV cache (--kv-cache-mb, or --kv-dtype bf16/int8 for 1/2 or 1/4 of the bytes per token) or "
      "batch room (--max-batch), so that high-priority requests fit beside the others";
  return f;
}

std::optional<Finding> SpeculativeRejects(const ServeSummary& s, const ServeDiagnoseOptions& o) {
  if (s.spec_draft_tokens < 100 || s.SpecAcceptance() >= o.spec_acceptance) return std::nullopt;
  Finding f;
  f.rule = "speculative_rejects";
  f.title = fmt::format("speculative decoding kept {:.0f}% of its draft tokens", 100 * s.SpecAcceptance());
  f.evidence = fmt::format("{:.0f} of {:.0f} draft tokens confirmed: the rest were rows computed for nothing",
                           s.spec_accepted_tokens, s.spec_draft_tokens);
  f.numbers = {{"draft_tokens", s.spec_draft_tokens}, {"accepted_tokens", s.spec_accepted_tokens}};
  f.fix =
      "--speculative-tokens 0 (these answers do not repeat their context), or a longer match "
      "(--prompt-lookup-min 3) and fewer drafts (--speculative-tokens 2); docs/speculative.md";
  return f;
}

// Adapters read back from disk for a large share of requests: --max-loaded-loras is below the adapters in
// use at once, and those requests waited for the reads.
std::optional<Finding> LoraReloads(const ServeSummary& s, const ServeDiagnoseOptions& o) {
  const double all = s.requests + s.cancelled;
  if (s.lora_loads < 10 || all <= 0 || s.lora_loads / all <= o.lora_load_fraction) return std::nullopt;
  Finding f;
  f.rule = "lora_reloads";
  f.title = fmt::format("LoRA adapters were read back into memory for {:.0f}% of requests",
                        100 * std::min(1.0, s.lora_loads / all));
  f.evidence = fmt::format(
      "{:.0f} reads of adapters that had left memory for {:.0f} requests, {:.3g} ms each on average (each "
      "request that needed one waited for it); {:.0f} adapters in memory at the scrape",
      s.lora_loads, all, 1e3 * s.lora_load_s / s.lora_loads, s.lora_in_memory);
  f.numbers = {{"lora_loads", s.lora_loads},
               {"requests", all},
               {"lora_load_seconds", s.lora_load_s},
               {"lora_in_memory", s.lora_in_memory}};
  f.fix =
      "raise --max-loaded-loras above the adapters in use at once (each costs its bytes in memory: `tern "
      "plan --serve --lora-adapters N` sizes them), or route each adapter's requests to fewer replicas";
  return f;
}

std::optional<Finding> CheaperServing(const ServeSummary& s, const ServeDiagnoseOptions& o,
                                      const plan::Catalog& catalog) {
  if (!s.model || s.price_per_hour <= 0 || s.requests_per_s <= 0 || s.tpot_s <= 0) return std::nullopt;
  plan::ServeRequest req;
  req.model = *s.model;
  req.model_label = s.model_name;
  req.load.requests_per_s = s.requests_per_s;
  req.load.prompt_tokens = std::max(1, static_cast<int>(std::lround(s.prompt_tokens)));
  req.load.completion_tokens = std::max(1, static_cast<int>(std::lround(s.completion_tokens)));
  req.load.max_tpot_ms = std::max(1.0, 1000 * s.tpot_s);      // no slower per token than it was
  req.weights = s.weights == "int4" ? "int8" : s.weights;     // the GPU path has no int4 kernel
  req.kv_dtype = s.kv_dtype == "int8" ? "bf16" : s.kv_dtype;  // the GPU path has no int8 cache
  if (s.spec_draft_tokens > 0) {  // the same speculation there: its rows and its accepted tokens per step
    req.load.speculative_tokens = s.spec_drafts_per_step;
    req.load.acceptance = s.SpecAcceptance();
  }
  auto plan = plan::MakeServePlan(catalog, req, plan::PlanDefaults{});
  if (!plan.ok() || plan->rows.empty()) return std::nullopt;
  const auto best = std::find_if(plan->rows.begin(), plan->rows.end(), [](const auto& r) { return r.runs; });
  const plan::ServeRow& row = best != plan->rows.end() ? *best : plan->rows.front();
  if (row.hourly_usd > (1 - o.cheaper_fraction) * s.price_per_hour) return std::nullopt;
  const plan::InstanceOffer& offer = catalog.offers[row.offer];
  Finding f;
  f.rule = "cheaper_serving";
  f.title = fmt::format("{} x {} ({}, {}) serves this load for ${:.2f}/h instead of ${:.2f}/h", row.instances,
                        offer.instance_type, offer.provider + ":" + offer.region,
                        plan::BillingName(row.billing), row.hourly_usd, s.price_per_hour);
  f.evidence = fmt::format(
      "{:.3g} requests/s of {:.0f} prompt + {:.0f} completion tokens at a time per output token of {:.0f} ms "
      "here; the planner's replica model puts it at {:.0f} ms there{}",
      s.requests_per_s, s.prompt_tokens, s.completion_tokens, 1000 * s.tpot_s, 1000 * row.state.tpot_s,
      row.calibrated ? "" : " (its constants uncalibrated for that GPU: docs/serving-plan.md)");
  f.numbers = {{"instance", offer.provider + ":" + offer.region + ":" + offer.instance_type},
               {"billing", plan::BillingName(row.billing)},
               {"instances", row.instances},
               {"hourly_usd", row.hourly_usd},
               {"tpot_s", row.state.tpot_s}};
  f.usd_per_hour = s.price_per_hour - row.hourly_usd;
  f.fix = PlanCommand(s, req.weights, req.load.max_tpot_ms);
  return f;
}

}  // namespace

ServeSummary SummarizeServe(const PromMetrics& m) {
  ServeSummary s;
  const double busy = m.Sum("tern_busy_seconds_total"), idle = m.Sum("tern_idle_seconds_total");
  s.hours = (busy + idle) / 3600;
  s.busy_fraction = busy + idle > 0 ? busy / (busy + idle) : 0;
  s.requests = m.Sum("tern_requests_finished_total", {{"reason", "stop"}}) +
               m.Sum("tern_requests_finished_total", {{"reason", "length"}});
  s.cancelled = m.Sum("tern_requests_finished_total", {{"reason", "cancelled"}});
  s.requests_per_s = busy + idle > 0 ? s.requests / (busy + idle) : 0;
  if (s.requests > 0) {
    s.prompt_tokens = m.Sum("tern_prompt_tokens_total") / s.requests;
    s.completion_tokens = m.Sum("tern_generation_tokens_total") / s.requests;
  }
  s.ttft_s = Mean(m, "tern_time_to_first_token_seconds");
  s.tpot_s = Mean(m, "tern_time_per_output_token_seconds");
  s.batch = Mean(m, "tern_batch_size");
  double refused = 0;
  for (const char* route : kGenerationRoutes) {
    s.generation_requests += m.Sum("tern_http_requests_total", {{"route", route}});
    refused += m.Sum("tern_http_requests_total", {{"route", route}, {"code", "429"}});
  }
  s.refused_capacity = std::max(0.0, refused - m.Sum("tern_usage_rate_limited_total"));
  s.preemptions = m.Sum("tern_preemptions_total");
  s.spec_draft_tokens = m.Sum("tern_spec_decode_draft_tokens_total");
  s.spec_accepted_tokens = m.Sum("tern_spec_decode_accepted_tokens_total");
  // Each sequence step yields one token and its accepted drafts: the steps are the tokens less those.
  const double generated = m.Sum("tern_generation_tokens_total");
  if (generated > s.spec_accepted_tokens)
    s.spec_drafts_per_step = s.spec_draft_tokens / (generated - s.spec_accepted_tokens);
  s.lora_loads = m.Sum("tern_lora_loads_total");
  s.lora_load_s = m.Sum("tern_lora_load_seconds_total");
  s.lora_in_memory = m.Sum("tern_lora_adapters");
  s.price_per_hour = m.Sum("tern_price_per_hour_usd");
  // The server's gauge is over its whole life; from the counters it is over what `m` covers (a window too).
  s.usd_per_mtok = generated > 0 && s.price_per_hour > 0 ? s.price_per_hour * s.hours / generated * 1e6
                                                         : m.Sum("tern_usd_per_million_generated_tokens");
  if (auto info = m.Labels("tern_model_info")) {
    GptConfig c{LabelInt(*info, "n_layer"), LabelInt(*info, "n_head"), LabelInt(*info, "n_embd"),
                LabelInt(*info, "vocab_size"), LabelInt(*info, "block_size")};
    if (c.n_layer > 0 && c.n_head > 0 && c.n_embd > 0 && c.vocab_size > 0 && c.block_size > 0) s.model = c;
    s.model_name = (*info)["model"];
    s.weights = (*info)["weights"].empty() ? "fp32" : (*info)["weights"];
    s.kv_dtype = (*info)["kv_dtype"].empty() ? "fp32" : (*info)["kv_dtype"];
    s.device = (*info)["device"];
  }
  return s;
}

std::string ServeRulesHelp(const ServeDiagnoseOptions& o) {
  return fmt::format(
      "Serving rules (--serve):\n"
      "  idle_server          idle (no generation in flight) more than {:.0f}% of the time\n"
      "  refused_capacity     more than {:.0f}% of generation requests got 429 for a full queue\n"
      "  cancelled_requests   more than {:.0f}% of generations cancelled before their end\n"
      "  preemptions          more than {:.0f} preemptions per 100 requests\n"
      "  speculative_rejects  fewer than {:.0f}% of draft tokens accepted\n"
      "  lora_reloads         a LoRA adapter read back into memory for more than {:.0f}% of requests\n"
      "  cheaper_serving      tern plan --serve serves the measured load {:.0f}% cheaper (needs "
      "--price-per-hour)\n",
      100 * o.idle_fraction, 100 * o.refused_fraction, 100 * o.cancelled_fraction, 100 * o.preempt_fraction,
      100 * o.spec_acceptance, 100 * o.lora_load_fraction, 100 * o.cheaper_fraction);
}

std::vector<Finding> DiagnoseServe(const ServeSummary& s, const ServeDiagnoseOptions& o,
                                   const plan::Catalog* catalog) {
  std::vector<Finding> out;
  for (auto f : {IdleServer(s, o), RefusedCapacity(s, o), CancelledRequests(s, o), Preemptions(s, o),
                 SpeculativeRejects(s, o), LoraReloads(s, o)})
    if (f) out.push_back(std::move(*f));
  if (catalog)
    if (auto f = CheaperServing(s, o, *catalog)) out.push_back(std::move(*f));
  std::stable_sort(out.begin(), out.end(), [](const Finding& a, const Finding& b) {
    return a.RankUsd() != b.RankUsd() ? a.RankUsd() > b.RankUsd() : a.step_fraction > b.step_fraction;
  });
  return out;
}

nlohmann::json ServeSummaryJson(const ServeSummary& s) {
  nlohmann::json j = {{"hours", s.hours},
                      {"busy_fraction", s.busy_fraction},
                      {"requests", s.requests},
                      {"cancelled", s.cancelled},
                      {"requests_per_s", s.requests_per_s},
                      {"prompt_tokens", s.prompt_tokens},
                      {"completion_tokens", s.completion_tokens},
                      {"ttft_s", s.ttft_s},
                      {"tpot_s", s.tpot_s},
                      {"batch", s.batch},
                      {"preemptions", s.preemptions},
                      {"spec_draft_tokens", s.spec_draft_tokens},
                      {"spec_accepted_tokens", s.spec_accepted_tokens},
                      {"spec_draft_tokens_per_step", s.spec_drafts_per_step},
                      {"lora_loads", s.lora_loads},
                      {"lora_load_seconds", s.lora_load_s},
                      {"price_per_hour", s.price_per_hour},
                      {"usd_per_million_generated_tokens", s.usd_per_mtok},
                      {"model", s.model_name},
                      {"weights", s.weights},
                      {"device", s.device}};
  return j;
}

std::string FormatServeFindings(const std::string& source, const ServeSummary& s,
                                const std::vector<Finding>& findings) {
  std::string out = fmt::format(
      "{}: {}{} over {}, busy {:.0f}%; {:.0f} requests ({:.3g}/s), {:.0f} prompt + "
      "{:.0f} completion tokens each; TTFT {:.0f} ms, {:.0f} ms per output token, "
      "batch {:.1f}",
      source, s.model_name.empty() ? "tern serve" : s.model_name, s.device.empty() ? "" : " on " + s.device,
      Hours(s.hours), 100 * s.busy_fraction, s.requests, s.requests_per_s, s.prompt_tokens,
      s.completion_tokens, 1000 * s.ttft_s, 1000 * s.tpot_s, s.batch);
  if (s.price_per_hour > 0)
    out += fmt::format("; ${:.2f}/h, ${:.2f} per 1M generated tokens", s.price_per_hour, s.usd_per_mtok);
  out += "\n";
  if (findings.empty())
    return out + "no findings: every rule is within its threshold (`tern diagnose --help`)\n";
  int i = 0;
  for (const auto& f : findings) {
    out += fmt::format("\n{}. [{}] {}\n   evidence: {}\n", ++i, f.rule, f.title, f.evidence);
    if (f.usd_per_hour > 0) out += fmt::format("   cost: ${:.4f}/h at the server's price\n", f.usd_per_hour);
    out += fmt::format("   fix: {}\n", f.fix);
  }
  if (s.price_per_hour <= 0)
    out += "\n(no --price-per-hour on the server: costs in $ and cheaper_serving need it)\n";
  return out;
}

}  // namespace tern::report
