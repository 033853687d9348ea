#include "report/run_input.h"

#include <filesystem>
#include <type_traits>

#include "plan/calibration.h"
#include "run/ledger.h"

namespace tern::report {
namespace fs = std::filesystem;

namespace {

Status ReadAttempts(const std::string& run_dir, RunInput* in) {
  std::string path = run::RunDirLedgerPath(run_dir);
  if (!fs::exists(path)) return Status::Ok();  // a run `tern run` did not start: no attempts
  TERN_ASSIGN_OR_RETURN(auto ledger, run::Ledger::Open(path));
  TERN_ASSIGN_OR_RETURN(auto job, ledger->FindJob(fs::absolute(run_dir).lexically_normal().string()));
  if (!job) {  // the run directory was moved: its own copy holds only its jobs, read the newest
    TERN_ASSIGN_OR_RETURN(auto jobs, ledger->Jobs());
    if (jobs.empty()) return Status::Ok();
    job = jobs.front();
  }
  TERN_ASSIGN_OR_RETURN(auto attempts, ledger->Attempts(job->job_id));
  for (const auto& a : attempts)
    in->attempts.push_back({a.attempt, a.reason, a.lost_steps, a.lost_s, a.lost_usd, a.cost_usd});
  return Status::Ok();
}

}  // namespace

Result<RunInput> LoadRunInput(const std::string& run_dir, const std::string& calibration_path) {
  RunInput in;
  in.run_dir = run_dir;
  if (!fs::is_directory(run_dir))
    return Status::NotFound(run_dir +
                            " is not a directory: give the run directory `tern train` wrote (run.dir)");
  std::string metrics = (fs::path(run_dir) / "metrics.jsonl").string();
  if (!fs::exists(metrics))
    return Status::NotFound(metrics + " does not exist: `tern train` writes it into run.dir; is " + run_dir +
                            " a run directory?");
  TERN_ASSIGN_OR_RETURN(auto rows, ReadMetricsFile(metrics));
  for (auto& row : rows) {
    std::visit(
        [&](auto& r) {
          using T = std::decay_t<decltype(r)>;
          if constexpr (std::is_same_v<T, StartRecord>) {
            if (!in.start) in.start = r;  // a resumed run writes one per attempt: the first names the shape
          } else if constexpr (std::is_same_v<T, StepRecord>) {
            in.steps.push_back(r);
          } else if constexpr (std::is_same_v<T, EvalRecord>) {
            in.evals.push_back(r);
          } else if constexpr (std::is_same_v<T, EndRecord>) {
            in.end = r;
          } else {
            in.events.push_back(r);
          }
        },
        row.record);
  }
  std::string summary = (fs::path(run_dir) / "summary.json").string();
  if (fs::exists(summary)) {
    TERN_ASSIGN_OR_RETURN(auto end, ReadSummaryFile(summary));
    in.end = end;
  }
  TERN_RETURN_IF_ERROR(ReadAttempts(run_dir, &in));
  if (!calibration_path.empty()) {
    TERN_ASSIGN_OR_RETURN(auto bench, plan::LoadBenchJson(calibration_path));
    in.calibration = MfuCalibration{calibration_path, bench.device, plan::PrecisionName(bench.precision),
                                    bench.batch,      bench.seq,    bench.mfu};
  }
  return in;
}

}  // namespace tern::report
