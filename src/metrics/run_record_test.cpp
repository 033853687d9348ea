// The typed rows: what the writer writes, the reader reads back; older rows are read, newer or malformed
// ones refused with a message, never misread.
#include "metrics/run_record.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

namespace tern {
namespace {

using json = nlohmann::json;

StepRecord SampleStep() {
  StepRecord r;
  r.step = 7;
  r.loss = 3.25;
  r.lr = 6e-4;
  r.grad_norm = 0.75;
  r.tokens = 7 * 256;
  r.tokens_per_s = 12345.5;
  r.mfu = 0.125;
  r.step_ms = 20.5;
  r.data_wait_ms = 1.5;
  r.comm_ms = 0.25;
  r.precision = "bf16";
  r.elapsed_s = 0.5;
  r.cost_usd = 0.001;
  r.usd_per_mtok = 0.05;
  r.gpu = GpuRecord{87, 12.5, 300, 0.002};
  return r;
}

TEST(RunRecord, StepRowHasTheDocumentedFieldsAndAVersion) {
  const json j = ToJson(SampleStep());
  EXPECT_EQ(j["v"], kRunRecordVersion);
  for (const char* k : {"step", "loss", "lr", "grad_norm", "tokens", "tokens_per_s", "mfu", "step_ms",
                        "data_wait_ms", "comm_ms", "precision", "elapsed_s", "cost_usd", "usd_per_mtok",
                        "gpu_util", "gpu_mem_gb", "gpu_power_w", "joules_per_token"})
    EXPECT_TRUE(j.contains(k)) << k;
  // Absent, not null, when not measured.
  for (const char* k : {"loss_scale", "skipped", "step_ms_max", "event"}) EXPECT_FALSE(j.contains(k)) << k;
}

TEST(RunRecord, EveryKindRoundTrips) {
  StartRecord start;
  start.model = "L2 H2 C32 V300 T32";
  start.params = 1234;
  start.precision = "fp16";
  start.world = 2;
  start.dist = "mpi";
  start.loss_scale = 65536;
  EndRecord end;
  end.steps = 40;
  end.val_loss = 2.5;
  end.samples = {"a", "b"};
  end.skipped_steps = 3;
  end.choice_acc = 0.375;
  end.choice_acc_norm = 0.5;
  end.val_loss_mix = {{"data/code", 1.5}, {"data/web", 3.25}};
  EventRecord ckpt{"checkpoint", 10, {{"stall_ms", 4.0}, {"tier", "fast"}}};
  for (const RunRecord& r :
       std::vector<RunRecord>{start, SampleStep(), EvalRecord{20, 2.75, 9.5, {}, {}},
                              EvalRecord{30, 2.5, 9.5, 0.25, 0.5, {{"data/web", 3.125}}}, end, ckpt}) {
    const json written = ToJson(r);
    auto row = ParseRunRow(json::parse(written.dump()), "test");
    ASSERT_TRUE(row.ok()) << row.status().ToString();
    EXPECT_EQ(row->version, kRunRecordVersion);
    EXPECT_EQ(row->record.index(), r.index());
    EXPECT_EQ(ToJson(row->record), written);  // every field survives
  }
}

TEST(RunRecord, SkippedStepNormIsNullAndReadsAsNaN) {
  StepRecord r = SampleStep();
  r.grad_norm = std::numeric_limits<double>::infinity();
  r.skipped = true;
  r.loss_scale = 1024;
  const json j = json::parse(ToJson(r).dump());
  EXPECT_TRUE(j["grad_norm"].is_null());
  auto row = ParseRunRow(j, "test");
  ASSERT_TRUE(row.ok()) << row.status().ToString();
  const auto& step = std::get<StepRecord>(row->record);
  EXPECT_TRUE(std::isnan(step.grad_norm));
  EXPECT_TRUE(step.skipped);
  EXPECT_EQ(step.loss_scale, 1024);
}

// A row written before rows carried "v" (version 0) has version 1's layout: read as it is.
TEST(RunRecord, UnversionedRowIsReadAsVersionZero) {
  const json old = json::parse(
      R"({"step":3,"loss":4.5,"lr":0.001,"grad_norm":1.5,"tokens":768,"tokens_per_s":900.0,"mfu":0.01,)"
      R"("step_ms":250.0,"data_wait_ms":0.5,"precision":"fp32","elapsed_s":1.0})");
  auto row = ParseRunRow(old, "old.jsonl line 2");
  ASSERT_TRUE(row.ok()) << row.status().ToString();
  EXPECT_EQ(row->version, 0);
  const auto& step = std::get<StepRecord>(row->record);
  EXPECT_EQ(step.step, 3);
  EXPECT_EQ(step.tokens, 768u);
  EXPECT_EQ(step.comm_ms, 0);  // not written then
  EXPECT_FALSE(step.cost_usd);
}

TEST(RunRecord, NewerVersionIsRefusedWithAClearMessage) {
  json j = ToJson(SampleStep());
  j["v"] = kRunRecordVersion + 1;
  auto row = ParseRunRow(j, "runs/x/metrics.jsonl line 5");
  ASSERT_FALSE(row.ok());
  EXPECT_EQ(row.status().code(), Status::Code::kInvalidArgument);
  const std::string m = row.status().message();
  EXPECT_NE(m.find("runs/x/metrics.jsonl line 5"), std::string::npos) << m;
  EXPECT_NE(m.find("newer"), std::string::npos) << m;
  EXPECT_NE(m.find("upgrade tern"), std::string::npos) << m;
  for (const json& bad : {json("1"), json(1.5), json(-1)}) {
    j["v"] = bad;
    EXPECT_FALSE(ParseRunRow(j, "x").ok()) << bad;
  }
}

TEST(RunRecord, WrongTypesAndUnknownRowsAreRefusedNotMisread) {
  json j = ToJson(SampleStep());
  j["tokens"] = "1792";
  auto row = ParseRunRow(j, "f line 3");
  ASSERT_FALSE(row.ok());
  EXPECT_NE(row.status().message().find("\"tokens\" is string"), std::string::npos) << row.status().message();
  j = ToJson(SampleStep());
  j["step"] = 7.5;
  EXPECT_FALSE(ParseRunRow(j, "f").ok());
  j = ToJson(SampleStep());
  j.erase("gpu_power_w");  // the GPU fields come together or not at all
  EXPECT_FALSE(ParseRunRow(j, "f").ok());
  EXPECT_FALSE(ParseRunRow(json{{"v", 1}, {"something", 1}}, "f").ok());
  EXPECT_FALSE(ParseRunLine("{\"step\": 1, \"lo", "f").ok());
}

// The simdjson path of ReadMetricsFile takes the rows a long run is made of, and wherever it reads a line
// it reads what nlohmann's ParseRunLine reads; lines it declines go to ParseRunLine.
TEST(RunRecord, FastPathTakesStepAndEvalRowsAndAgreesWithTheReference) {
  StepRecord spread = SampleStep();
  spread.ranks = RankSpreadRecord{21, 19, 2, 1};
  spread.loss_scale = 1024;
  spread.skipped = true;
  spread.grad_norm = std::numeric_limits<double>::infinity();  // written as null
  StepRecord bare;
  bare.step = 1;
  bare.loss = 9;
  const std::vector<std::string> taken = {
      ToJson(SampleStep()).dump(),
      ToJson(spread).dump(),
      ToJson(bare).dump(),
      ToJson(EvalRecord{8, 2.0, 1.0, {}, {}}).dump(),
      R"({"step":3,"loss":4})",                            // version 0
      R"({"step":3,"loss":4,"loss":5,"v":1})",             // the last repeated key wins
      R"({"step":3,"loss":4,"extra":[1,{"a":2}],"v":1})",  // unknown fields ignored
      R"({"step":18446744073709551615,"loss":1e300,"tokens":9223372036854775808})",
      R"( {"step":2,"val_loss":3.5e-1,"eval_ms":0} )",
      R"({"step":2,"loss":1,"val_loss":3})"};
  const std::vector<std::string> declined = {
      ToJson(StartRecord{}).dump(), ToJson(EndRecord{}).dump(), R"({"event":"checkpoint","step":4})",
      R"({"step":3,"loss":-0.0})", R"({"step":3,"loss":4,"precision":"b\u0066"})",
      R"({"step":3,"loss":4,"v":2})", R"({"step":3,"loss":4,"v":-1})", R"({"step":3.0,"loss":4})",
      R"({"step":3,"loss":"4"})", R"({"step":3,"loss":4,"tokens":-1})", R"({"step":3,"loss":4,"gpu_util":1})",
      R"({"step":3,"loss":4,"step_ms_max":1})", R"({"step":1,"loss":1e400})",
      R"({"step":123456789012345678901234567890,"loss":1})", R"({"step":1,"lo)", "[1,2]", "", "x",
      R"({"step":1,"loss":1} x)", R"({"val":1})",
      // data.mix's per-dataset losses: the reference reader's
      R"({"step":8,"val_loss":3.5,"val_loss_mix":{"data/web":3.25}})"};
  for (const auto& line : taken) {
    RunRow fast;
    ASSERT_TRUE(ReadStepOrEvalFast(line, &fast)) << line;
    auto ref = ParseRunLine(line, "f");
    ASSERT_TRUE(ref.ok()) << line << ": " << ref.status().message();
    EXPECT_EQ(fast.version, ref->version) << line;
    EXPECT_EQ(ToJson(fast.record).dump(), ToJson(ref->record).dump()) << line;
  }
  for (const auto& line : declined) {
    RunRow fast;
    EXPECT_FALSE(ReadStepOrEvalFast(line, &fast)) << line;
  }
  // A file of both kinds reads as ParseRunLine reads each line (torn and empty lines skipped).
  namespace fs = std::filesystem;
  const fs::path file =
      fs::temp_directory_path() / ("tern_fast_rows_" + std::to_string(::getpid()) + ".jsonl");
  std::vector<std::string> want;
  {
    std::ofstream f(file);
    for (const auto* list : {&taken, &declined}) {
      for (const auto& line : *list) {
        if (line == "[1,2]" || line == R"({"val":1})" || line.find(R"("v":2)") != std::string::npos ||
            line.find(R"("v":-1)") != std::string::npos)
          continue;  // refusals: they fail the whole read (checked above and below)
        auto ref = ParseRunLine(line, "f");
        if (ref.ok()) {
          want.push_back(ToJson(ref->record).dump());
        } else if (!nlohmann::json::accept(line)) {
          // a torn line: skipped
        } else {
          continue;  // a refused row
        }
        f << line << "\n";
      }
    }
    f << R"({"step":99,"loss":1})";  // no newline at the end
    want.push_back(ToJson(ParseRunLine(R"({"step":99,"loss":1})", "f")->record).dump());
  }
  auto rows = ReadMetricsFile(file.string());
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  ASSERT_EQ(rows->size(), want.size());
  for (size_t i = 0; i < want.size(); i++) EXPECT_EQ(ToJson((*rows)[i].record).dump(), want[i]) << i;
  fs::remove(file);
}

TEST(RunRecord, FilesSkipTornLinesAndSummariesMustBeEndRecords) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("tern_run_record_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream f(dir / "metrics.jsonl");
    f << ToJson(StartRecord{}).dump() << "\n" << ToJson(SampleStep()).dump() << "\n{\"step\": 8, \"lo\n";
    f << ToJson(EvalRecord{8, 2.0, 1.0, {}, {}}).dump() << "\n";
  }
  auto rows = ReadMetricsFile((dir / "metrics.jsonl").string());
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 3u);
  EXPECT_TRUE(std::holds_alternative<EvalRecord>((*rows)[2].record));
  {
    std::ofstream f(dir / "metrics.jsonl", std::ios::app);
    json newer = ToJson(SampleStep());
    newer["v"] = 99;
    f << newer.dump() << "\n";
  }
  rows = ReadMetricsFile((dir / "metrics.jsonl").string());
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find("line 5"), std::string::npos) << rows.status().message();

  EndRecord end;
  end.steps = 12;
  json summary = ToJson(end);
  summary["job"] = {{"id", "j1"}};
  std::ofstream(dir / "summary.json") << summary.dump(2);
  auto s = ReadSummaryFile((dir / "summary.json").string());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->steps, 12);
  ASSERT_TRUE(s->job);
  EXPECT_EQ((*s->job)["id"], "j1");
  std::ofstream(dir / "summary.json") << ToJson(SampleStep()).dump();
  EXPECT_FALSE(ReadSummaryFile((dir / "summary.json").string()).ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tern
