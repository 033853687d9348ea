#include "plan/planner.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "plan/ranker.h"
#include "plan/units.h"

namespace tern::plan {

const char* BillingName(Billing b) {
  switch (b) {
    case Billing::kOnDemand:
      return "on-demand";
    case Billing::kSpot:
      return "spot";
    case Billing::kReserved:
      return "reserved";
  }
  return "?";
}

Result<Billing> ParseBilling(const std::string& s) {
  if (s == "on-demand" || s == "ondemand" || s == "od") return Billing::kOnDemand;
  if (s == "spot" || s == "preemptible") return Billing::kSpot;
  if (s == "reserved" || s == "committed") return Billing::kReserved;
  return Status::InvalidArgument(fmt::format("--billing: '{}' is not one of on-demand, spot, reserved", s));
}

namespace {

bool EqualsIgnoreCase(const std::string& a, const std::string& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

bool Passes(const std::vector<std::string>& filter, const std::string& value) {
  if (filter.empty()) return true;
  return std::any_of(filter.begin(), filter.end(),
                     [&](const std::string& f) { return EqualsIgnoreCase(f, value); });
}

namespace {

// Everything about one (offer, node count) that does not depend on billing.
struct Shape {
  size_t offer;
  int nodes, gpus;
  Precision precision;
  MemoryFit fit;
  LinkModel link;
  StepModel step;
  std::optional<RunBreakdown> run;
  std::vector<std::string> not_in_tern;
  bool calibrated = false;  // the bench ran on this device: its measured checkpoint save applies
  double work_s() const { return run ? run->total_s() : step.wall_s; }
};

class Planner {
 public:
  Planner(const Catalog& cat, const PlanRequest& req, const PlanDefaults& d, PlanResult* out)
      : cat_(cat), req_(req), d_(d), out_(out), measured_d_(d) {
    // The bench's measured checkpoint save (state copy + persist) for the rows of the device it ran on.
    if (req.calibration && req.calibration->run) {
      const BenchRunTimes& t = *req.calibration->run;
      const double ms = t.checkpoint_copy_ms + t.checkpoint_persist_ms;
      if (t.checkpoint_bytes > 0 && t.checkpoint_persist_ms > 0 && ms > 0) {
        measured_d_.checkpoint_write_gb_per_s = t.checkpoint_bytes / (ms / 1e3) / 1e9;
        measured_save_ = true;
      }
    }
  }

  void Run() {
    used_links_.assign(req_.links.size(), false);
    // The bench's measured restart (start-up + resume) for the spot rows of the device it ran on.
    const Workload& w = out_->workload;
    const BenchProfile* b = req_.calibration ? &*req_.calibration : nullptr;
    for (bool applies : {true, false}) {
      (applies ? restart_ : default_restart_) =
          RestartFor(b, applies, w.spec().cfg,
                     req_.run ? req_.run->micro_batch
                     : b      ? b->batch
                              : 1,
                     w.seq(), req_.run ? req_.run->probe_peak : true, w.checkpoint_bytes(), d_);
    }
    if (restart_.measured) measured_d_.restart_minutes = restart_.seconds / 60;
    if (req_.run) schedule_ = ScheduleRun(*req_.run);
    for (size_t i = 0; i < cat_.offers.size(); ++i) PlanOffer(i);
    if (!req_.spot_traces.empty()) ReplaySpotRows();
  }

 private:
  void Exclude(size_t offer, int nodes, std::optional<Billing> b, const char* category, std::string reason,
               double total = -1, double wall = -1) {
    out_->excluded.push_back(Exclusion{offer, nodes, b, category, std::move(reason), total, wall});
  }

  void PlanOffer(size_t i) {
    const InstanceOffer& o = cat_.offers[i];
    const bool local = o.provider == "local";
    if (!local && (!Passes(req_.providers, o.provider) || !Passes(req_.regions, o.region) ||
                   !Passes(req_.gpus, o.gpu) || !Passes(req_.instances, o.instance_type))) {
      ++out_->filtered;
      return;
    }
    if (local && !req_.instances.empty() && !Passes(req_.instances, "local")) {
      ++out_->filtered;
      return;
    }
    const GpuSpec& g = cat_.GpuOf(o);
    if (g.generation == GpuGeneration::kCdna3) {
      return Exclude(i, 0, std::nullopt, "hardware", fmt::format("{}: tern has no ROCm backend", o.gpu));
    }
    Precision p = Precision::kFp32;
    if (local) {
      p = req_.calibration->precision;
    } else if (req_.precision == PrecisionMode::kBf16) {
      if (!g.SupportsBf16())
        return Exclude(i, 0, std::nullopt, "hardware", fmt::format("{} has no bf16", o.gpu));
      p = Precision::kBf16;
    } else if (req_.precision == PrecisionMode::kAuto && g.SupportsBf16()) {
      p = Precision::kBf16;
    }
    const std::optional<double> peak = g.PeakTflops(p);
    if (!peak) {
      return Exclude(
          i, 0, std::nullopt, "catalog",
          fmt::format("no {} peak TFLOPS for {} in the GPU catalog (add them in a GPU CSV via --catalog)",
                      PrecisionName(p), o.gpu));
    }
    if (o.gpu_count > req_.max_gpus) {
      return Exclude(i, 0, std::nullopt, "max-gpus",
                     fmt::format("instance has {} GPUs > --max-gpus {}", o.gpu_count, req_.max_gpus));
    }
    // MFU: measured for the benchmarked device at its precision, else the documented default.
    double mfu = d_.DefaultMfu(g.generation, out_->workload.params());
    bool calibrated = false;  // the bench ran on this device: its run overheads apply too
    std::string mfu_source = fmt::format("default: {}, {}", GenerationName(g.generation),
                                         out_->workload.params() < 300e6 ? "<300M"
                                         : out_->workload.params() < 1e9 ? "300M-1B"
                                                                         : ">=1B");
    if (req_.calibration) {
      const BenchProfile& b = *req_.calibration;
      // A bench with recompute did more FLOPs than it counts: its rate without recompute is the factor
      // faster (the rows that recompute are then slowed by the same factor, giving the bench's own rate).
      const double undo = RecomputeTimeFactor(PlanRecompute(b.recompute), d_);
      const std::string undone =
          undo == 1.0 ? "" : fmt::format(", x{:.3g} for its recompute={}", undo, RecomputeName(b.recompute));
      if (local) {
        mfu = b.mfu * undo;  // the local spec's peak is the bench's own, so its MFU applies as is
        mfu_source = fmt::format("calibrated: {}{}", b.file, undone);
        used_calibration_ = calibrated = true;
      } else if (!b.DeviceName().empty() && b.DeviceName() == o.gpu && b.precision == p) {
        mfu = b.MfuAgainst(*peak) * undo;
        mfu_source = fmt::format("calibrated: {} achieved {:g} TFLOP/s{}", b.file, b.achieved_tflops, undone);
        used_calibration_ = calibrated = true;
      }
    }
    std::vector<Billing> billings;
    for (Billing b : req_.billing) {
      if (local && b != Billing::kOnDemand) continue;
      const bool has_price =
          (b == Billing::kSpot) ? o.price_spot_hr.has_value() : o.price_ondemand_hr.has_value();
      if (!has_price) {
        Exclude(i, 0, b, "price",
                fmt::format("no {} price in the catalog", b == Billing::kSpot ? "spot" : "on-demand"));
        continue;
      }
      if (req_.strict_catalog && !Warnings(o, b).empty()) {
        Exclude(i, 0, b, "catalog",
                fmt::format("suspicious catalog row (--strict-catalog): {}", Warnings(o, b).front()));
        continue;
      }
      billings.push_back(b);
    }
    if (billings.empty()) return;
    std::optional<RunOverheads> overheads;
    if (req_.run) {
      const Workload& w = out_->workload;
      overheads = calibrated ? req_.calibration->Overheads(w.spec().cfg, req_.run->micro_batch, w.seq(), d_)
                             : DefaultRunOverheads(d_);
    }
    for (int nodes = 1; nodes * o.gpu_count <= req_.max_gpus; nodes *= 2) {
      Shape s{i, nodes, nodes * o.gpu_count, p, {}, {}, {}, {}, {}, calibrated};
      s.fit = out_->workload.Fit(p, o.gpu_mem_gib, s.gpus, d_);
      if (!s.fit.fits) {
        const std::string hint =
            s.fit.would_fit_with == ZeroStage::kNone
                ? ""
                : fmt::format(
                      "; {}{} would fit it, which tern train does not do (its ZeRO-1 shards only the "
                      "AdamW moments)",
                      ZeroStageName(s.fit.would_fit_with),
                      s.fit.would_fit_recompute == ActRecompute::kBlocks ? " + block recompute"
                      : s.fit.would_fit_recompute == ActRecompute::kGelu ? " + GELU recompute"
                                                                         : "");
        Exclude(i, nodes, std::nullopt, "memory",
                fmt::format("needs {}/GPU at micro-batch {}, {} usable{}", FormatGiB(s.fit.need_b1),
                            std::max(1, req_.workload.micro_batch), FormatGiB(s.fit.available), hint));
        continue;
      }
      s.not_in_tern = local ? std::vector<std::string>() : NotInTern(g, s.fit);
      s.link = AllReduceLink(o, g, nodes, d_);
      if (const LinkProfile* lp = FindLinkProfile(req_.links, o, nodes)) {
        s.link = MeasuredLink(*lp, s.gpus, nodes > 1);
        used_links_[static_cast<size_t>(lp - req_.links.data())] = true;
      }
      s.step = ModelStep(out_->workload, s.fit, *peak, mfu, s.gpus, s.link, d_);
      s.step.mfu_source = mfu_source;
      if (overheads) {
        const Workload& w = out_->workload;
        s.run = ModelRun(*req_.run, schedule_, *overheads, s.step.wall_s, s.step.step_s,
                         s.step.tokens_per_step, w.checkpoint_bytes(), w.model_bytes());
        s.run->data_fetch_s = FetchSeconds(o);
      }
      for (Billing b : billings) Cost(s, b);
      if (local) break;
    }
  }

  // A spot row replayed on the traces of its region (all of them as a proxy when none is there): Uniform
  // Progress against the deadline (spot alone without one; then "misses" are runs over 3x the work); the
  // row's wall time and compute cost are the p95 of the runs. A multi-node job reads one trace for all of
  // its instances (they are lost together).
  void SimulateOnTraces(const InstanceOffer& o, PlanRow* r) const {
    std::vector<const SpotTrace*> here, all;
    for (const SpotTrace& t : req_.spot_traces) {
      all.push_back(&t);
      if (t.Region() == o.region) here.push_back(&t);
    }
    SimJob job;
    job.work_h = (r->run ? r->run->total_s() : r->step.wall_s) / 3600;
    job.restart_h = r->spot.restart_s / 3600;
    job.checkpoint_h = r->spot.checkpoint_s / 3600;
    job.spot_usd_h = r->price_hr * r->nodes;
    job.ondemand_usd_h = o.price_ondemand_hr.value_or(0) * r->nodes;
    const bool fallback = req_.deadline_h && o.price_ondemand_hr;
    job.deadline_h = req_.deadline_h.value_or(3 * job.work_h);
    const SpotPolicy policy = fallback ? SpotPolicy::kUniformProgress : SpotPolicy::kSpot;
    const auto& use = here.empty() ? all : here;
    r->spot_sim = SimulatePooled(use, job, policy, req_.spot_starts);
    r->spot_sim_traces =
        here.empty() ? fmt::format("all {} zones as a proxy (none in {})", all.size(), o.region)
                     : fmt::format("{} zone{} of {}", here.size(), here.size() > 1 ? "s" : "", o.region);
    r->wall_s = r->spot_sim->p95_wall_h * 3600;
    r->risk = fmt::format("{} p95 {}, {:.0f}% {}{}", SpotPolicyName(policy), FormatUsd(r->spot_sim->p95_cost),
                          100 * r->spot_sim->miss_rate, req_.deadline_h ? "miss" : "over 3x",
                          here.empty() ? ", proxy traces" : "");
  }

  std::vector<std::string> Warnings(const InstanceOffer& o, Billing b) const {
    std::vector<std::string> w = o.warnings;
    if (b == Billing::kSpot) w.insert(w.end(), o.spot_warnings.begin(), o.spot_warnings.end());
    return w;
  }

  void Cost(const Shape& s, Billing b) {
    const InstanceOffer& o = cat_.offers[s.offer];
    PlanRow r;
    r.offer = s.offer;
    r.nodes = s.nodes;
    r.gpus = s.gpus;
    r.billing = b;
    r.precision = s.precision;
    r.fit = s.fit;
    r.link = s.link;
    r.step = s.step;
    r.run = s.run;
    r.warnings = Warnings(o, b);
    r.runs = s.not_in_tern.empty();
    r.runs_why = fmt::format("{}", fmt::join(s.not_in_tern, "; "));
    r.wall_s = s.work_s();
    const double work_h = s.work_s() / 3600;
    if (b == Billing::kOnDemand) {
      r.price_hr = *o.price_ondemand_hr;
      r.hourly_usd = r.price_hr * s.nodes;  // risk stays "-"
    } else if (b == Billing::kSpot) {
      r.price_hr = *o.price_spot_hr;
      const double hazard =
          req_.spot_hazard_per_hr.value_or(o.spot_hazard_per_hr.value_or(1.0 / d_.spot_mtbf_hours));
      PlanDefaults spot_d = s.calibrated ? measured_d_ : d_;
      const double fetch_s = FetchSeconds(o);
      spot_d.restart_minutes += fetch_s / 60;
      r.spot = ModelSpot(s.work_s(), out_->workload.checkpoint_bytes(), s.nodes, hazard, spot_d);
      r.spot.checkpoint_source =
          s.calibrated && measured_save_
              ? fmt::format("measured: {} (state copy + persist)", req_.calibration->file)
              : fmt::format("default: checkpoint_write_gb_per_s {:g}", d_.checkpoint_write_gb_per_s);
      r.spot.restart_source = (s.calibrated ? restart_ : default_restart_).source;
      if (fetch_s > 0)
        r.spot.restart_source += fmt::format(" + data fetch {:.0f} s ({:.1f} GB at {:g} Gbit/s)", fetch_s,
                                             DatasetGb(), fetch_s > 0 ? DatasetGb() * 8 / fetch_s : 0.0);
      r.hourly_usd = r.price_hr * s.nodes;
      if (!req_.spot_traces.empty()) {
        r.wall_s = r.spot.feasible ? r.spot.expected_wall_s : s.work_s();  // until ReplaySpotRows
      } else {
        if (!r.spot.feasible) {
          return Exclude(
              s.offer, s.nodes, b, "spot",
              fmt::format("job MTBF {} is too short to make progress (restart + lost work {})",
                          FormatHours(r.spot.job_mtbf_h), FormatHours(r.spot.lost_per_preemption_s / 3600)));
        }
        r.wall_s = r.spot.expected_wall_s;
        r.risk = fmt::format("{:.1f} preempt, +{}", r.spot.expected_preemptions,
                             FormatHours(r.spot.time_lost_s / 3600));
      }
    } else {
      r.price_hr = *o.price_ondemand_hr;
      const double discount = req_.reserved_discount.value_or(d_.reserved_discount);
      r.reserved = ModelReserved(r.price_hr, s.nodes, work_h, discount, req_.reserved_utilization, d_);
      if (r.reserved.utilization < r.reserved.break_even_utilization) {
        const std::string busy =
            r.reserved.job_only
                ? fmt::format("this job alone keeps it {:.2g}% busy", 100 * r.reserved.utilization)
                : fmt::format("kept {:.0f}% busy", 100 * r.reserved.utilization);
        return Exclude(s.offer, s.nodes, b, "reserved",
                       fmt::format("{} over a {:g}-h term; pays off only above {:.0f}% busy (commitment {}); "
                                   "pass --reserved-utilization if other work fills it",
                                   busy, d_.reserved_term_hours, 100 * r.reserved.break_even_utilization,
                                   FormatUsd(r.reserved.commitment_usd)));
      }
      r.hourly_usd = r.reserved.effective_hourly * s.nodes;
      r.risk = fmt::format("commit {}", FormatUsd(r.reserved.commitment_usd));
    }
    const bool replay = b == Billing::kSpot && !req_.spot_traces.empty();
    if (auto over = Finish(r); over && !replay) {
      return Exclude(s.offer, s.nodes, b, over->first, over->second, r.total_usd, r.wall_s);
    }
    if (replay) replay_.push_back(out_->rows.size());
    out_->rows.push_back(std::move(r));
  }

  double DatasetGb() const {
    const WorkloadSpec& spec = out_->workload.spec();
    return req_.dataset_gb.value_or(spec.tokens * d_.dataset_bytes_per_token *
                                    (spec.cfg.vocab_size > 65535 ? 2 : 1) / 1e9);
  }

  // data.dir on S3: the seconds a new instance of `o` spends fetching the dataset (0 for local data).
  double FetchSeconds(const InstanceOffer& o) const {
    if (!req_.fetch_data) return 0;
    const double gbps = std::min(o.network_gbps.value_or(d_.default_network_gbps), d_.data_fetch_gbps);
    return DatasetGb() * 8 / gbps;
  }

  // The row's $ from its wall time (or its replayed p95 cost), storage and egress, and its summary; the
  // exclusion category and reason when it misses the deadline or the budget.
  std::optional<std::pair<const char*, std::string>> Finish(PlanRow& r) const {
    const InstanceOffer& o = cat_.offers[r.offer];
    const double wall_h = r.wall_s / 3600;
    r.compute_usd = r.spot_sim ? r.spot_sim->p95_cost : r.hourly_usd * wall_h;
    const Workload& w = out_->workload;
    r.storage = ModelStorageEgress(o.provider, wall_h, w.checkpoint_bytes(), DatasetGb(),
                                   req_.dataset_egress_usd_per_gb.value_or(d_.dataset_egress_usd_per_gb),
                                   w.model_bytes(), d_);
    r.total_usd = r.compute_usd + r.storage.total();
    r.usd_per_mtok = r.total_usd / (w.spec().tokens / 1e6);
    r.why = Why(r);
    if (req_.deadline_h && wall_h > *req_.deadline_h)
      return std::pair{"deadline", fmt::format("over deadline: {} > {}", FormatHours(wall_h),
                                               FormatHours(*req_.deadline_h))};
    if (req_.budget_usd && r.total_usd > *req_.budget_usd)
      return std::pair{
          "budget", fmt::format("over budget: {} > {}", FormatUsd(r.total_usd), FormatUsd(*req_.budget_usd))};
    return std::nullopt;
  }

  // --spot-traces: spot rows are replayed on the traces (SimulateOnTraces) cheapest first by the
  // memoryless model, until kReplayRows are replayed and the next one's memoryless cost is above the
  // kReplayRows-th cheapest replayed cost (a replay's p95 is seldom below the memoryless mean): the rest keep
  // the memoryless figures, marked so, and rank below. Replaying all ~700 spot rows of the shipped catalog
  // would take tens of seconds.
  static constexpr size_t kReplayRows = 12;
  void ReplaySpotRows() {
    std::vector<PlanRow>& rows = out_->rows;
    std::vector<size_t> idx = replay_;
    std::stable_sort(idx.begin(), idx.end(),
                     [&](size_t a, size_t b) { return rows[a].total_usd < rows[b].total_usd; });
    std::vector<bool> drop(rows.size(), false);
    std::vector<double> replayed;  // totals of the replayed rows kept, sorted
    for (size_t k = 0; k < idx.size(); ++k) {
      PlanRow& r = rows[idx[k]];
      const bool enough = replayed.size() >= kReplayRows && r.total_usd > replayed[kReplayRows - 1];
      if (!enough) {
        SimulateOnTraces(cat_.offers[r.offer], &r);
      } else if (!r.spot.feasible) {
        Exclude(r.offer, r.nodes, r.billing, "spot",
                fmt::format("job MTBF {} is too short to make progress (memoryless model; not replayed)",
                            FormatHours(r.spot.job_mtbf_h)));
        drop[idx[k]] = true;
        continue;
      } else {
        r.risk = fmt::format("{:.1f} preempt, +{} (memoryless; not replayed)", r.spot.expected_preemptions,
                             FormatHours(r.spot.time_lost_s / 3600));
      }
      if (auto over = Finish(r)) {
        Exclude(r.offer, r.nodes, r.billing, over->first, over->second, r.total_usd, r.wall_s);
        drop[idx[k]] = true;
      } else if (!enough) {
        replayed.insert(std::upper_bound(replayed.begin(), replayed.end(), r.total_usd), r.total_usd);
      }
    }
    std::vector<PlanRow> kept;
    for (size_t i = 0; i < rows.size(); ++i)
      if (!drop[i]) kept.push_back(std::move(rows[i]));
    rows = std::move(kept);
  }

  // One line on what shapes this option: the first thing a reader should know about it.
  std::string Why(const PlanRow& r) const {
    std::vector<std::string> parts;
    if (!r.runs) parts.push_back("tern cannot run it: " + r.runs_why);
    if (!r.warnings.empty()) parts.push_back(fmt::format("catalog warning: {}", r.warnings.front()));
    const bool recompute = r.fit.recompute != ActRecompute::kNone;
    if (r.fit.zero1 || recompute) {
      const char* what = r.fit.recompute == ActRecompute::kGelu ? "GELU recompute (train.recompute=gelu)"
                                                                : "block recompute (train.recompute=blocks)";
      parts.push_back(fmt::format("memory-bound: needs {}{}{}",
                                  r.fit.zero1 ? fmt::format("ZeRO-1 over {} GPUs", r.gpus) : "",
                                  r.fit.zero1 && recompute ? " + " : "", recompute ? what : ""));
    }
    if (r.billing == Billing::kSpot && r.spot_sim) {
      parts.push_back(fmt::format("spot replayed on {}: {:.1f} preemptions, mean {}, p95 {} in {}",
                                  r.spot_sim_traces, r.spot_sim->mean_preemptions,
                                  FormatUsd(r.spot_sim->mean_cost), FormatUsd(r.spot_sim->p95_cost),
                                  FormatHours(r.spot_sim->p95_wall_h)));
    } else if (r.billing == Billing::kSpot) {
      parts.push_back(fmt::format("spot: {:.1f} expected preemptions, checkpoint every {}",
                                  r.spot.expected_preemptions, FormatHours(r.spot.interval_s / 3600)));
    } else if (r.billing == Billing::kReserved) {
      parts.push_back(
          fmt::format("reserved: break-even at {:.0f}% busy", 100 * r.reserved.break_even_utilization));
    }
    const double exposed = (r.step.exposed_s + r.step.allgather_s) / r.step.step_s;
    if (r.gpus > 1 && exposed > 0.10) {
      parts.push_back(fmt::format("comm-bound: {} {:.0f}% of step over {}",
                                  r.step.allgather_s > 0 ? "all-reduce + ZeRO-1 all-gather" : "all-reduce",
                                  100 * exposed, r.link.what));
    } else if (parts.empty()) {
      parts.push_back(r.gpus > 1 ? fmt::format("compute-bound; all-reduce {:.0f}% of step", 100 * exposed)
                                 : "compute-bound on one device");
    }
    return fmt::format("{}", fmt::join(parts, "; "));
  }

 public:
  bool used_calibration_ = false;
  std::vector<bool> used_links_;  // per PlanRequest::links: did it speak for some row

 private:
  const Catalog& cat_;
  const PlanRequest& req_;
  const PlanDefaults& d_;
  PlanResult* out_;
  PlanDefaults measured_d_;     // d_ with the bench's measured checkpoint bandwidth and restart
  bool measured_save_ = false;  // the bench timed a checkpoint save
  RestartOverhead restart_, default_restart_;  // for the rows the bench speaks for / the others
  std::vector<size_t> replay_;  // spot rows to replay on --spot-traces (indices into out_->rows)
  RunSchedule schedule_;
};

}  // namespace

namespace {

// The default MFU of a GPU row is what a published engine (llm.c) reaches on that GPU class; tern's own CUDA
// engine is slower today (defaults.h: tern_cuda_mfu). When the recommendation rests on the default, say so,
// what it would cost at tern's measured rate, and how to plan from a measurement instead.
void CautionAboutDefaultMfu(const Catalog& cat, const PlanDefaults& d, PlanResult* out) {
  if (!out->recommended) return;
  const PlanRow& r = out->rows[*out->recommended];
  if (cat.offers[r.offer].provider == "local" || r.step.mfu_source.rfind("default", 0) != 0 ||
      d.tern_cuda_mfu <= 0 || d.tern_cuda_mfu >= r.step.mfu)
    return;
  auto& why = out->recommendation;
  auto at =
      std::find_if(why.begin(), why.end(), [](const std::string& w) { return w.rfind("It runs", 0) == 0; });
  why.insert(
      at == why.end() ? at : at + 1,
      fmt::format(
          "Caution: MFU {:.2f} is what llm.c reaches on this GPU class (docs/planning.md 8c), not yet tern's "
          "CUDA engine, which last measured {:.3g} (tern_cuda_mfu; docs/gpu.md): at that rate the run takes "
          "{:.1f}x the time and compute cost. On the GPU, `tern bench --device cuda --json > bench.json`, "
          "then "
          "plan with `--calibrate bench.json`.",
          r.step.mfu, d.tern_cuda_mfu, r.step.mfu / d.tern_cuda_mfu));
}

}  // namespace

Result<PlanResult> MakePlan(const Catalog& cat, const PlanRequest& req, const PlanDefaults& d) {
  PlanResult out;
  TERN_ASSIGN_OR_RETURN(out.workload, Workload::Make(req.workload, d));
  if (req.max_gpus < 1) return Status::InvalidArgument("--max-gpus must be at least 1");
  if (req.billing.empty())
    return Status::InvalidArgument("--billing: give at least one of on-demand, spot, reserved");
  Planner planner(cat, req, d, &out);
  planner.Run();
  if (req.calibration) {
    const BenchProfile& b = *req.calibration;
    if (!planner.used_calibration_) {
      out.notes.push_back(fmt::format("calibration from {} ({} {}) matched no planned GPU; defaults used",
                                      b.file, b.DeviceName(), PrecisionName(b.precision)));
    }
    const GptConfig& m = out.workload.spec().cfg;
    if (b.model.ToString() != m.ToString()) {
      out.notes.push_back(
          fmt::format("calibration model {} differs from the planned {}: MFU transfers only roughly",
                      b.model.ToString(), m.ToString()));
    }
  }
  for (size_t i = 0; i < req.links.size(); ++i) {
    const LinkProfile& l = req.links[i];
    if (planner.used_links_[i]) {
      out.notes.push_back(
          fmt::format("measured link {}: {:.3g} GB/s bus bandwidth, {:.1f} us latency, for the "
                      "comm term of {} rows (--explain shows it)",
                      l.Describe(), l.bus_gb_per_s, l.latency_us,
                      l.nodes > 1 ? "multi-instance " + l.gpu : "single-instance " + l.gpu));
    } else {
      out.notes.push_back(fmt::format("measured link {} matched no planned row{}; catalog links used",
                                      l.Describe(),
                                      l.device == "cpu" ? " (a CPU measurement speaks for no catalog GPU)"
                                      : l.gpu.empty()   ? " (no catalog GPU named: set \"gpu\" in the file)"
                                                        : ""));
    }
  }
  if (req.run) {
    const RunSchedule sched = ScheduleRun(*req.run);
    out.notes.push_back(fmt::format(
        "wall times model the whole `tern train` run of {}: {} steps, {} evaluations x {} batches, {} "
        "samples, "
        "{} checkpoint saves ({} tier writes), start-up and the final model save (--explain shows the split)",
        req.run->config_file, sched.steps, sched.evals, sched.eval_batches,
        sched.samples_during + sched.samples_end, sched.saves.size(), sched.tier_writes()));
  }
  Rank(cat, req, &out);
  CautionAboutDefaultMfu(cat, d, &out);
  return out;
}

}  // namespace tern::plan
