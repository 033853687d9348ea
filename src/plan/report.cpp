#include "plan/report.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "plan/ranker.h"
#include "plan/units.h"

namespace tern::plan {
namespace {

using nlohmann::json;

}  // namespace

std::string Tabulate(const std::vector<std::vector<std::string>>& cells, const std::vector<bool>& right) {
  std::vector<size_t> width(cells.front().size(), 0);
  auto display_len = [](const std::string& s) {  // UTF-8 code points, so "×" counts as one column
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
  };
  for (const auto& row : cells) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], display_len(row[c]));
  }
  std::string out;
  for (const auto& row : cells) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      const size_t pad = width[c] - display_len(row[c]);
      if (c + 1 == row.size()) {
        line += row[c];
      } else if (right[c]) {
        line += std::string(pad, ' ') + row[c] + "  ";
      } else {
        line += row[c] + std::string(pad, ' ') + "  ";
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

namespace {

std::string Gpus(const PlanRow& r, const InstanceOffer& o, bool ascii) {
  return fmt::format("{}{}{}", r.gpus, ascii ? "x" : "×", o.gpu);
}

}  // namespace

std::string RenderHeader(const PlanResult& r, const Catalog& cat, bool ascii) {
  const Workload& w = r.workload;
  const GptConfig& c = w.spec().cfg;
  std::string out = fmt::format(
      "Model {} ({}): {} parameters, {:.1f} MFLOP/token = 6(12LC{}+CV)+12LTC at T={}\n"
      "Job   {} tokens = {:.3g} FLOP; global batch {} tokens; catalog {} offers\n",
      w.spec().model_label, c.ToString(), FormatCount(w.params()), GptFlopsPerToken(c, w.seq()) / 1e6,
      ascii ? "^2" : "²", w.seq(), FormatCount(w.spec().tokens), w.total_flops(),
      FormatCount(w.global_batch_tokens()), cat.offers.size());
  if (w.spec().lora.enabled())
    out += fmt::format(
        "LoRA  {}: {} trainable parameters (gradients, AdamW moments and the all-reduce); the model frozen "
        "(weights only); {:.1f} MFLOP/token = 4(12LC{}+CV)+12LTC + the adapters' 4r(in+out) (no frozen "
        "weight gradients)\n",
        w.spec().lora.ToString(), FormatCount(w.trainable_params()), w.flops_per_token() / 1e6,
        ascii ? "^2" : "²");
  for (const auto& n : r.notes) out += "Note  " + n + "\n";
  return out;
}

std::string RenderTable(const PlanResult& r, const Catalog& cat, const ReportOptions& opt) {
  std::vector<std::vector<std::string>> cells = {{"#", "provider", "region", "instance", "GPUs", "billing",
                                                  "mem/GPU GiB", "tok/s", "wall", "compute", "stor+egr",
                                                  "total", "$/1M tok", "risk", "runs", "why"}};
  const std::vector<bool> right = {true, false, false, false, false, false, true,  true,
                                   true, true,  true,  true,  true,  false, false, false};
  const size_t n = std::min(r.rows.size(), static_cast<size_t>(std::max(0, opt.top)));
  for (size_t i = 0; i < n; ++i) {
    const PlanRow& row = r.rows[i];
    const InstanceOffer& o = cat.offers[row.offer];
    cells.push_back(
        {fmt::format("{}", i + 1), o.provider, o.region,
         row.nodes > 1 ? fmt::format("{} x{}", o.instance_type, row.nodes) : o.instance_type,
         Gpus(row, o, opt.ascii), BillingName(row.billing),
         fmt::format("{:.1f}/{:.0f}", row.fit.used.total() / (1024.0 * 1024 * 1024), o.gpu_mem_gib),
         FormatCount(row.step.tokens_per_s), FormatHours(row.wall_s / 3600), FormatUsd(row.compute_usd),
         FormatUsd(row.storage.total()), FormatUsd(row.total_usd), FormatUsd(row.usd_per_mtok), row.risk,
         row.runs ? "yes" : "no", row.why});
  }
  return Tabulate(cells, right);
}

std::string RenderReport(const PlanResult& r, const Catalog& cat, const ReportOptions& opt) {
  std::string out = RenderHeader(r, cat, opt.ascii) + "\n";
  if (!r.rows.empty()) {
    out += fmt::format("Plans ({} of {}, cheapest first):\n", std::min<size_t>(r.rows.size(), opt.top),
                       r.rows.size());
    out += RenderTable(r, cat, opt);
    // Catalog warnings behind the rows shown, so a suspicious price is never taken on trust.
    for (size_t i = 0; i < std::min<size_t>(r.rows.size(), opt.top); ++i) {
      const InstanceOffer& o = cat.offers[r.rows[i].offer];
      for (const auto& w : r.rows[i].warnings) out += fmt::format("  warning #{}: {}{}\n", i + 1, o.where, w);
    }
    out += "\nPareto frontier (no other plan is both faster and cheaper):\n";
    for (size_t idx : r.pareto) {
      out += fmt::format("  #{:<5} {:>9}  {:>10}  {}\n", idx + 1, FormatHours(r.rows[idx].wall_s / 3600),
                         FormatUsd(r.rows[idx].total_usd), RowName(cat, r.rows[idx]));
    }
  }
  out += "\nRecommendation:\n";
  for (const auto& line : r.recommendation) out += "  " + line + "\n";
  std::map<std::string, int> by_cat;
  for (const auto& e : r.excluded) ++by_cat[e.category];
  std::string summary;
  for (const auto& [c, k] : by_cat) summary += fmt::format("{}{} {}", summary.empty() ? "" : ", ", c, k);
  out += fmt::format(
      "\nExcluded {} options ({}){}; {} offers filtered out by --providers/--regions/--gpus/--instance.\n",
      r.excluded.size(), summary.empty() ? "none" : summary,
      opt.show_excluded || r.excluded.empty() ? "" : " -- list them with --show-excluded", r.filtered);
  if (opt.show_excluded) {
    for (const auto& e : r.excluded) {
      const InstanceOffer& o = cat.offers[e.offer];
      out += fmt::format("  {:<9} {} {} {}{} {}: {}\n", e.category, o.provider, o.region, o.instance_type,
                         e.nodes > 1 ? fmt::format(" x{}", e.nodes) : "",
                         e.billing ? BillingName(*e.billing) : "any billing", e.reason);
    }
  }
  return out;
}

std::string RenderCsv(const PlanResult& r, const Catalog& cat, const ReportOptions& opt) {
  auto field = [](const std::string& v) {  // RFC 4180: quote a field with a comma, quote or newline
    if (v.find_first_of(",\"\n") == std::string::npos) return v;
    std::string q = "\"";
    for (char c : v) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  };
  std::string out =
      "rank,provider,region,instance,instances,gpus,gpu,billing,precision,micro_batch,grad_accum,zero1,"
      "recompute,"
      "mem_used_gib,gpu_mem_gib,tokens_per_s,wall_h,compute_usd,storage_egress_usd,total_usd,usd_per_1m_"
      "tokens,"
      "allreduce_s,link,link_measured,runs,runs_why,why\n";
  const size_t n = std::min(r.rows.size(), static_cast<size_t>(std::max(0, opt.top)));
  for (size_t i = 0; i < n; ++i) {
    const PlanRow& row = r.rows[i];
    const InstanceOffer& o = cat.offers[row.offer];
    const std::vector<std::string> cells = {
        fmt::format("{}", i + 1),
        o.provider,
        o.region,
        o.instance_type,
        fmt::format("{}", row.nodes),
        fmt::format("{}", row.gpus),
        o.gpu,
        BillingName(row.billing),
        PrecisionName(row.precision),
        fmt::format("{}", row.fit.micro_batch),
        fmt::format("{}", row.fit.grad_accum),
        row.fit.zero1 ? "yes" : "no",
        ActRecomputeName(row.fit.recompute),
        fmt::format("{:.3f}", row.fit.used.total() / (1024.0 * 1024 * 1024)),
        fmt::format("{:g}", o.gpu_mem_gib),
        fmt::format("{:.0f}", row.step.tokens_per_s),
        fmt::format("{:.4f}", row.wall_s / 3600),
        fmt::format("{:.2f}", row.compute_usd),
        fmt::format("{:.2f}", row.storage.total()),
        fmt::format("{:.2f}", row.total_usd),
        fmt::format("{:.6f}", row.usd_per_mtok),
        fmt::format("{:.6g}", row.step.allreduce_s),
        row.link.what,
        row.link.measured ? "yes" : "no",
        row.runs ? "yes" : "no",
        row.runs_why,
        row.why};
    for (size_t c = 0; c < cells.size(); ++c) out += (c ? "," : "") + field(cells[c]);
    out += "\n";
  }
  return out;
}

json ReportJson(const PlanResult& r, const Catalog& cat, const PlanDefaults& d, const ReportOptions& opt) {
  const Workload& w = r.workload;
  const GptConfig& c = w.spec().cfg;
  json j;
  j["workload"] = {{"model", w.spec().model_label},
                   {"config",
                    {{"n_layer", c.n_layer},
                     {"n_head", c.n_head},
                     {"n_embd", c.n_embd},
                     {"vocab_size", c.vocab_size},
                     {"block_size", c.block_size}}},
                   {"params", w.params()},
                   {"trainable_params", w.trainable_params()},
                   {"lora_rank", w.spec().lora.rank},
                   {"seq", w.seq()},
                   {"tokens", w.spec().tokens},
                   {"flops_per_token", w.flops_per_token()},
                   {"total_flops", w.total_flops()},
                   {"global_batch_tokens", w.global_batch_tokens()},
                   {"checkpoint_bytes", w.checkpoint_bytes()}};
  auto row_json = [&](size_t i) {
    const PlanRow& row = r.rows[i];
    const InstanceOffer& o = cat.offers[row.offer];
    json x = {{"rank", i + 1},
              {"provider", o.provider},
              {"region", o.region},
              {"instance", o.instance_type},
              {"gpu", o.gpu},
              {"gpus_per_instance", o.gpu_count},
              {"instances", row.nodes},
              {"gpus", row.gpus},
              {"billing", BillingName(row.billing)},
              {"precision", PrecisionName(row.precision)},
              {"price_per_instance_hour", row.price_hr},
              {"hourly_usd", row.hourly_usd},
              {"memory",
               {{"used_bytes", row.fit.used.total()},
                {"usable_bytes", row.fit.available},
                {"gpu_mem_gib", o.gpu_mem_gib},
                {"micro_batch", row.fit.micro_batch},
                {"grad_accum", row.fit.grad_accum},
                {"zero1", row.fit.zero1},
                {"recompute", ActRecomputeName(row.fit.recompute)}}},
              {"throughput",
               {{"peak_tflops", row.step.peak_tflops},
                {"mfu", row.step.mfu},
                {"mfu_source", row.step.mfu_source},
                {"tokens_per_s", row.step.tokens_per_s},
                {"step_s", row.step.step_s},
                {"compute_s", row.step.compute_s},
                {"allreduce_s", row.step.allreduce_s},
                {"exposed_comm_s", row.step.exposed_s},
                {"zero1_allgather_s", row.step.allgather_s},
                {"link", row.link.what},
                {"link_gb_per_s", row.link.gb_per_s},
                {"link_measured", row.link.measured},
                {"link_latency_s", row.link.latency_s},
                {"link_source", row.link.measured ? json(row.link.source) : json(nullptr)}}},
              {"runs", row.runs},
              {"runs_why", row.runs ? json(nullptr) : json(row.runs_why)},
              {"wall_s", row.wall_s},
              {"compute_usd", row.compute_usd},
              {"storage_usd", row.storage.storage_usd},
              {"egress_usd", row.storage.dataset_usd + row.storage.model_usd},
              {"total_usd", row.total_usd},
              {"usd_per_1m_tokens", row.usd_per_mtok},
              {"risk", row.risk},
              {"why", row.why},
              {"warnings", row.warnings}};
    if (row.run) {
      const RunBreakdown& b = *row.run;
      x["run"] = {{"overheads", b.source},
                  {"steps", b.schedule.steps},
                  {"steps_s", b.steps_s},
                  {"startup_s", b.startup_s},
                  {"data_fetch_s", b.data_fetch_s},
                  {"peak_probe_s", b.probe_s},
                  {"evals", b.schedule.evals},
                  {"eval_s", b.eval_s},
                  {"samples", b.schedule.samples_during + b.schedule.samples_end},
                  {"sample_s", b.sample_s},
                  {"checkpoint_saves", b.schedule.saves.size()},
                  {"checkpoint_tier_writes", b.schedule.tier_writes()},
                  {"checkpoint_s", b.checkpoint_s()},
                  {"model_save_s", b.model_save_s},
                  {"total_s", b.total_s()}};
    }
    if (row.billing == Billing::kSpot) {
      x["spot"] = {{"hazard_per_instance_hour", row.spot.hazard_per_hr},
                   {"job_mtbf_h", row.spot.job_mtbf_h},
                   {"checkpoint_s", row.spot.checkpoint_s},
                   {"checkpoint_source", row.spot.checkpoint_source},
                   {"restart_s", row.spot.restart_s},
                   {"restart_source", row.spot.restart_source},
                   {"checkpoint_interval_s", row.spot.interval_s},
                   {"expected_preemptions", row.spot.expected_preemptions},
                   {"time_lost_s", row.spot.time_lost_s}};
      if (row.spot_sim) {
        const SimStats& m = *row.spot_sim;
        x["spot"]["simulated"] = {{"traces", row.spot_sim_traces},
                                  {"policy", SpotPolicyName(m.policy)},
                                  {"polarity", PolarityName(m.polarity)},
                                  {"runs", m.runs},
                                  {"mean_cost_usd", m.mean_cost},
                                  {"p95_cost_usd", m.p95_cost},
                                  {"p95_wall_h", m.p95_wall_h},
                                  {"miss_rate", m.miss_rate},
                                  {"mean_preemptions", m.mean_preemptions},
                                  {"mean_lost_h", m.mean_lost_h}};
      }
    }
    if (row.billing == Billing::kReserved) {
      x["reserved"] = {{"discount", row.reserved.discount},
                       {"break_even_utilization", row.reserved.break_even_utilization},
                       {"utilization", row.reserved.utilization},
                       {"commitment_usd", row.reserved.commitment_usd}};
    }
    return x;
  };
  j["plans"] = json::array();
  for (size_t i = 0; i < std::min<size_t>(r.rows.size(), opt.top); ++i) j["plans"].push_back(row_json(i));
  j["feasible_count"] = r.rows.size();
  j["pareto"] = json::array();
  for (size_t idx : r.pareto) j["pareto"].push_back(row_json(idx));
  j["recommendation"] = r.recommended ? row_json(*r.recommended) : json(nullptr);
  j["recommendation_reasons"] = r.recommendation;
  j["excluded_count"] = r.excluded.size();
  if (opt.show_excluded) {
    j["excluded"] = json::array();
    for (const auto& e : r.excluded) {
      const InstanceOffer& o = cat.offers[e.offer];
      j["excluded"].push_back({{"provider", o.provider},
                               {"region", o.region},
                               {"instance", o.instance_type},
                               {"instances", e.nodes},
                               {"billing", e.billing ? BillingName(*e.billing) : "any"},
                               {"category", e.category},
                               {"reason", e.reason}});
    }
  }
  j["filtered_count"] = r.filtered;
  j["notes"] = r.notes;
  j["catalog_warnings"] = cat.warnings;
  json defaults = json::object();
  for (const auto& e : DescribeDefaults(d)) defaults[e.name] = e.value;
  j["defaults"] = defaults;
  return j;
}

std::string RenderDefaultsMarkdown(const PlanDefaults& d) {
  std::string out = "| default | value | source |\n|---|---|---|\n";
  for (const auto& e : DescribeDefaults(d))
    out += fmt::format("| `{}` | {} | {} |\n", e.name, e.value, e.source);
  return out;
}

}  // namespace tern::plan
