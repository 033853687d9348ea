// tern simulate: a job of W hours replayed on real spot traces under each policy, from many start offsets,
// against a deadline (plan/spot_sim.h; docs/spot-simulation.md).
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/plan_config.h"
#include "plan/calibration.h"
#include "plan/catalog.h"
#include "plan/spot_sim.h"
#include "plan/units.h"

namespace tern::cli {
namespace {

using namespace tern::plan;

struct SimulateFlags {
  std::vector<std::string> traces;
  std::string polarity = "both";
  std::string work, deadline, instance = "aws:us-east-1:p3.2xlarge";
  std::string restart, checkpoint, notice = "2m", interval;  // restart: empty = measured or the default
  std::string calibrate, config;
  std::vector<std::string> overrides;
  std::string policies = "all";
  int starts = 200;
  bool estimate_hazard = false, json = false;
};

struct Prices {
  double spot = 0, ondemand = 0;
  std::string source;  // the catalog row, or "--instance ..." when the zone's region has none
};

// --instance provider:region:type, split.
Result<std::vector<std::string>> SplitInstance(const std::string& instance) {
  std::vector<std::string> p;
  for (size_t a = 0, b; a <= instance.size(); a = b + 1) {
    b = instance.find(':', a);
    if (b == std::string::npos) b = instance.size();
    p.push_back(instance.substr(a, b - a));
  }
  if (p.size() != 3)
    return Status::InvalidArgument(
        fmt::format("--instance {}: write provider:region:type, e.g. aws:us-east-1:p3.2xlarge", instance));
  return p;
}

// The catalog row --instance names.
Result<const InstanceOffer*> FindOffer(const Catalog& cat, const std::string& instance) {
  TERN_ASSIGN_OR_RETURN(std::vector<std::string> p, SplitInstance(instance));
  for (const auto& o : cat.offers) {
    if (o.provider == p[0] && o.region == p[1] && o.instance_type == p[2]) return &o;
  }
  return Status::NotFound(
      fmt::format("--instance {}: not in the catalog ({}); `tern plan --instance {}` lists the regions",
                  instance, fmt::join(cat.files, ", "), p[2]));
}

// The instance's prices in the trace's region when the catalog lists them there, else --instance's.
Result<Prices> PricesFor(const Catalog& cat, const std::string& instance, const std::string& region) {
  TERN_ASSIGN_OR_RETURN(std::vector<std::string> p, SplitInstance(instance));
  const InstanceOffer* given = nullptr;
  const InstanceOffer* here = nullptr;
  for (const auto& o : cat.offers) {
    if (o.provider != p[0] || o.instance_type != p[2]) continue;
    if (o.region == p[1]) given = &o;
    if (o.region == region) here = &o;
  }
  const InstanceOffer* o = here ? here : given;
  if (!o)
    return Status::NotFound(
        fmt::format("--instance {}: not in the catalog ({}); `tern plan --instance {}` lists the regions",
                    instance, fmt::join(cat.files, ", "), p[2]));
  if (!o->price_spot_hr || !o->price_ondemand_hr)
    return Status::NotFound(fmt::format("{}{} lacks a spot or on-demand price", o->where, o->Key()));
  return Prices{*o->price_spot_hr, *o->price_ondemand_hr, o->Key()};
}

Result<double> Hours(const std::string& text, const char* flag) {
  return ParseDurationHours(text, flag);
}

int Fail(const Status& st) {
  std::fprintf(stderr, "tern simulate: %s\n", st.message().c_str());
  return 1;
}

void PrintHazard(const std::vector<SpotTrace>& traces, bool json) {
  nlohmann::json out = nlohmann::json::array();
  if (!json)
    std::printf("%-12s %-13s %-23s %6s %6s %7s %9s %9s\n", "zone", "family", "polarity", "up %", "drops",
                "MTBF h", "outage h", "longest h");
  for (const auto& t : traces) {
    const HazardEstimate h = EstimateHazard(t);
    if (json) {
      out.push_back({{"file", t.file},
                     {"zone", t.zone},
                     {"family", t.family},
                     {"polarity", PolarityName(t.polarity)},
                     {"available_fraction", t.AvailableFraction()},
                     {"preemptions", h.preemptions},
                     {"mtbf_h", h.mtbf_h},
                     {"hazard_per_hr", h.hazard_per_hr},
                     {"mean_outage_h", h.mean_outage_h},
                     {"longest_outage_h", h.longest_outage_h}});
    } else {
      std::printf("%-12s %-13s %-23s %6.1f %6d %7.2f %9.2f %9.1f\n", t.zone.c_str(), t.family.c_str(),
                  std::string(PolarityName(t.polarity)).c_str(), 100 * t.AvailableFraction(), h.preemptions,
                  h.mtbf_h, h.mean_outage_h, h.longest_outage_h);
    }
  }
  if (json) std::printf("%s\n", out.dump(2).c_str());
}

int RunSimulate(const SimulateFlags& f) {
  std::vector<Polarity> polarities;
  if (f.polarity == "both") {
    polarities = {Polarity::kAvailableIfNonzero, Polarity::kUnavailableIfNonzero};
  } else {
    auto p = ParsePolarity(f.polarity);
    if (!p.ok()) return Fail(p.status());
    polarities = {*p};
  }
  std::vector<std::string> paths = f.traces;
  if (paths.empty()) {
    auto dir = FindCatalogDir();
    if (!dir.ok()) return Fail(dir.status());
    paths = {*dir + "/../spot-traces/availability"};
  }
  if (f.estimate_hazard) {
    for (Polarity pol : polarities) {
      auto traces = LoadSpotTraces(paths, pol);
      if (!traces.ok()) return Fail(traces.status());
      PrintHazard(*traces, f.json);
    }
    return 0;
  }
  if (!f.config.empty() && !f.work.empty()) {
    std::fprintf(stderr,
                 "tern simulate: --config and --work-hours both give the job's work; give one (--config: the "
                 "run model's hours on --instance, as `tern plan --config` has them; --work-hours: your own "
                 "figure)\n");
    return 2;
  }
  if (f.work.empty() && f.config.empty())
    return Fail(Status::InvalidArgument(
        "give the job's work: --config CONFIG.yaml [--calibrate bench.json] (the run model's hours on "
        "--instance) or --work-hours H (e.g. 24h)"));
  if (!f.overrides.empty() && f.config.empty())
    return Fail(Status::InvalidArgument("--set overrides a --config's keys; give --config X.yaml"));
  if (f.deadline.empty())
    return Fail(Status::InvalidArgument("--deadline is required (e.g. --deadline 48h)"));
  SimJob job;
  for (auto [text, flag, out] : {std::tuple{&f.work, "--work-hours", &job.work_h},
                                 std::tuple{&f.deadline, "--deadline", &job.deadline_h},
                                 std::tuple{&f.restart, "--restart-overhead", &job.restart_h},
                                 std::tuple{&f.checkpoint, "--checkpoint-time", &job.checkpoint_h},
                                 std::tuple{&f.notice, "--notice", &job.notice_h}}) {
    auto h = text->empty() ? Result<double>(0.0) : Hours(*text, flag);
    if (!h.ok()) return Fail(h.status());
    *out = *h;
  }
  const PlanDefaults defaults;
  auto dir = FindCatalogDir();
  if (!dir.ok()) return Fail(dir.status());
  auto cat = LoadCatalog(ShippedCatalogFiles(*dir), defaults);
  if (!cat.ok()) return Fail(cat.status());
  std::optional<BenchProfile> bench;
  if (!f.calibrate.empty()) {
    auto b = LoadBenchJson(f.calibrate);
    if (!b.ok()) return Fail(b.status());
    bench = std::move(*b);
  }
  // The work: --work-hours, or the planner's whole-run model of --config on one --instance.
  std::string work_source = "--work-hours";
  nlohmann::json work_json = {{"from", "--work-hours"}};
  double state_bytes = 0;  // the run's checkpoint, when the config gives it
  RestartOverhead restart = RestartFor(nullptr, false, {}, 0, 0, false, 0, defaults);
  if (!f.config.empty()) {
    auto offer = FindOffer(*cat, f.instance);
    if (!offer.ok()) return Fail(offer.status());
    PlanRequest req;
    req.calibration = bench;
    Status st = ApplyTrainConfig(f.config, f.overrides, "", bench, &req);
    if (!st.ok()) return Fail(st);
    auto w = WorkOnInstance(*cat, **offer, req, defaults);
    if (!w.ok()) return Fail(w.status());
    job.work_h = w->work_s / 3600;
    state_bytes = w->state_bytes;
    restart = w->restart;
    work_source = fmt::format("{} on 1x {} ({}: tern plan's run model; MFU {}; run overheads {})", f.config,
                              (*offer)->Key(), w->calibrated ? "calibrated" : "defaults", w->mfu_source,
                              w->overheads_source);
    work_json = {{"from", "config"},
                 {"config", f.config},
                 {"instance", (*offer)->Key()},
                 {"calibrated", w->calibrated},
                 {"calibration", bench ? nlohmann::json(bench->file) : nlohmann::json(nullptr)},
                 {"mfu_source", w->mfu_source},
                 {"overheads", w->overheads_source},
                 {"tern_runs_it", w->runs_why.empty()},
                 {"runs_why", w->runs_why.empty() ? nlohmann::json(nullptr) : nlohmann::json(w->runs_why)}};
    if (!w->runs_why.empty()) work_source += fmt::format("; tern train cannot run it there: {}", w->runs_why);
  } else if (bench) {  // the bench's own run: its start-up and its save
    restart = RestartFor(&*bench, true, bench->model, bench->batch, bench->seq, true,
                         bench->run ? bench->run->checkpoint_bytes : 0, defaults);
  }
  std::string restart_source = "--restart-overhead";
  if (f.restart.empty()) {
    job.restart_h = restart.seconds / 3600;
    restart_source = restart.source;
  }
  // One save: --checkpoint-time, else the bench's measured one (scaled to the run's checkpoint), else the
  // default bandwidth for the run's checkpoint, else free.
  std::string ckpt_source = "--checkpoint-time";
  if (f.checkpoint.empty()) {
    const bool measured = bench && bench->run && bench->run->checkpoint_persist_ms >= 0 &&
                          bench->run->checkpoint_copy_ms >= 0 && bench->run->checkpoint_bytes > 0;
    if (bench && !measured && f.config.empty())
      return Fail(Status::InvalidArgument(fmt::format(
          "{} has no measured checkpoint save (run `tern bench --json` without --no-run)", f.calibrate)));
    if (measured) {  // the bench's measured save: bytes over the copy + persist time
      const BenchRunTimes& t = *bench->run;
      const double bytes = state_bytes > 0 ? state_bytes : t.checkpoint_bytes;
      job.checkpoint_h =
          bytes / t.checkpoint_bytes * (t.checkpoint_copy_ms + t.checkpoint_persist_ms) / 3.6e6;
      ckpt_source = fmt::format("measured by {}", f.calibrate);
    } else if (state_bytes > 0) {
      job.checkpoint_h = state_bytes / (defaults.checkpoint_write_gb_per_s * 1e9) / 3600;
      ckpt_source = fmt::format("default: {:.2g} GB at checkpoint_write_gb_per_s {:g}", state_bytes / 1e9,
                                defaults.checkpoint_write_gb_per_s);
    } else {
      ckpt_source = "free: give --checkpoint-time or --calibrate";
    }
  }
  if (!f.interval.empty()) {
    auto h = Hours(f.interval, "--ckpt-interval");
    if (!h.ok()) return Fail(h.status());
    job.interval_h = *h;
  }
  if (!(job.work_h > 0) || !(job.deadline_h > 0) || f.starts < 1)
    return Fail(Status::InvalidArgument("the work, --deadline and --starts must be positive"));
  auto policies = ParseSpotPolicies(f.policies);
  if (!policies.ok()) return Fail(policies.status());

  const auto t0 = std::chrono::steady_clock::now();
  nlohmann::json out = {{"work_h", job.work_h},
                        {"work_source", work_json},
                        {"restart_source", restart_source},
                        {"deadline_h", job.deadline_h},
                        {"restart_h", job.restart_h},
                        {"checkpoint_h", job.checkpoint_h},
                        {"checkpoint_source", ckpt_source},
                        {"notice_h", job.notice_h},
                        {"starts", f.starts},
                        {"results", nlohmann::json::array()}};
  // Under a minute in seconds (a measured restart or save), else as FormatHours has it.
  auto dur = [](double h) { return h < 1.0 / 60 ? fmt::format("{:.1f} s", h * 3600) : FormatHours(h); };
  std::string text = fmt::format(
      "Job: {} of work, deadline {}, restart {}, checkpoint {} ({}), notice {}, {} starts per trace\n"
      "Work: {}\nRestart: {}\n",
      dur(job.work_h), FormatHours(job.deadline_h), dur(job.restart_h), dur(job.checkpoint_h), ckpt_source,
      FormatHours(job.notice_h), f.starts, work_source, restart_source);
  for (Polarity pol : polarities) {
    auto traces = LoadSpotTraces(paths, pol);
    if (!traces.ok()) return Fail(traces.status());
    text += fmt::format("\nPolarity: {}\n{:<12} {:<17} {:>9} {:>9} {:>9} {:>7} {:>8} {:>6} {:>7} {:>7}\n",
                        PolarityName(pol), "zone", "policy", "mean $", "p50 $", "p95 $", "vs OD", "p95 wall",
                        "miss", "preempt", "lost h");
    for (const SpotTrace& t : *traces) {
      auto prices = PricesFor(*cat, f.instance, t.Region());
      if (!prices.ok()) return Fail(prices.status());
      SimJob j = job;
      j.spot_usd_h = prices->spot;
      j.ondemand_usd_h = prices->ondemand;
      for (const SimStats& s : SimulateStarts(t, j, *policies, f.starts)) {
        text += fmt::format(
            "{:<12} {:<17} {:>9.2f} {:>9.2f} {:>9.2f} {:>6.0f}% {:>7.1f}h {:>5.0f}% {:>7.1f} {:>7.2f}\n",
            t.zone, std::string(SpotPolicyName(s.policy)), s.mean_cost, s.p50_cost, s.p95_cost,
            100 * s.vs_ondemand, s.p95_wall_h, 100 * s.miss_rate, s.mean_preemptions, s.mean_lost_h);
        out["results"].push_back({{"file", t.file},
                                  {"zone", t.zone},
                                  {"polarity", PolarityName(t.polarity)},
                                  {"prices", prices->source},
                                  {"spot_usd_h", j.spot_usd_h},
                                  {"ondemand_usd_h", j.ondemand_usd_h},
                                  {"interval_h", SimIntervalHours(j, t)},
                                  {"policy", SpotPolicyName(s.policy)},
                                  {"runs", s.runs},
                                  {"mean_cost_usd", s.mean_cost},
                                  {"p50_cost_usd", s.p50_cost},
                                  {"p95_cost_usd", s.p95_cost},
                                  {"vs_ondemand", s.vs_ondemand},
                                  {"mean_wall_h", s.mean_wall_h},
                                  {"p95_wall_h", s.p95_wall_h},
                                  {"miss_rate", s.miss_rate},
                                  {"mean_preemptions", s.mean_preemptions},
                                  {"mean_lost_h", s.mean_lost_h},
                                  {"spot_share", s.spot_share}});
      }
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out["elapsed_s"] = secs;
  if (f.json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::fputs(text.c_str(), stdout);
    std::printf("\nvs OD: mean cost over on-demand's; miss: starts that missed the deadline. %.2f s.\n",
                secs);
  }
  return 0;
}

}  // namespace

void AddSimulateCommand(CLI::App& root, CommandTable& table) {
  auto f = std::make_shared<SimulateFlags>();
  auto* sub = root.add_subcommand(
      "simulate", "Replay real spot traces: what a deadline-bound job costs under each spot policy");
  sub->add_option(
      "--trace", f->traces,
      "trace files or directories of *.json (default: the shipped data/spot-traces/availability)");
  sub->add_option("--polarity", f->polarity,
                  "how to read an availability trace: available-if-nonzero, unavailable-if-nonzero, or both "
                  "(default; data/spot-traces/README.md says why)");
  sub->add_option("--work-hours", f->work,
                  "hours of work on one instance, e.g. 24h (from `tern plan`'s row); or --config");
  sub->add_option("--config", f->config,
                  "a tern train config: the work is its whole run on one --instance, from tern plan's run "
                  "model (calibrated by --calibrate when the bench ran on that GPU)");
  sub->add_option("--set", f->overrides, "with --config: override a key, as tern train does (repeatable)");
  sub->add_option("--deadline", f->deadline, "finish within, e.g. 48h");
  sub->add_option("--instance", f->instance,
                  "provider:region:type for the prices; each trace's own region when the catalog lists it "
                  "(default aws:us-east-1:p3.2xlarge, the traces' instance)");
  sub->add_option("--restart-overhead", f->restart,
                  "start-up + resume on a new instance (default: measured by --calibrate's bench, else 10m)");
  sub->add_option("--checkpoint-time", f->checkpoint,
                  "one checkpoint save, e.g. 90s (default: measured by --calibrate; with --config, the run's "
                  "checkpoint at 1 GB/s; else free)");
  sub->add_option("--calibrate", f->calibrate,
                  "a `tern bench --json` file: its measured save time and restart (start-up + resume); with "
                  "--config, its MFU and run times for the work");
  sub->add_option("--notice", f->notice, "preemption notice; a save that fits loses nothing (default 2m)");
  sub->add_option("--ckpt-interval", f->interval,
                  "work between saves on spot (default: Young/Daly per zone)");
  sub->add_option("--policy", f->policies, "on-demand,spot,uniform-progress,omniscient or all (default)");
  sub->add_option("--starts", f->starts, "start offsets spread over each trace (default 200)");
  sub->add_flag("--estimate-hazard", f->estimate_hazard,
                "print each trace's availability, preemptions, MTBF and outages, and stop");
  sub->add_flag("--json", f->json, "the results as JSON");
  sub->footer(
      "\nPolicies: on-demand only; spot only (waits while spot is down); uniform-progress (Can't Be Late,\n"
      "NSDI 2024: on-demand when behind the straight line to the deadline, spot whenever available, "
      "hysteresis\n"
      "of 2x the restart overhead, a safety net near the deadline); omniscient (knows the trace: a lower "
      "bound).\n"
      "Examples:\n"
      "  tern simulate --work-hours 24h --deadline 48h\n"
      "  tern simulate --config configs/demo.yaml --calibrate bench.json --deadline 48h \\\n"
      "      --instance aws:us-east-1:p3.2xlarge        # the work from tern plan's run model\n"
      "  tern simulate --trace data/spot-traces/availability --polarity available-if-nonzero \\\n"
      "      --work-hours 24h --deadline 30h --restart-overhead 5m --calibrate bench.json --json\n"
      "  tern simulate --estimate-hazard\n"
      "Model, rules and the traces' source: docs/spot-simulation.md.\n");
  table.Add(sub, [f] { return RunSimulate(*f); });
}

}  // namespace tern::cli
