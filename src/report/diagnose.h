// Diagnosis with advice (`tern diagnose`, and the diagnosis section of `tern report` to come): documented
// rules (docs/report.md, "Diagnosis") over a run's typed records (metrics/run_record.h) and its ledger's
// attempts. Each rule is a pure function of RunInput and DiagnoseOptions; a rule that does not apply returns
// nothing. A finding carries its evidence (the numbers), what it costs (a fraction of step time and $ per
// hour at the run's price, or $ already spent) and the fix as a config key or a command.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "metrics/run_record.h"

namespace tern::report {

// What the ledger says of one attempt (run/ledger.h's AttemptRow, the fields the rules read).
struct AttemptLoss {
  int attempt = 0;
  std::string reason;  // done | preempted | crashed | ...
  int lost_steps = 0;
  double lost_s = 0, lost_usd = 0, cost_usd = 0;
};

// The MFU a bench measured (`tern bench --json`, plan/calibration.h) for comparison with the run's.
struct MfuCalibration {
  std::string file;
  std::string device, precision;  // "cpu" | "cuda"; "fp32" | "bf16" | "fp16"
  int batch = 0, seq = 0;
  double mfu = 0;
};

// A rentable instance at one billing, as the cheaper-instance rule compares them (plan/catalog.h's offers,
// priced): the run's own (from its ledger) and every offer of the catalog.
struct InstanceOption {
  std::string key;      // provider:region:type:billing (the ledger's `instance`)
  std::string billing;  // on-demand | spot | reserved
  std::string gpu;      // the catalog's GPU id ("H100")
  int gpus = 0;
  double gpu_mem_gib = 0;
  double bf16_tflops = 0, fp32_tflops = 0;  // per GPU, dense (gpus.csv); 0 = none (no bf16 on a T4, V100)
  double price_per_hour = 0;
  // The peak a run of this precision gets: bf16/fp16 on the tensor cores, fp32 on the CUDA cores.
  double PeakTflops(const std::string& precision) const {
    return precision == "fp32" ? fp32_tflops : bf16_tflops;
  }
};

// Everything the rules read. `start` is the run's first start row (the shape and price); steps, evals and
// events in file order; the steps and evaluations are the stitched ones (report/run_data.h's StitchRows: a
// step a resumed attempt redid counts once, the later attempt's row).
struct RunInput {
  std::string run_dir;
  std::optional<StartRecord> start;
  std::vector<StepRecord> steps;
  std::vector<EvalRecord> evals;
  std::vector<EventRecord> events;
  std::optional<EndRecord> end;       // summary.json, else the end row
  std::vector<AttemptLoss> attempts;  // empty without a ledger (a run not started by `tern run`)
  std::optional<MfuCalibration> calibration;
  std::optional<InstanceOption> instance;  // the run's, from RUN_DIR/ledger.sqlite's job and the catalog
  std::vector<InstanceOption> offers;      // the catalog's (data/catalog), each billing it prices
  // data.dir on S3 (docs/formats.md): every attempt's start row's data_fetch_s and data_fetch_bytes, summed,
  // and the attempts that fetched bytes (a copy already on the machine fetches none).
  double data_fetch_s = 0;
  int64_t data_fetch_bytes = 0;
  int data_fetch_attempts = 0, attempts_started = 0;
};

// The thresholds (docs/report.md gives each one's source).
struct DiagnoseOptions {
  double data_wait_fraction = 0.05;   // data-bound: data wait > 5% of step time
  double ckpt_stall_fraction = 0.02;  // checkpoint stall > 2% of training time
  double comm_fraction = 0.10;        // exposed communication > 10% of step time
  double mfu_ratio = 0.8;             // MFU below 80% of the calibration's
  double gpu_util_pct = 80;           // GPU idle: mean utilisation < 80%
  double spike_factor = 3;            // loss spike: a step's loss > 3x the median of the steps before it
  int spike_window = 20;              //   ... the 20 before it (a spike is judged after that many steps)
  int rising_window = 20;             // divergence: mean of the last 20 losses > 1.1x the 20 before them
  double rising_factor = 1.1;
  int headroom_factor = 2;         // memory headroom: a micro-batch this many times larger fits
  double cheaper_fraction = 0.10;  // cheaper instance: the same work for at least 10% fewer $
  double forget_rise = 0.05;       // forgetting: a data.mix dataset's val loss 5% above its best evaluation
  double data_fetch_fraction = 0.05;  // data fetch: fetching s3:// data > 5% of fetch + training time
};

struct Finding {
  std::string rule;      // data_bound | checkpoint_stall | exposed_comm | low_mfu | gpu_idle | loss_spike
                         // | divergence | preemption_loss | memory_headroom | cheaper_instance | forgetting
                         // | data_fetch
  std::string title;     // one line
  std::string evidence;  // the numbers, in words
  nlohmann::json numbers = nlohmann::json::object();  // the same numbers as data
  double step_fraction = 0;                           // of step time this costs (0: not a time cost)
  double usd_per_hour = 0;                            // step_fraction x the run's price per hour
  double usd_spent = 0;  // $ already lost (preemptions, training after a divergence)
  std::string fix;       // a config key or a command

  // The $ figure findings are ranked by: the hourly cost, else the $ spent.
  double RankUsd() const { return usd_per_hour > 0 ? usd_per_hour : usd_spent; }
};

// The rule names and thresholds in words, for `--help` and the docs.
std::string RulesHelp(const DiagnoseOptions& o);

// Every rule over the run, the findings ranked by $ cost (highest first; ties by step fraction).
std::vector<Finding> Diagnose(const RunInput& run, const DiagnoseOptions& o);

// The rules one by one (each returns nothing when it does not apply).
std::optional<Finding> DataBoundRule(const RunInput& run, const DiagnoseOptions& o);
std::optional<Finding> CheckpointStallRule(const RunInput& run, const DiagnoseOptions& o);
std::optional<Finding> ExposedCommRule(const RunInput& run, const DiagnoseOptions& o);
std::optional<Finding> LowMfuRule(const RunInput& run, const DiagnoseOptions& o);
std::optional<Finding> GpuIdleRule(const RunInput& run, const DiagnoseOptions& o);
std::vector<Finding> LossRules(const RunInput& run, const DiagnoseOptions& o);  // spike, divergence
std::optional<Finding> PreemptionLossRule(const RunInput& run, const DiagnoseOptions& o);
std::optional<Finding> ForgettingRule(const RunInput& run, const DiagnoseOptions& o);  // data.mix
std::optional<Finding> DataFetchRule(const RunInput& run, const DiagnoseOptions& o);   // s3:// data
// diagnose_plan.cpp: the planner's models (src/plan/) applied to the run.
std::optional<Finding> MemoryHeadroomRule(const RunInput& run, const DiagnoseOptions& o);
std::optional<Finding> CheaperInstanceRule(const RunInput& run, const DiagnoseOptions& o);

nlohmann::json ToJson(const Finding& f);
// The findings as `tern diagnose` prints them.
std::string FormatFindings(const RunInput& run, const std::vector<Finding>& findings);

}  // namespace tern::report
