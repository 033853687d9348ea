// The sweep's state in SQLite (DIR/sweep.sqlite): the spec it was started with and one row per trial,
// written after every change, so that a sweep killed at any moment (kill -9) resumes from it.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

struct sqlite3;

namespace tern::sweep {

struct TrialRow {
  int id = 0;
  std::vector<std::pair<std::string, std::string>> params;  // key, value as given to --set
  std::string run_dir;
  // running (toward target_rung) | waiting (finished rung losses.size()-1) | done (the last rung) |
  // stopped (ASHA or the budget, see reason) | failed (tern run did not finish, see reason)
  std::string state = "running";
  int target_rung = 0;
  std::vector<double> losses;  // validation loss at each rung reached
  double cost_usd = 0;         // the job's total in its run directory's ledger
  int steps = 0;               // steps trained
  std::string reason;
  // --on slurm: the Slurm job of the rung in flight (or of the last rung run); "" = none yet. A restarted
  // sweep follows it again instead of submitting the rung twice (sweep/trials.h).
  std::string slurm_job_id;
};

class SweepStore {
 public:
  static Result<std::unique_ptr<SweepStore>> Open(const std::string& path);
  ~SweepStore();
  SweepStore(const SweepStore&) = delete;
  SweepStore& operator=(const SweepStore&) = delete;

  // The spec text the sweep was started with ("" for a new sweep); SetSpec records it.
  Result<std::string> Spec();
  Status SetSpec(const std::string& text);
  Status Put(const TrialRow& t);           // insert or replace
  Result<std::vector<TrialRow>> Trials();  // by id

 private:
  SweepStore() = default;
  Status Exec(const std::string& sql);
  sqlite3* db_ = nullptr;
};

}  // namespace tern::sweep
