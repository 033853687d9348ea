// `tern plan`: which GPU instance, how many, where and on which billing finishes a training job
// cheapest. Parses flags into a PlanRequest, loads the catalog, runs the planner, prints.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cli/command.h"
#include "cli/plan_config.h"
#include "core/file_util.h"
#include "plan/calibration.h"
#include "plan/catalog.h"
#include "plan/explain.h"
#include "plan/link_calibration.h"
#include "plan/model_spec.h"
#include "plan/planner.h"
#include "plan/report.h"
#include "plan/serve_calibration.h"
#include "plan/serve_plan.h"
#include "plan/units.h"

namespace tern::cli {
namespace {

using namespace tern::plan;

struct PlanFlags {
  std::string model, params, tokens, deadline, budget, batch_tokens, spot_mtbf;
  std::string providers, regions, gpus, instance, billing;  // billing empty: every one (serving: no spot)
  std::string precision = "auto", zero = "auto", recompute = "auto";
  std::string config;
  std::vector<std::string> calibrate, catalogs, overrides, spot_traces;
  std::string polarity = "available-if-nonzero";
  int seq = 0, max_gpus = 64, top = 10, explain = 0, lora_rank = -1;  // -1: --config's train.lora (or off)
  int lora_adapters = 0;     // --serve: LoRA adapters served beside the model (tern serve --lora)
  int max_loaded_loras = 0;  // --serve: of which in memory at once (tern serve --max-loaded-loras)
  double price_per_hour = 0, local_mem_gib = 0, reserved_discount = -1, reserved_utilization = 0;
  double dataset_gb = -1, data_egress = -1;
  bool json = false, csv = false, show_excluded = false, show_defaults = false, strict = false,
       no_shipped = false, ascii = false;
  // --serve: the serving plan (plan/serve_plan.h)
  bool serve = false;
  double requests_per_s = 0, max_tpot_ms = 100, max_ttft_s = 0, burst = -1;
  double speculative_tokens = 0, acceptance = -1;  // --speculative-tokens, --acceptance (-1: not given)
  int prompt_tokens = 512, completion_tokens = 256;
  std::string weights, kv_dtype;  // empty: the --calibrate serving bench's, else bf16
};

Result<Toggle> ParseToggle(const std::string& s, const char* flag) {
  if (s == "auto") return Toggle::kAuto;
  if (s == "on") return Toggle::kOn;
  if (s == "off") return Toggle::kOff;
  return Status::InvalidArgument(fmt::format("{}: '{}' is not auto, on or off", flag, s));
}

// --recompute: auto (empty), or one mode. 'on' meant whole-block recompute before tern train had a recompute
// of its own; it is refused rather than guessed.
Result<std::optional<ActRecompute>> ParseRecomputeFlag(const std::string& s) {
  if (s == "auto") return std::optional<ActRecompute>();
  if (s == "none" || s == "off") return std::optional<ActRecompute>(ActRecompute::kNone);
  if (s == "gelu") return std::optional<ActRecompute>(ActRecompute::kGelu);
  if (s == "blocks") return std::optional<ActRecompute>(ActRecompute::kBlocks);
  return Status::InvalidArgument(
      fmt::format("--recompute: '{}' is not auto, none, gelu or blocks (gelu = tern train's "
                  "train.recompute=gelu; blocks = "
                  "whole-block recompute, which tern train does not do yet)",
                  s));
}

// --calibrate FILE, repeatable: at most one `tern bench --json` (MFU and run overheads) and any number of
// `tern bench --dist --json` (measured links), told apart by their "tool".
Status LoadCalibrations(const std::vector<std::string>& files, PlanRequest* req) {
  for (const std::string& path : files) {
    Result<std::string> text = ReadFileToString(path);
    if (!text.ok()) return text.status().WithContext("--calibrate");
    if (IsDistBenchJson(*text)) {
      TERN_ASSIGN_OR_RETURN(LinkProfile link, ParseDistBenchJson(*text, path));
      req->links.push_back(std::move(link));
      continue;
    }
    if (req->calibration) {
      return Status::InvalidArgument(
          fmt::format("--calibrate: {} and {} are both `tern bench --json` files; give one (and any number "
                      "of `tern bench "
                      "--dist --json` files)",
                      req->calibration->file, path));
    }
    TERN_ASSIGN_OR_RETURN(req->calibration, ParseBenchJson(*text, path));
  }
  return Status::Ok();
}

// --billing's list, or `otherwise` when it was not given.
Result<std::vector<Billing>> ParseBillings(const std::string& given, const char* otherwise) {
  std::vector<Billing> out;
  for (const auto& b : SplitList(given.empty() ? otherwise : given)) {
    TERN_ASSIGN_OR_RETURN(Billing parsed, ParseBilling(b));
    out.push_back(parsed);
  }
  return out;
}

Result<PlanRequest> BuildRequest(const PlanFlags& f) {
  PlanRequest req;
  TERN_RETURN_IF_ERROR(LoadCalibrations(f.calibrate, &req));
  if (!f.config.empty()) {
    if (!f.model.empty() || !f.params.empty()) {
      return Status::InvalidArgument(
          "--config takes the model from the training config; drop --model/--params");
    }
    if (!f.batch_tokens.empty() || f.seq > 0) {
      return Status::InvalidArgument(
          "--config takes T and the tokens per step from the config; use --set train.seq_len=T / "
          "--set train.total_batch_tokens=N");
    }
    TERN_RETURN_IF_ERROR(ApplyTrainConfig(f.config, f.overrides, f.tokens, req.calibration, &req));
  } else {
    if (!f.overrides.empty())
      return Status::InvalidArgument("--set overrides a --config's keys; give --config X.yaml");
    TERN_ASSIGN_OR_RETURN(ModelChoice m, ResolveModel(f.model, f.params));
    req.workload.cfg = m.cfg;
    req.workload.model_label = m.label;
    req.workload.seq = f.seq;
    if (f.tokens.empty())
      return Status::InvalidArgument("--tokens is required (e.g. --tokens 10B), or give --config");
    TERN_ASSIGN_OR_RETURN(req.workload.tokens, ParseCount(f.tokens, "--tokens"));
    if (!f.batch_tokens.empty()) {
      TERN_ASSIGN_OR_RETURN(req.workload.global_batch_tokens, ParseCount(f.batch_tokens, "--batch-tokens"));
    }
  }
  if (f.lora_rank >= 0) {  // the adapters of every block matrix (train.lora.targets=all) at this rank
    req.workload.lora.rank = f.lora_rank;
    req.workload.lora.targets = kLoraAllTargets;
    TERN_RETURN_IF_ERROR(req.workload.lora.Validate(req.workload.cfg).WithContext("--lora-rank"));
  }
  TERN_ASSIGN_OR_RETURN(req.workload.zero1, ParseToggle(f.zero, "--zero"));
  TERN_ASSIGN_OR_RETURN(std::optional<ActRecompute> recompute, ParseRecomputeFlag(f.recompute));
  if (recompute || f.config.empty()) req.workload.recompute = recompute;  // auto with --config: the config's
  if (!f.deadline.empty()) {
    TERN_ASSIGN_OR_RETURN(req.deadline_h, ParseDurationHours(f.deadline, "--deadline"));
  }
  if (!f.budget.empty()) {
    TERN_ASSIGN_OR_RETURN(req.budget_usd, ParseMoney(f.budget, "--budget"));
  }
  if (!f.spot_mtbf.empty()) {
    TERN_ASSIGN_OR_RETURN(double mtbf_h, ParseDurationHours(f.spot_mtbf, "--spot-mtbf"));
    req.spot_hazard_per_hr = 1.0 / mtbf_h;
  }
  if (!f.spot_traces.empty()) {
    TERN_ASSIGN_OR_RETURN(Polarity pol, ParsePolarity(f.polarity));
    TERN_ASSIGN_OR_RETURN(req.spot_traces, LoadSpotTraces(f.spot_traces, pol));
  }
  req.max_gpus = f.max_gpus;
  req.providers = SplitList(f.providers);
  req.regions = SplitList(f.regions);
  req.gpus = SplitList(f.gpus);
  req.instances = SplitList(f.instance);
  TERN_ASSIGN_OR_RETURN(req.billing, ParseBillings(f.billing, "on-demand,spot,reserved"));
  if (f.precision == "bf16")
    req.precision = PrecisionMode::kBf16;
  else if (f.precision == "fp32")
    req.precision = PrecisionMode::kFp32;
  else if (f.precision != "auto")
    return Status::InvalidArgument("--precision must be auto, bf16 or fp32");
  if (f.reserved_discount >= 0) {
    if (f.reserved_discount >= 1)
      return Status::InvalidArgument("--reserved-discount is a fraction in [0, 1), e.g. 0.35");
    req.reserved_discount = f.reserved_discount;
  }
  if (f.reserved_utilization < 0 || f.reserved_utilization > 1) {
    return Status::InvalidArgument("--reserved-utilization is a fraction in (0, 1], e.g. 0.8");
  }
  req.reserved_utilization = f.reserved_utilization;
  if (f.dataset_gb >= 0) req.dataset_gb = f.dataset_gb;
  if (f.data_egress >= 0) req.dataset_egress_usd_per_gb = f.data_egress;
  req.strict_catalog = f.strict;
  return req;
}

Result<Catalog> LoadPlanCatalog(const PlanFlags& f, const PlanDefaults& defaults) {
  std::vector<std::string> files;
  if (!f.no_shipped) {
    TERN_ASSIGN_OR_RETURN(std::string dir, FindCatalogDir());
    files = ShippedCatalogFiles(dir);
  }
  files.insert(files.end(), f.catalogs.begin(), f.catalogs.end());
  if (files.empty())
    return Status::InvalidArgument("no catalog: drop --no-shipped-catalog or pass --catalog FILE");
  return LoadCatalog(files, defaults);
}

// tern plan --serve: the model, the load and the targets in, the cheapest way to serve it out.
Result<int> RunServePlan(const PlanFlags& f, const PlanDefaults& defaults) {
  if (!f.tokens.empty() || !f.config.empty() || !f.deadline.empty())
    return Status::InvalidArgument(
        "--serve plans serving, not a training job: drop --tokens, --config and --deadline");
  if (f.calibrate.size() > 1)
    return Status::InvalidArgument("--serve takes one --calibrate: a `tern bench --serve --json` file");
  if (f.requests_per_s <= 0)
    return Status::InvalidArgument("--serve needs the load: --requests-per-s N (mean requests per second)");
  ServeRequest req;
  std::optional<ServeBenchProfile> bench;
  if (!f.calibrate.empty()) {
    TERN_ASSIGN_OR_RETURN(bench, LoadServeBenchJson(f.calibrate.front()));
  }
  if (bench && f.model.empty() && f.params.empty()) {  // the measured model
    req.model = bench->model;
    req.model_label = "the bench's model";
  } else {
    TERN_ASSIGN_OR_RETURN(ModelChoice m, ResolveModel(f.model, f.params));
    req.model = m.cfg;
    req.model_label = m.label;
  }
  req.load.requests_per_s = f.requests_per_s;
  req.load.prompt_tokens = f.prompt_tokens;
  req.load.completion_tokens = f.completion_tokens;
  req.load.max_tpot_ms = f.max_tpot_ms;
  req.load.max_ttft_s = f.max_ttft_s;
  if (f.burst > 0) req.load.burst = f.burst;
  if (f.speculative_tokens > 0 && f.acceptance < 0)
    return Status::InvalidArgument(
        "--speculative-tokens needs --acceptance A: the share of draft tokens kept (accepted / drafted; "
        "`tern diagnose --serve` or `tern generate --stats` measures it)");
  req.load.speculative_tokens = f.speculative_tokens;
  req.load.acceptance = std::max(0.0, f.acceptance);
  if (bench) {
    // The fitted constants are those of the measured formats: planning others from them would be a guess.
    for (const auto& [flag, given, measured] :
         {std::tuple<const char*, std::string, std::string>{"--weights", f.weights, bench->weights},
          {"--kv-dtype", f.kv_dtype, bench->kv_dtype}})
      if (!given.empty() && given != measured)
        return Status::InvalidArgument(
            fmt::format("{} {}, but {} measured {}: drop {} or bench again with tern bench --serve {} {}",
                        flag, given, f.calibrate.front(), measured, flag, flag, given));
  }
  req.weights = !f.weights.empty() ? f.weights : bench ? bench->weights : "bf16";
  req.kv_dtype = !f.kv_dtype.empty() ? f.kv_dtype : bench ? bench->kv_dtype : "bf16";
  req.lora_adapters = f.lora_adapters;
  req.max_loaded_loras = f.max_loaded_loras;
  if (f.lora_rank > 0) req.lora_rank = f.lora_rank;
  req.providers = SplitList(f.providers);
  req.regions = SplitList(f.regions);
  req.gpus = SplitList(f.gpus);
  req.instances = SplitList(f.instance);
  // A preemption takes a replica away (tern serve drains it within the notice): spot only when asked for.
  TERN_ASSIGN_OR_RETURN(req.billing, ParseBillings(f.billing, "on-demand,reserved"));
  if (f.reserved_discount >= 0) req.reserved_discount = f.reserved_discount;
  if (!f.budget.empty()) {
    TERN_ASSIGN_OR_RETURN(req.budget_usd_per_hour, ParseMoney(f.budget, "--budget"));
  }
  req.max_instances = std::max(1, f.max_gpus);
  TERN_ASSIGN_OR_RETURN(Catalog cat, LoadPlanCatalog(f, defaults));
  if (!req.instances.empty() && req.instances.front() == "local") {
    if (!bench)
      return Status::InvalidArgument(
          "--serve --instance local needs --calibrate serve.json (from `tern bench --serve --json` on this "
          "machine)");
    const double mem = f.local_mem_gib > 0 ? f.local_mem_gib : bench->device == "cpu" ? HostMemoryGib() : 0;
    TERN_RETURN_IF_ERROR(AddLocalServeInstance(*bench, f.price_per_hour, mem, &cat));
  }
  if (bench) {
    TERN_ASSIGN_OR_RETURN(req.calibration, CalibrateServe(*bench, cat));
  }
  TERN_ASSIGN_OR_RETURN(ServePlan plan, MakeServePlan(cat, req, defaults));
  if (bench && bench->model.ToString() != req.model.ToString())
    plan.notes.push_back(fmt::format(
        "{} measured {}, not the planned {}: its efficiencies are carried over, an extrapolation (bench the "
        "planned model for a measurement)",
        bench->file, bench->model.ToString(), req.model.ToString()));
  if (f.json)
    std::puts(ServePlanJson(plan, cat, f.top).dump(2).c_str());
  else
    std::fputs(RenderServePlan(plan, cat, f.top, f.show_excluded, f.ascii).c_str(), stdout);
  return plan.rows.empty() ? 3 : 0;
}

int RunPlan(const PlanFlags& f) {
  const PlanDefaults defaults;
  if (f.show_defaults) {
    std::fputs(RenderDefaultsMarkdown(defaults).c_str(), stdout);
    return 0;
  }
  auto fail = [](const Status& st) {
    std::fprintf(stderr, "tern plan: %s\n", st.message().c_str());
    return 1;
  };
  if (f.serve) {
    Result<int> code = RunServePlan(f, defaults);
    return code.ok() ? *code : fail(code.status());
  }
  Result<PlanRequest> req = BuildRequest(f);
  if (!req.ok()) return fail(req.status());
  Result<Catalog> cat = LoadPlanCatalog(f, defaults);
  if (!cat.ok()) return fail(cat.status());
  const bool local = !req->instances.empty() && req->instances.front() == "local";
  if (local) {
    if (!req->calibration)
      return fail(Status::InvalidArgument(
          "--instance local needs --calibrate bench.json (from `tern bench --json`)"));
    const double mem =
        f.local_mem_gib > 0 ? f.local_mem_gib : (req->calibration->device == "cpu" ? HostMemoryGib() : 0);
    Status st = AddLocalInstance(*req->calibration, f.price_per_hour, mem, &cat.value());
    if (!st.ok()) return fail(st);
  }
  Result<PlanResult> plan = MakePlan(cat.value(), req.value(), defaults);
  if (!plan.ok()) return fail(plan.status());
  ReportOptions opt;
  opt.top = f.top;
  opt.show_excluded = f.show_excluded;
  opt.ascii = f.ascii;
  if (f.explain > 0) {
    Result<std::string> text = ExplainRow(plan.value(), cat.value(), req.value(), defaults, f.explain);
    if (!text.ok()) return fail(text.status());
    std::fputs(text->c_str(), stdout);
    return 0;
  }
  if (f.json) {
    std::puts(ReportJson(plan.value(), cat.value(), defaults, opt).dump(2).c_str());
  } else if (f.csv) {
    std::fputs(RenderCsv(plan.value(), cat.value(), opt).c_str(), stdout);
  } else {
    std::fputs(RenderReport(plan.value(), cat.value(), opt).c_str(), stdout);
  }
  return plan->rows.empty() ? 3 : 0;
}

}  // namespace

void AddPlanCommand(CLI::App& root, CommandTable& table) {
  auto flags = std::make_shared<PlanFlags>();
  auto* sub = root.add_subcommand(
      "plan", "Choose the GPU instance, count, region and billing that finish a training job cheapest");
  sub->footer(
      "Examples:\n"
      "  tern plan --model gpt2-124m --tokens 10B                    # every option, cheapest first\n"
      "  tern plan --params 1.3B --tokens 26B --deadline 48h --gpus H100,A100-80GB --billing on-demand,spot\n"
      "  tern plan --model configs/demo.yaml --tokens 500M --budget 50 --providers aws,gcp --top 5\n"
      "  tern plan --model gpt2-124m --tokens 10B --explain 1          # the arithmetic of row 1\n"
      "  tern bench --model gpt2-124m --batch 4 --seq 64 --json > bench.json\n"
      "  tern plan --model gpt2-124m --tokens 20M --seq 64 --calibrate bench.json --instance local\n"
      "  tern bench --config configs/demo.yaml --json > bench.json     # then the wall time of that run "
      "here:\n"
      "  tern plan --config configs/demo.yaml --calibrate bench.json --instance local --explain 1\n"
      "  mpirun -np 8 tern bench --dist --json > dist.json           # on an 8-GPU instance, then:\n"
      "  tern plan --model gpt2-124m --tokens 10B --calibrate dist.json --gpus H100 --explain 1\n"
      "  tern plan --serve --model gpt2-124m --requests-per-s 50 --prompt-tokens 512 --completion-tokens "
      "256\n"
      "      --max-tpot-ms 50             # serving: replicas, batch, latency and $ per instance type\n\n"
      "How it decides: FLOPs/token = 6(12LC^2+CV)+12LTC (as the trainer reports MFU); memory per GPU from\n"
      "the trainer's own layout (ZeRO-1 and recomputation only when needed to fit; with --config its "
      "train.recompute);\n"
      "time = FLOPs / (peak x MFU) plus the exposed ring all-reduce; spot adds Young/Daly checkpointing and\n"
      "expected preemptions. The `runs` column says whether tern train can run the row (and why not).\n"
      "Every default: `tern plan --show-defaults`; models and sources: docs/planning.md.\n"
      "Exit status: 0 plans found, 3 no option meets the constraints, 1 error.");
  sub->add_option("--model", flags->model,
                  "preset (" + GptPresetList() + ") or CONFIG.yaml (its model: block)");
  sub->add_option("--params", flags->params,
                  "instead of --model: a GPT-2-shaped model of about this size, e.g. 1.3B");
  sub->add_option("--tokens", flags->tokens, "training tokens, e.g. 10B, 500M");
  sub->add_option("--seq", flags->seq, "sequence length (default: the model's block_size)");
  sub->add_option("--batch-tokens", flags->batch_tokens, "tokens per optimizer step (default 524288 = 2^19)");
  sub->add_option("--deadline", flags->deadline, "exclude plans slower than this, e.g. 48h, 90m, 2d");
  sub->add_option("--budget", flags->budget, "exclude plans dearer than this many USD, e.g. 500");
  sub->add_option("--max-gpus", flags->max_gpus, "most GPUs in one plan (instances x GPUs each)")
      ->capture_default_str();
  sub->add_option("--providers", flags->providers,
                  "only these providers, e.g. aws,gcp (catalog: aws, gcp, azure, lambda)");
  sub->add_option("--regions", flags->regions, "only these regions, e.g. us-east-1,us-central1");
  sub->add_option("--gpus", flags->gpus, "only these GPUs, e.g. H100,A100-80GB");
  sub->add_option("--instance", flags->instance,
                  "only these instance types; `local` = this machine (needs --calibrate)");
  sub->add_option("--billing", flags->billing,
                  "any of on-demand,spot,reserved (default: all three; with --serve on-demand,reserved)");
  sub->add_option("--precision", flags->precision, "auto (bf16 where the GPU has it) | bf16 | fp32")
      ->capture_default_str();
  sub->add_option("--zero", flags->zero, "ZeRO-1 optimizer sharding: auto (only to fit) | on | off")
      ->capture_default_str();
  sub->add_option(
         "--recompute", flags->recompute,
         "activation recomputation: auto (only to fit; --config: its train.recompute) | none | gelu (tern "
         "train's train.recompute=gelu) | blocks (train.recompute=blocks: whole blocks re-run in the "
         "backward)")
      ->capture_default_str();
  sub->add_option("--lora-rank", flags->lora_rank,
                  "plan LoRA fine-tuning (train.lora) of every block matrix at this rank: gradients, AdamW "
                  "moments and the all-reduce are the adapters' (0 = full training; default: --config's)");
  sub->add_option("--spot-mtbf", flags->spot_mtbf,
                  "mean time between spot preemptions per instance, e.g. 6h (default 6h)");
  sub->add_option(
      "--spot-traces", flags->spot_traces,
      "replay spot rows on real traces (files or directories, e.g. data/spot-traces/availability): "
      "Uniform Progress against --deadline, the p95 cost and wall time (`tern simulate` for more)");
  sub->add_option(
         "--polarity", flags->polarity,
         "how to read the availability traces: available-if-nonzero (default) | unavailable-if-nonzero")
      ->capture_default_str();
  sub->add_option("--reserved-discount", flags->reserved_discount,
                  "reserved/committed discount off on-demand (default 0.35)");
  sub->add_option("--reserved-utilization", flags->reserved_utilization,
                  "share of the 1-year term you keep a reservation busy (default: only this job)");
  sub->add_option("--dataset-gb", flags->dataset_gb, "dataset size moved in (default: tokens x 2 bytes)");
  sub->add_option("--data-egress-per-gb", flags->data_egress,
                  "USD per GB to move the dataset in (default 0.09)");
  sub->add_option(
      "--config", flags->config,
      "a tern train config: plan that run (model, batch, steps) incl. start-up, eval, samples, checkpoints");
  sub->add_option("--set", flags->overrides,
                  "with --config: override a key, as tern train does (repeatable)");
  sub->add_option(
      "--calibrate", flags->calibrate,
      "bench.json from `tern bench --json`: use its measured MFU (and run times); or dist.json from "
      "`tern bench --dist --json`: its measured link for the all-reduce (repeatable); with --serve: "
      "serve.json from `tern bench --serve --json`, the measured replica");
  sub->add_option("--price-per-hour", flags->price_per_hour,
                  "price of --instance local per hour (default 0)");
  sub->add_option("--local-mem-gib", flags->local_mem_gib,
                  "memory of --instance local (default: MemTotal or the GPU's)");
  sub->add_option("--catalog", flags->catalogs,
                  "extra catalog CSV (instances, GPU specs or network); repeatable");
  sub->add_flag("--no-shipped-catalog", flags->no_shipped, "use only --catalog files");
  sub->add_flag("--strict-catalog", flags->strict, "exclude options whose catalog row raised a warning");
  sub->add_option("--top", flags->top, "rows to show")->capture_default_str();
  sub->add_flag("--json", flags->json, "print JSON instead of the table");
  sub->add_flag("--csv", flags->csv, "print the ranked rows as CSV instead of the table");
  sub->add_flag("--show-excluded", flags->show_excluded, "list every excluded option with its reason");
  sub->add_option("--explain", flags->explain, "print the arithmetic of ranked row ROW (1 = best)");
  sub->add_flag("--show-defaults", flags->show_defaults, "print every default with its source and exit");
  sub->add_flag("--ascii", flags->ascii, "plain ASCII table");
  auto* serve =
      sub->add_option_group("Serving", "tern plan --serve: the cheapest instances to serve a model");
  serve->add_flag(
      "--serve", flags->serve,
      "plan serving instead of training: replicas of tern serve (one per GPU) for --requests-per-s "
      "within --max-tpot-ms; --model/--params, the filters, --billing, --budget (per hour), "
      "--max-gpus (instances), --top, --json apply");
  serve->add_option("--requests-per-s", flags->requests_per_s, "mean requests per second to serve");
  serve->add_option("--prompt-tokens", flags->prompt_tokens, "mean prompt tokens per request")
      ->capture_default_str();
  serve->add_option("--completion-tokens", flags->completion_tokens, "mean generated tokens per request")
      ->capture_default_str();
  serve
      ->add_option("--max-tpot-ms", flags->max_tpot_ms,
                   "longest time per output token a stream may see, in ms (100 = 10 tokens/s)")
      ->capture_default_str();
  serve->add_option("--max-ttft", flags->max_ttft_s, "longest time to the first token, in s (0 = no target)");
  serve->add_option("--burst", flags->burst,
                    "plan for the mean rate times this (default 1.3, `tern plan --show-defaults`)");
  serve->add_option("--weights", flags->weights,
                    "tern serve --weights: fp32 | bf16 | int8 | int4 (int4: CPU, from a --calibrate bench; "
                    "default bf16, or the bench's)");
  serve->add_option("--kv-dtype", flags->kv_dtype,
                    "tern serve --kv-dtype: fp32 | bf16 (default bf16, or the --calibrate bench's)");
  serve->add_option("--speculative-tokens", flags->speculative_tokens,
                    "tern serve --speculative-tokens: draft tokens each decode step verifies (a mean from "
                    "`tern diagnose --serve` may be fractional); needs --acceptance");
  serve->add_option("--acceptance", flags->acceptance,
                    "with --speculative-tokens: the share of draft tokens kept, 0..1 (docs/speculative.md)");
  serve->add_option("--lora-adapters", flags->lora_adapters,
                    "LoRA fine-tunes served beside the model on each replica (tern serve --lora), of "
                    "--lora-rank (default 16): their memory and the bytes each decode step reads");
  serve->add_option("--max-loaded-loras", flags->max_loaded_loras,
                    "with --lora-adapters: only this many in memory on a replica (tern serve "
                    "--max-loaded-loras; the others read back on demand)");
  table.Add(sub, [flags] { return RunPlan(*flags); });
}

}  // namespace tern::cli
