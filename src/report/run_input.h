// Reads a run directory into the rules' RunInput (report/diagnose.h): RUN_DIR/metrics.jsonl through the typed
// reader (metrics/run_record.h), summary.json when present, the attempts of RUN_DIR/ledger.sqlite
// (run/ledger.h) when `tern run` started it, and a bench JSON (plan/calibration.h) given as the MFU
// calibration.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "report/diagnose.h"

namespace tern::report {

// `calibration_path` "" = none. `rows`: RUN_DIR/metrics.jsonl already read (nullptr: read it here).
[[nodiscard]] Result<RunInput> LoadRunInput(const std::string& run_dir, const std::string& calibration_path,
                                            const std::vector<RunRow>* rows = nullptr);

}  // namespace tern::report
