// Typed run records: the one writer and the one reader of what a run leaves behind (docs/formats.md):
// the rows of RUN_DIR/metrics.jsonl, RUN_DIR/summary.json (the end row) and the bench JSON files
// (`tern bench --json`, `tern bench --dist --json`).
//
// Every record carries its format version under "v" (kRunRecordVersion). The reader reads a record of its
// own version or an older one (a record without "v" was written before versions and has version 0, whose
// layout is version 1's); a newer or unknown version is refused with a message saying so, never guessed at.
// Within a version, fields are only ever added; a field present with the wrong JSON type is an error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace tern {

inline constexpr int kRunRecordVersion = 1;
inline constexpr const char* kRunRecordVersionKey = "v";

// The record's format version (0 when it has no "v"), or an error for a newer or malformed one. `where`
// names the record in the message ("runs/x/metrics.jsonl line 12", "bench.json").
[[nodiscard]] Result<int> CheckRecordVersion(const nlohmann::json& record, std::string_view where);
// Sets "v" to kRunRecordVersion (a writer's last step).
void StampRecordVersion(nlohmann::json* record);

// {"event": "start"}: the run's shape, first line of metrics.jsonl.
struct StartRecord {
  std::string model, device, precision, recompute, tokenizer, dist;
  int64_t params = 0, memory_bytes = 0;
  int threads = 0, batch_size = 0, seq_len = 0, grad_accum_steps = 0, world = 1, zero = 0;
  double flops_per_token = 0, peak_gflops = 0, price_per_hour = 0;
  std::optional<std::string> gpu_metrics;  // GPU runs: "NVML ok: ..." / "NVML unavailable: ..."
  std::optional<double> loss_scale;        // fp16: the starting scale
  std::optional<std::string> init_from;    // fine-tuning: the weights the run started from (train.init_from)
  // data.dir (or data.mix) on object storage: seconds spent making this machine's verified copy before the
  // first step (0.0x when it was already cached) and the bytes read from the store for it.
  std::optional<double> data_fetch_s;
  std::optional<int64_t> data_fetch_bytes;
};

// The four GPU fields of a step row; all present or none.
struct GpuRecord {
  double util_pct = 0, mem_used_gb = 0, power_w = 0, joules_per_token = 0;
};

// The slowest and fastest rank of a data-parallel step (world > 1 only).
struct RankSpreadRecord {
  double step_ms_max = 0, step_ms_min = 0, data_wait_ms_max = 0, data_wait_ms_min = 0;
};

// One optimizer step. A field a row lacks reads as 0 (as a row of another tool would mean it), but for the
// optionals. Times are in ms as in the file; JSON has no inf or NaN, so a non-finite number
// (grad_norm of a skipped fp16 step) is written as null and read back as NaN.
struct StepRecord {
  int step = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  uint64_t tokens = 0;
  double tokens_per_s = 0, mfu = 0, step_ms = 0, data_wait_ms = 0, comm_ms = 0;
  std::string precision;
  std::optional<double> elapsed_s;  // the trainer always writes it (hand-written rows may lack it)
  std::optional<RankSpreadRecord> ranks;
  std::optional<double> loss_scale;  // fp16
  bool skipped = false;              // fp16: the update was skipped (written only when true)
  std::optional<GpuRecord> gpu;
  std::optional<double> cost_usd, usd_per_mtok;  // with a price per hour
};

// A validation pass: {"step", "val_loss", "eval_ms"}.
struct EvalRecord {
  int step = 0;
  double val_loss = 0, eval_ms = 0;
  // eval.choices: accuracy on the multiple-choice set (infer/evaluate.h ScoreChoices); initialised, so that
  // {step, val_loss, eval_ms} stays a complete aggregate
  std::optional<double> choice_acc = std::nullopt, choice_acc_norm = std::nullopt;
  // data.mix: each mixed-in dataset's validation loss, {dir, loss} ("val_loss_mix": {"dir": loss}); val_loss
  // is data.dir's
  std::vector<std::pair<std::string, double>> val_loss_mix = {};
};

// {"event": "end"}: the last line of metrics.jsonl and the whole of summary.json.
struct EndRecord {
  int steps = 0;
  double train_loss = 0, val_loss = 0;
  uint64_t tokens = 0;
  double wall_s = 0, train_s = 0, tokens_per_s = 0, mfu = 0, peak_gflops = 0, cost_usd = 0;
  std::vector<std::string> samples;
  std::optional<double> loss_scale;                          // fp16
  std::optional<int64_t> skipped_steps;                      // fp16
  std::optional<double> choice_acc, choice_acc_norm;         // eval.choices: the last evaluation's
  std::vector<std::pair<std::string, double>> val_loss_mix;  // data.mix: the last evaluation's
  std::optional<nlohmann::json> job;  // summary.json of a `tern run` job (docs/jobs.md)
};

// Any other event row: "resume", "checkpoint", "preempted", "resumed_first_step" (the checkpoint code
// writes them; docs/checkpoints.md). Their fields stay JSON; `step` is -1 when the row has none.
struct EventRecord {
  std::string event;
  int step = -1;
  nlohmann::json fields;
  double Number(const char* key, double otherwise = 0) const;  // a numeric field, else `otherwise`
};

using RunRecord = std::variant<StartRecord, StepRecord, EvalRecord, EndRecord, EventRecord>;

struct RunRow {
  int version = kRunRecordVersion;  // as written; 0 = before versions
  RunRecord record;
};

// The writer: each record as the JSON object tern writes, "v" included.
nlohmann::json ToJson(const StartRecord& r);
nlohmann::json ToJson(const StepRecord& r);
nlohmann::json ToJson(const EvalRecord& r);
nlohmann::json ToJson(const EndRecord& r);
nlohmann::json ToJson(const EventRecord& r);
nlohmann::json ToJson(const RunRecord& r);

// The reader. A row is classified by "event" ("start", "end", anything else an EventRecord), else by
// "loss" (a step) or "val_loss" (an evaluation); a row that is none of these is refused, as is a newer
// version or a field of the wrong type.
[[nodiscard]] Result<RunRow> ParseRunRow(const nlohmann::json& row, std::string_view where);
// One line of metrics.jsonl; text that is not a JSON object is refused too (callers skip a torn last line).
[[nodiscard]] Result<RunRow> ParseRunLine(const std::string& line, std::string_view where);

// A whole metrics.jsonl. Lines that are not JSON (torn by a kill) are skipped; any other refusal fails the
// read, naming the line. Step and evaluation rows are parsed with simdjson (a 100,000-step file is read in a
// fraction of nlohmann's time), everything else, and every row simdjson's path declines, with nlohmann:
// the rows read are ParseRunLine's.
[[nodiscard]] Result<std::vector<RunRow>> ReadMetricsFile(const std::string& path);
// ReadMetricsFile's simdjson path on one line: true and *row when it reads the line, false when it leaves
// it to ParseRunLine (which must then give the same row: tests and fuzz/metrics_jsonl check it).
bool ReadStepOrEvalFast(const std::string& line, RunRow* row);
// summary.json: an end record (the `job` block of `tern run` kept as JSON).
[[nodiscard]] Result<EndRecord> ReadSummaryFile(const std::string& path);

}  // namespace tern
