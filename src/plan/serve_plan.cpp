#include "plan/serve_plan.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "model/lora.h"
#include "plan/report.h"
#include "plan/units.h"

namespace tern::plan {

namespace {

double BytesOf(const std::string& dtype) {
  // int8: per-channel scales are a rounding error; int4: a nibble and a 4-byte scale per 64 weights.
  return dtype == "fp32" ? 4 : dtype == "bf16" ? 2 : dtype == "int4" ? 0.5 + 4.0 / 64 : 1;
}

// A served LoRA adapter's bytes per parameter: fp32 beside fp32 weights, bf16 beside bf16 or int8 ones
// (InferenceModel::AddAdapter).
double AdapterBytesPerParam(const std::string& weights) {
  return weights == "fp32" ? 4 : 2;
}

// The fixed point of b = k * (a + s * b) (an affine step time, slope s), or -1 when k * s >= 1 (the queue
// of decoding sequences grows without bound).
double FixedPoint(double k, double a, double s) {
  return k * s >= 1 ? -1 : k * a / (1 - k * s);
}

}  // namespace

std::optional<ReplicaModel> MakeReplicaModel(const GpuSpec& gpu, const ServeRequest& req,
                                             const PlanDefaults& d, std::string* why) {
  const GptConfig& m = req.model;
  const ServeLoad& load = req.load;
  if (!gpu.mem_bw_gbps) {
    *why = "gpus.csv gives no memory bandwidth (mem_bw_gbps) for " + gpu.name;
    return std::nullopt;
  }
  // Weights at fp32 run on the CUDA cores; bf16 and int8 (widened to bf16 for the product) on the tensor
  // cores, where the GPU has bf16.
  const bool tensor = req.weights != "fp32" && gpu.SupportsBf16();
  const std::optional<double> peak = gpu.PeakTflops(tensor ? Precision::kBf16 : Precision::kFp32);
  if (!peak) {
    *why = "gpus.csv gives no peak FLOP/s for " + gpu.name;
    return std::nullopt;
  }
  ReplicaModel r;
  const double L = m.n_layer, C = m.n_embd, V = m.vocab_size;
  const double matmul_params = 12 * L * C * C + C * V;  // the blocks' matrices and the tied LM head
  r.weight_bytes = static_cast<double>(GptParamCount(m)) * BytesOf(req.weights);
  r.kv_bytes_per_token = 2 * L * C * BytesOf(req.kv_dtype);
  r.bandwidth = *gpu.mem_bw_gbps * 1e9 * d.serve_bw_efficiency;
  r.peak_flops = *peak * 1e12;
  r.decode_mfu = d.serve_decode_mfu;
  r.overhead_s = d.serve_step_overhead_ms / 1e3;
  const double P = load.prompt_tokens, G = load.completion_tokens;
  r.ctx_mean = P + G / 2;
  // A prompt: 2 FLOPs per weight per token through the blocks, the LM head for its last token only, and
  // causal attention (QK^T and AV over half the square).
  const double prefill_flops = P * 2 * 12 * L * C * C + 2 * C * V + 2 * L * C * P * P;
  r.prefill_s = prefill_flops / (r.peak_flops * d.serve_prefill_mfu);
  r.decode_flops = 2 * matmul_params + 4 * L * C * r.ctx_mean;
  if (req.lora_adapters > 0) {  // the adapters (InferenceModel::AddAdapter); products x A^T and (.) (sB)^T
    const LoraSpec spec{req.lora_rank, 1.0f, kLoraAllTargets};
    r.adapter_bytes = static_cast<double>(req.LoraInMemory()) * static_cast<double>(LoraParamCount(m, spec)) *
                      AdapterBytesPerParam(req.weights);
    r.weight_bytes += r.adapter_bytes;
    r.decode_flops += 2 * static_cast<double>(LoraParamCount(m, spec));
  }
  const double usable = gpu.mem_gib * (1 << 30) * d.mem_usable_fraction - d.mem_reserve_gib * (1 << 30);
  const double per_seq = r.kv_bytes_per_token * (P + G);  // tern serve reserves the whole request's blocks
  r.max_batch =
      static_cast<int>(std::min<double>(d.serve_max_batch, std::floor((usable - r.weight_bytes) / per_seq)));
  if (r.max_batch < 1) {
    *why =
        fmt::format("{} weights ({}) and one request's KV cache ({}) exceed the {:.0f} GiB usable of {}",
                    req.weights, FormatGiB(r.weight_bytes), FormatGiB(per_seq), usable / (1 << 30), gpu.name);
    return std::nullopt;
  }
  return r;
}

double ReplicaModel::StepSeconds(double b, double rows) const {
  return overhead_s + std::max((weight_bytes + b * kv_bytes_per_token * ctx_mean) / bandwidth,
                               b * rows * decode_flops / (peak_flops * decode_mfu));
}

PlanDefaults ServeCalibration::Apply(const PlanDefaults& d) const {
  PlanDefaults c = d;
  c.serve_bw_efficiency = bw_efficiency;
  c.serve_decode_mfu = decode_mfu;
  c.serve_prefill_mfu = prefill_mfu;
  c.serve_step_overhead_ms = overhead_ms;
  return c;
}

ReplicaState ReplicaModel::At(double lambda, const ServeLoad& load) const {
  ReplicaState s;
  s.rho = lambda * prefill_s;
  if (s.rho >= 1) {
    s.why = fmt::format("prefill alone needs {:.2f} of the GPU's time at this rate", s.rho);
    return s;
  }
  // b = lambda * G * t(b + 1) / (tau (1 - rho)), t(b) = overhead + max(W + b KV, b r F) in seconds: each
  // sequence needs G / tau steps of r rows (speculative decoding: tau tokens per step, r = 1 + drafts; else
  // both 1). A token waits for the step it is in, and the steps are not alike: with Poisson arrivals the
  // sequences decoding at once are Poisson distributed with mean b (M/G/inf), and a sequence sees the others
  // (Poisson, mean b) besides itself, so its steps hold b + 1 on average and, t being linear on each branch,
  // last t(b + 1). A lone request decodes in steps of one, not of the mean batch.
  const double tau = load.TokensPerStep(), rows = load.RowsPerStep();
  const double k = lambda * load.completion_tokens / (tau * (1 - s.rho));
  const double a_mem = overhead_s + weight_bytes / bandwidth;
  const double s_mem = kv_bytes_per_token * ctx_mean / bandwidth;
  const double s_flop = rows * decode_flops / (peak_flops * decode_mfu);
  const double b_mem = FixedPoint(k, a_mem + s_mem, s_mem),
               b_flop = FixedPoint(k, overhead_s + s_flop, s_flop);
  if (b_mem < 0 || b_flop < 0) {
    s.why = "decoding cannot keep up with the arrivals (the batch grows without bound)";
    return s;
  }
  s.batch = std::max(b_mem, b_flop);
  s.memory_bound = b_mem >= b_flop;
  s.step_s = StepSeconds(s.batch, rows);
  s.tpot_s = StepSeconds(s.batch + 1, rows) / (tau * (1 - s.rho));
  s.ttft_s = prefill_s / (1 - s.rho) + s.step_s;
  if (s.batch > max_batch) {
    s.why =
        fmt::format("{:.0f} sequences decoding at once, but memory holds {}", std::ceil(s.batch), max_batch);
    return s;
  }
  if (s.tpot_s * 1e3 > load.max_tpot_ms) {
    s.why = fmt::format("{:.1f} ms per output token > --max-tpot-ms {:g}", s.tpot_s * 1e3, load.max_tpot_ms);
    return s;
  }
  if (load.max_ttft_s > 0 && s.ttft_s > load.max_ttft_s) {
    s.why = fmt::format("{:.2f} s to the first token > --max-ttft {:g} s", s.ttft_s, load.max_ttft_s);
    return s;
  }
  s.feasible = true;
  return s;
}

namespace {

// The most requests/s one replica takes within the targets (bisection on the feasible prefix of rates).
double ReplicaCapacity(const ReplicaModel& r, const ServeLoad& load) {
  double lo = 0, hi = 1.0 / r.prefill_s;
  if (!r.At(1e-9, load).feasible) return 0;
  for (int i = 0; i < 60; i++) {
    const double mid = (lo + hi) / 2;
    (r.At(mid, load).feasible ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace

Result<ServePlan> MakeServePlan(const Catalog& cat, const ServeRequest& req, const PlanDefaults& d) {
  const ServeLoad& load = req.load;
  if (!(load.requests_per_s > 0) || load.prompt_tokens < 1 || load.completion_tokens < 1)
    return Status::InvalidArgument(
        "--requests-per-s, --prompt-tokens and --completion-tokens must be positive, e.g. --requests-per-s 5 "
        "--prompt-tokens 512 --completion-tokens 256");
  if (!(load.max_tpot_ms > 0)) return Status::InvalidArgument("--max-tpot-ms must be positive, e.g. 50");
  if (!(load.speculative_tokens >= 0 && load.speculative_tokens <= 64) ||
      !(load.acceptance >= 0 && load.acceptance <= 1))
    return Status::InvalidArgument(
        "--speculative-tokens must be 0..64 (mean draft tokens per decode step) and --acceptance 0..1 (the "
        "share of them kept; `tern diagnose --serve` measures both on a server)");
  if (req.weights != "fp32" && req.weights != "bf16" && req.weights != "int8" && req.weights != "int4")
    return Status::InvalidArgument("--weights must be fp32, bf16, int8 or int4 (tern serve --weights)");
  const bool cpu_calibrated = req.calibration && req.calibration->device == "cpu";
  if (req.weights == "int4" && !cpu_calibrated)
    return Status::InvalidArgument(
        "--weights int4 runs on tern serve's CPU path only: plan it from a CPU's measurement (tern bench "
        "--serve --weights int4 --json > serve.json, then --calibrate serve.json --instance local), or plan "
        "GPUs with --weights int8 or bf16");
  if (req.kv_dtype != "fp32" && req.kv_dtype != "bf16" && !(cpu_calibrated && req.kv_dtype == "int8"))
    return Status::InvalidArgument(
        "--kv-dtype must be fp32 or bf16 (tern serve's int8 KV cache runs on the CPU only: a CPU's "
        "--calibrate with --instance local)");
  if (req.lora_adapters < 0 || (req.lora_adapters > 0 && req.lora_rank < 1))
    return Status::InvalidArgument("--lora-adapters must be 0 or more, with --lora-rank of at least 1");
  if (req.max_loaded_loras < 0 || (req.max_loaded_loras > 0 && req.lora_adapters == 0))
    return Status::InvalidArgument(
        "--max-loaded-loras must be 0 (all in memory) or more, and needs --lora-adapters N (the adapters "
        "served)");
  if (req.lora_adapters > 0) {
    const LoraSpec spec{req.lora_rank, 1.0f, kLoraAllTargets};
    TERN_RETURN_IF_ERROR(spec.Validate(req.model).WithContext("--lora-rank"));
  }
  if (load.prompt_tokens + load.completion_tokens > req.model.block_size)
    return Status::InvalidArgument(
        fmt::format("a request of {} prompt + {} completion tokens exceeds the model's context of {} tokens",
                    load.prompt_tokens, load.completion_tokens, req.model.block_size));
  ServePlan plan;
  plan.request = req;
  const double burst = load.burst.value_or(d.serve_burst_factor);
  const double rate = load.requests_per_s * burst;
  const double discount = req.reserved_discount.value_or(d.reserved_discount);
  for (size_t i = 0; i < cat.offers.size(); i++) {
    const InstanceOffer& o = cat.offers[i];
    if (!Passes(req.providers, o.provider) || !Passes(req.regions, o.region) || !Passes(req.gpus, o.gpu) ||
        !Passes(req.instances, o.instance_type))
      continue;
    const GpuSpec& gpu = cat.GpuOf(o);
    std::string why;
    GpuSpec sized = gpu;
    sized.mem_gib = o.gpu_mem_gib > 0 ? o.gpu_mem_gib : gpu.mem_gib;
    // The local instance is the benchmarked device itself.
    const bool calibrated = req.calibration && (gpu.name == req.calibration->device ||
                                                (o.provider == "local" && gpu.vendor == "local"));
    const std::optional<ReplicaModel> rm =
        MakeReplicaModel(sized, req, calibrated ? req.calibration->Apply(d) : d, &why);
    for (Billing b : req.billing) {
      if (o.provider == "local" && b != Billing::kOnDemand)
        continue;  // the machine at hand: --price-per-hour
      const std::optional<double> listed = b == Billing::kSpot ? o.price_spot_hr : o.price_ondemand_hr;
      if (!rm) {
        plan.excluded.push_back({i, BillingName(b), why});
        continue;
      }
      if (!listed) {
        plan.excluded.push_back({i, BillingName(b), std::string("no ") + BillingName(b) + " price"});
        continue;
      }
      const int g = std::max(1, o.gpu_count);
      ServeRow row;
      row.offer = i;
      row.billing = b;
      // The fewest instances whose replicas, sharing the burst rate evenly, all meet the targets.
      for (int n = 1; n <= req.max_instances; n++) {
        ReplicaState st = rm->At(rate / (n * g), load);
        if (st.feasible || n == req.max_instances) {
          row.instances = n;
          row.state = st;
          break;
        }
      }
      if (!row.state.feasible) {
        plan.excluded.push_back(
            {i, BillingName(b), fmt::format("even {} instances: {}", req.max_instances, row.state.why)});
        continue;
      }
      row.replicas = row.instances * g;
      row.calibrated = calibrated;
      row.capacity_rps = ReplicaCapacity(*rm, load) * row.replicas;
      row.price_hr = b == Billing::kReserved ? *listed * (1 - discount) : *listed;
      row.hourly_usd = row.price_hr * row.instances;
      row.usd_per_mtok = row.hourly_usd / (load.requests_per_s * load.completion_tokens * 3600) * 1e6;
      row.serve_max_batch =
          std::min(rm->max_batch, std::max(1, static_cast<int>(std::ceil(row.state.batch * 2))));
      row.kv_cache_mb = row.serve_max_batch * rm->kv_bytes_per_token *
                        (load.prompt_tokens + load.completion_tokens) / (1 << 20);
      row.warnings = o.warnings;
      const std::vector<std::string> lacks = NotInTern(gpu, MemoryFit{});
      row.runs = lacks.empty();
      for (const auto& l : lacks) row.runs_why += (row.runs_why.empty() ? "" : "; ") + l;
      if (b == Billing::kSpot) {
        row.risk = "preemption";
        for (const auto& w : o.spot_warnings) row.warnings.push_back(w);
      }
      if (req.budget_usd_per_hour && row.hourly_usd > *req.budget_usd_per_hour) {
        plan.excluded.push_back({i, BillingName(b),
                                 fmt::format("{}/h > --budget {}/h", FormatUsd(row.hourly_usd),
                                             FormatUsd(*req.budget_usd_per_hour))});
        continue;
      }
      plan.rows.push_back(std::move(row));
    }
  }
  std::stable_sort(plan.rows.begin(), plan.rows.end(), [&](const ServeRow& a, const ServeRow& b) {
    if (a.runs != b.runs) return a.runs;
    if (a.hourly_usd != b.hourly_usd) return a.hourly_usd < b.hourly_usd;
    if (a.state.tpot_s != b.state.tpot_s) return a.state.tpot_s < b.state.tpot_s;
    return cat.offers[a.offer].Key() < cat.offers[b.offer].Key();
  });
  const bool all_calibrated =
      !plan.rows.empty() &&
      std::all_of(plan.rows.begin(), plan.rows.end(), [](const ServeRow& r) { return r.calibrated; });
  plan.notes.push_back(fmt::format("one tern serve replica per GPU; sized for {:g} req/s x burst {:g}",
                                   load.requests_per_s, burst));
  if (load.speculative_tokens > 0)
    plan.notes.push_back(fmt::format(
        "speculative decoding: each decode step verifies {:.2g} draft tokens per sequence ({:.2g} rows) and "
        "keeps {:.0f}% of them, {:.2f} tokens per step: a memory-bound step's read is shared by its tokens, "
        "a "
        "compute-bound step pays every row (docs/speculative.md)",
        load.speculative_tokens, load.RowsPerStep(), 100 * load.acceptance, load.TokensPerStep()));
  if (const ServeCalibration* c = req.calibration ? &*req.calibration : nullptr) {
    std::string errors;
    for (const auto& p : c->points)
      errors += fmt::format("{}{} {:.2f}/{:.2f} ms", errors.empty() ? "" : ", ", p.batch, p.model_ms,
                            p.measured_ms);
    plan.notes.push_back(fmt::format(
        "{} rows calibrated from {}: decode at {:.0f}% of {:.0f} GB/s, compute-bound decode at {:.0f}% and "
        "prefill at {:.0f}% of {:.3g} TFLOP/s, {:.2f} ms per step; the fitted step is within {:.0f}% of the "
        "measured one (batch model/measured: {})",
        c->device, c->file, c->bw_efficiency * 100, c->bandwidth_gbps, c->decode_mfu * 100,
        c->prefill_mfu * 100, c->peak_tflops, c->overhead_ms, c->max_error * 100, errors));
    if (!c->compute_bound_seen)
      plan.notes.push_back(fmt::format(
          "the measured decode stayed memory-bound up to batch {}: its compute-bound MFU is a lower bound "
          "(larger batches read conservatively slow; bench larger --batches to measure it)",
          c->points.empty() ? 0 : c->points.back().batch));
  }
  if (!all_calibrated) {
    plan.notes.push_back(fmt::format(
        "{}decode at {:.0f}% of the memory bandwidth, prefill at {:.0f}% MFU, {:g} ms per step (tern "
        "assumptions, docs/serving-plan.md; `tern bench --serve --json` on the GPU measures them)",
        req.calibration ? "other rows: " : "", d.serve_bw_efficiency * 100, d.serve_prefill_mfu * 100,
        d.serve_step_overhead_ms));
    plan.notes.push_back(
        "tern serve's CUDA path has not yet been measured on a GPU (issue 19): the uncalibrated rows are the "
        "model above, not a measurement");
  }
  return plan;
}

std::string RenderServePlan(const ServePlan& p, const Catalog& cat, int top, bool show_excluded, bool ascii) {
  const ServeRequest& r = p.request;
  std::string out = fmt::format(
      "Model {} ({}): {} parameters, {} weights, {} KV cache\n"
      "Load  {:g} requests/s, {} prompt + {} completion tokens each = {} generated tokens/s; "
      "targets: {:g} ms per output token{}\n",
      r.model_label, r.model.ToString(), FormatCount(static_cast<double>(GptParamCount(r.model))), r.weights,
      r.kv_dtype, r.load.requests_per_s, r.load.prompt_tokens, r.load.completion_tokens,
      FormatCount(r.load.requests_per_s * r.load.completion_tokens), r.load.max_tpot_ms,
      r.load.max_ttft_s > 0 ? fmt::format(", {:g} s to the first token", r.load.max_ttft_s) : "");
  if (r.lora_adapters > 0) {
    const double each = static_cast<double>(LoraParamCount(r.model, {r.lora_rank, 1.0f, kLoraAllTargets})) *
                        AdapterBytesPerParam(r.weights);
    const int in_memory = r.LoraInMemory();
    out += fmt::format(
        "LoRA  {} adapters of rank {} on every block matrix (tern serve --lora), {} each in {}, on every "
        "replica{}: planned as read every decode step ({:+.0f}% of the {} weights' bytes)\n",
        r.lora_adapters, r.lora_rank, fmt::format("{:.1f} MB", each / 1e6),
        AdapterBytesPerParam(r.weights) == 4 ? "fp32" : "bf16",
        in_memory < r.lora_adapters
            ? fmt::format(
                  ", {} of them in memory (--max-loaded-loras {}; the others read back when a request "
                  "names one, about a decode step each: docs/finetune.md)",
                  in_memory, in_memory)
            : "",
        100 * in_memory * each / (static_cast<double>(GptParamCount(r.model)) * BytesOf(r.weights)),
        r.weights);
  }
  for (const auto& n : p.notes) out += "Note  " + n + "\n";
  out += "\n";
  std::vector<std::vector<std::string>> cells = {{"#", "provider", "region", "instance", "GPUs", "billing",
                                                  "replicas", "batch", "TPOT ms", "TTFT s", "capacity", "$/h",
                                                  "$/month", "$/1M tok", "risk", "runs"}};
  const std::vector<bool> right = {true, false, false, false, false, false, true,  true,
                                   true, true,  true,  true,  true,  true,  false, false};
  const size_t n = std::min(p.rows.size(), static_cast<size_t>(std::max(0, top)));
  for (size_t i = 0; i < n; i++) {
    const ServeRow& row = p.rows[i];
    const InstanceOffer& o = cat.offers[row.offer];
    cells.push_back(
        {fmt::format("{}", i + 1), o.provider, o.region,
         row.instances > 1 ? fmt::format("{} x{}", o.instance_type, row.instances) : o.instance_type,
         fmt::format("{}{}{}", row.replicas, ascii ? "x" : "×", o.gpu), BillingName(row.billing),
         fmt::format("{}", row.replicas), fmt::format("{:.1f}", row.state.batch),
         fmt::format("{:.1f}", row.state.tpot_s * 1e3), fmt::format("{:.3f}", row.state.ttft_s),
         fmt::format("{:.3g} req/s", row.capacity_rps), FormatUsd(row.hourly_usd),
         FormatUsd(row.hourly_usd * 730), FormatUsd(row.usd_per_mtok), row.risk,
         row.runs ? "yes" : "no: " + row.runs_why});
  }
  if (n == 0) {
    out += "No option meets the targets; --show-excluded says why each was dropped.\n";
  } else {
    out += Tabulate(cells, right);
    const ServeRow& best = p.rows[0];
    out += fmt::format(
        "\nBest: {} {} {} ({}): {} replica(s) at {:.0f}% of their capacity for the mean load; run each with\n"
        "  tern serve MODEL --device {} --weights {} --kv-dtype {} --max-batch {} --kv-cache-mb {:.0f}",
        cat.offers[best.offer].provider, cat.offers[best.offer].region, cat.offers[best.offer].instance_type,
        BillingName(best.billing), best.replicas, 100 * r.load.requests_per_s / best.capacity_rps,
        cat.GpuOf(cat.offers[best.offer]).generation == GpuGeneration::kCpu ? "cpu" : "cuda", r.weights,
        r.kv_dtype, best.serve_max_batch, std::ceil(best.kv_cache_mb));
    // tern serve's flag is a whole number of drafts; a measured mean (tern diagnose --serve) is not one.
    if (r.load.speculative_tokens > 0 && r.load.speculative_tokens == std::floor(r.load.speculative_tokens))
      out += fmt::format(" --speculative-tokens {:.0f}", r.load.speculative_tokens);
    if (r.LoraInMemory() < r.lora_adapters) out += fmt::format(" --max-loaded-loras {}", r.LoraInMemory());
    // A spot replica drains at the preemption notice (docs/serving.md, "Shutdown and spot instances").
    const std::string& provider = cat.offers[best.offer].provider;
    if (best.billing == Billing::kSpot && (provider == "aws" || provider == "gcp"))
      out += fmt::format(" \\\n      --notice-url {} --notice-kind {}",
                         provider == "aws" ? "http://169.254.169.254" : "http://metadata.google.internal",
                         provider);
    out += "\n";
    if (best.billing == Billing::kSpot)
      out +=
          "  spot: at a preemption notice the replica drains (accepted requests finish within the notice, "
          "new "
          "ones go to the others); keep on-demand replicas for the base load\n";
  }
  if (show_excluded) {
    out += fmt::format("\nExcluded ({}):\n", p.excluded.size());
    for (const auto& e : p.excluded)
      out += fmt::format("  {} {}: {}\n", cat.offers[e.offer].Key(), e.billing, e.reason);
  } else if (!p.excluded.empty()) {
    out += fmt::format("({} options excluded; --show-excluded lists them)\n", p.excluded.size());
  }
  return out;
}

nlohmann::json ServePlanJson(const ServePlan& p, const Catalog& cat, int top) {
  nlohmann::json j;
  const ServeRequest& r = p.request;
  j["model"] = {{"label", r.model_label}, {"shape", r.model.ToString()}, {"params", GptParamCount(r.model)}};
  j["load"] = {{"requests_per_s", r.load.requests_per_s},
               {"prompt_tokens", r.load.prompt_tokens},
               {"completion_tokens", r.load.completion_tokens},
               {"max_tpot_ms", r.load.max_tpot_ms},
               {"max_ttft_s", r.load.max_ttft_s},
               {"speculative_tokens", r.load.speculative_tokens},
               {"acceptance", r.load.acceptance}};
  j["weights"] = r.weights;
  j["kv_dtype"] = r.kv_dtype;
  j["lora"] = r.lora_adapters > 0 ? nlohmann::json{{"adapters", r.lora_adapters},
                                                   {"rank", r.lora_rank},
                                                   {"in_memory", r.LoraInMemory()}}
                                  : nlohmann::json(nullptr);
  j["notes"] = p.notes;
  j["rows"] = nlohmann::json::array();
  const size_t n = std::min(p.rows.size(), static_cast<size_t>(std::max(0, top)));
  for (size_t i = 0; i < n; i++) {
    const ServeRow& row = p.rows[i];
    const InstanceOffer& o = cat.offers[row.offer];
    j["rows"].push_back({{"provider", o.provider},
                         {"region", o.region},
                         {"instance", o.instance_type},
                         {"gpu", o.gpu},
                         {"billing", BillingName(row.billing)},
                         {"instances", row.instances},
                         {"replicas", row.replicas},
                         {"batch", row.state.batch},
                         {"step_ms", row.state.step_s * 1e3},
                         {"tpot_ms", row.state.tpot_s * 1e3},
                         {"ttft_s", row.state.ttft_s},
                         {"memory_bound", row.state.memory_bound},
                         {"capacity_rps", row.capacity_rps},
                         {"usd_per_hour", row.hourly_usd},
                         {"usd_per_month", row.hourly_usd * 730},
                         {"usd_per_mtok", row.usd_per_mtok},
                         {"serve_max_batch", row.serve_max_batch},
                         {"kv_cache_mb", std::ceil(row.kv_cache_mb)},
                         {"risk", row.risk},
                         {"runs", row.runs},
                         {"calibrated", row.calibrated},
                         {"runs_why", row.runs_why},
                         {"warnings", row.warnings}});
  }
  if (const ServeCalibration* c = r.calibration ? &*r.calibration : nullptr) {
    nlohmann::json points = nlohmann::json::array();
    for (const auto& pt : c->points)
      points.push_back({{"batch", pt.batch}, {"measured_ms", pt.measured_ms}, {"model_ms", pt.model_ms}});
    j["calibration"] = {{"file", c->file},
                        {"device", c->device},
                        {"bw_efficiency", c->bw_efficiency},
                        {"bandwidth_gbps", c->bandwidth_gbps},
                        {"decode_mfu", c->decode_mfu},
                        {"prefill_mfu", c->prefill_mfu},
                        {"peak_tflops", c->peak_tflops},
                        {"overhead_ms", c->overhead_ms},
                        {"compute_bound_seen", c->compute_bound_seen},
                        {"max_error", c->max_error},
                        {"points", points}};
  }
  j["excluded_count"] = p.excluded.size();
  return j;
}

}  // namespace tern::plan
