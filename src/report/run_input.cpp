#include "report/run_input.h"

#include <filesystem>
#include <type_traits>

#include "plan/calibration.h"
#include "plan/catalog.h"
#include "report/run_data.h"
#include "run/ledger.h"

namespace tern::report {
namespace fs = std::filesystem;

namespace {

Status ReadAttempts(const std::string& run_dir, RunInput* in) {
  TERN_ASSIGN_OR_RETURN(auto job, RunDirJob(run_dir));
  if (!job) return Status::Ok();  // a run `tern run` did not start: no attempts
  TERN_ASSIGN_OR_RETURN(auto ledger, run::Ledger::Open(run::RunDirLedgerPath(run_dir)));
  TERN_ASSIGN_OR_RETURN(auto attempts, ledger->Attempts(job->job_id));
  for (const auto& a : attempts)
    in->attempts.push_back({a.attempt, a.reason, a.lost_steps, a.lost_s, a.lost_usd, a.cost_usd});
  if (!job->instance.empty()) {
    in->instance = InstanceOption{};
    in->instance->key = job->instance;
    in->instance->price_per_hour = job->price_per_hour;
  }
  return Status::Ok();
}

// Every offer of the shipped catalog at on-demand and spot prices; the run's instance completed from it
// (GPUs, memory, peaks; its price stays the ledger's). No catalog: no offers, and the rule that reads them
// says nothing.
void ReadOffers(RunInput* in) {
  auto dir = plan::FindCatalogDir();
  if (!dir.ok()) return;
  const plan::PlanDefaults defaults;
  auto catalog = plan::LoadCatalog(plan::ShippedCatalogFiles(*dir), defaults);
  if (!catalog.ok()) return;
  for (const plan::InstanceOffer& o : catalog->offers) {
    if (o.gpu_index < 0) continue;
    const plan::GpuSpec& g = catalog->GpuOf(o);
    for (const auto& [billing, price] :
         {std::pair{"on-demand", o.price_ondemand_hr}, std::pair{"spot", o.price_spot_hr}}) {
      if (!price) continue;
      InstanceOption c;
      c.key = o.provider + ":" + o.region + ":" + o.instance_type + ":" + billing;
      c.billing = billing;
      c.gpu = o.gpu;
      c.gpus = o.gpu_count;
      c.gpu_mem_gib = o.gpu_mem_gib;
      c.bf16_tflops = g.SupportsBf16() ? g.bf16_tflops.value_or(0) : 0;
      c.fp32_tflops = g.fp32_tflops.value_or(0);
      c.price_per_hour = *price;
      if (in->instance && in->instance->key == c.key) {
        const double price_paid = in->instance->price_per_hour;
        *in->instance = c;
        if (price_paid > 0) in->instance->price_per_hour = price_paid;
      }
      in->offers.push_back(std::move(c));
    }
  }
  if (in->instance && in->instance->gpus == 0) in->instance.reset();  // not in the catalog: not known
}

}  // namespace

Result<RunInput> LoadRunInput(const std::string& run_dir, const std::string& calibration_path,
                              const std::vector<RunRow>* given_rows) {
  RunInput in;
  in.run_dir = run_dir;
  if (!fs::is_directory(run_dir))
    return Status::NotFound(run_dir +
                            " is not a directory: give the run directory `tern train` wrote (run.dir)");
  std::string metrics = (fs::path(run_dir) / "metrics.jsonl").string();
  if (!fs::exists(metrics))
    return Status::NotFound(metrics + " does not exist: `tern train` writes it into run.dir; is " + run_dir +
                            " a run directory?");
  std::vector<RunRow> read;
  if (!given_rows) {
    TERN_ASSIGN_OR_RETURN(read, ReadMetricsFile(metrics));
  }
  const std::vector<RunRow>& rows = given_rows ? *given_rows : read;
  for (const auto& row : rows) {
    std::visit(
        [&](const auto& r) {
          using T = std::decay_t<decltype(r)>;
          if constexpr (std::is_same_v<T, StartRecord>) {
            if (!in.start) in.start = r;  // a resumed run writes one per attempt: the first names the shape
            ++in.attempts_started;
            in.data_fetch_s += r.data_fetch_s.value_or(0);
            in.data_fetch_bytes += r.data_fetch_bytes.value_or(0);
            if (r.data_fetch_bytes.value_or(0) > 0) ++in.data_fetch_attempts;
          } else if constexpr (std::is_same_v<T, EndRecord>) {
            in.end = r;
          } else if constexpr (std::is_same_v<T, EventRecord>) {
            in.events.push_back(r);
          }
        },
        row.record);
  }
  // Steps and evaluations as the report draws them: stitched, so that a step a resumed attempt redid is
  // counted once (the later attempt's row).
  TERN_ASSIGN_OR_RETURN(RunData stitched, StitchRows(rows));
  in.steps.reserve(stitched.points.size());
  for (Point& p : stitched.points) in.steps.push_back(std::move(p.row));
  for (const EvalPoint& e : stitched.evals)
    in.evals.push_back(
        EvalRecord{e.step, e.val_loss, e.eval_ms, e.choice_acc, e.choice_acc_norm, e.val_loss_mix});
  std::string summary = (fs::path(run_dir) / "summary.json").string();
  if (fs::exists(summary)) {
    TERN_ASSIGN_OR_RETURN(auto end, ReadSummaryFile(summary));
    in.end = end;
  }
  TERN_RETURN_IF_ERROR(ReadAttempts(run_dir, &in));
  if (in.instance) ReadOffers(&in);
  if (!calibration_path.empty()) {
    TERN_ASSIGN_OR_RETURN(auto bench, plan::LoadBenchJson(calibration_path));
    in.calibration = MfuCalibration{calibration_path, bench.device, plan::PrecisionName(bench.precision),
                                    bench.batch,      bench.seq,    bench.mfu};
  }
  return in;
}

}  // namespace tern::report
