// `tern bench` on a tiny model: the step is the trainer's (with accumulation, its config's optimizer and fp16
// loss scaling), the median of the timed steps is reported, and the run block times what else a `tern train`
// run does (evaluation and samples through the trainer's own calls).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "testing/prepared_data.h"
#include "train/bench.h"

namespace tern {
namespace {

namespace fs = std::filesystem;

BenchOptions Tiny() {
  BenchOptions o;
  o.model.n_layer = 2;
  o.model.n_head = 2;
  o.model.n_embd = 32;
  o.model.vocab_size = 64;
  o.model.block_size = 16;
  o.batch = 2;
  o.seq = 16;
  o.steps = 5;
  o.warmup = 1;
  o.measure_peak = false;
  o.peak_gflops = 10;
  return o;
}

TEST(Bench, MedianOfTimedStepsWithAccumulation) {
  BenchOptions o = Tiny();
  o.grad_accum = 3;
  o.measure_run = false;
  Result<BenchResult> r = RunBench(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->steps_ms.size(), 5u);  // warm-up steps are not timed
  std::vector<double> sorted = r->steps_ms;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_DOUBLE_EQ(r->step_ms, sorted[2]);
  // A step carries batch x seq x accum tokens.
  EXPECT_NEAR(r->tokens_per_s, 2 * 16 * 3 / (r->step_ms / 1e3), 1e-6 * r->tokens_per_s);
  const auto j = r->ToJson();
  EXPECT_EQ(j["grad_accum"], 3);
  EXPECT_EQ(j["steps_ms"].size(), 5u);
  EXPECT_TRUE(j["gpu"].is_null());  // a CPU
  EXPECT_FALSE(j.contains("run"));
  // The machine: the CPU's name, its ISA as names tern knows, the threads the bench ran with.
  ASSERT_TRUE(j.contains("machine"));
  EXPECT_TRUE(j["machine"]["cpu"].is_string());
  EXPECT_FALSE(j["machine"]["cpu"].get<std::string>().empty());
  ASSERT_TRUE(j["machine"]["isa"].is_array());
  for (const auto& isa : j["machine"]["isa"]) {
    const auto& known = KnownIsaNames();
    EXPECT_NE(std::find(known.begin(), known.end(), isa.get<std::string>()), known.end()) << isa;
  }
  EXPECT_EQ(j["machine"]["threads"], r->threads);
}

TEST(Bench, RunBlockTimesStartupEvalSampleAndSaves) {
  BenchOptions o = Tiny();
  const fs::path dir = fs::temp_directory_path() / "tern_bench_test_io";
  fs::remove_all(dir);
  fs::create_directories(dir);
  o.io_dir = dir.string();
  Result<BenchResult> r = RunBench(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const BenchRunTimes& t = r->run;
  EXPECT_GT(t.model_init_s, 0);
  EXPECT_GE(t.peak_probe_s, 0.5);  // the trainer's 0.5 s probe, really run
  EXPECT_GT(t.forward_ms, 0);
  EXPECT_LT(t.data_open_s, 0);  // no data dir given: not measured
  EXPECT_LT(t.sample_ms, 0);    // nor samples (they need the tokenizer)
  // One real checkpoint: fp32 weights + two AdamW moments, plus small files.
  const GptMemory mem = GptMemoryEstimate(o.model, o.batch, o.seq, false);
  EXPECT_GE(t.checkpoint_bytes, static_cast<double>(mem.params + mem.adam_state));
  EXPECT_GT(t.checkpoint_persist_ms, 0);
  EXPECT_GT(t.checkpoint_load_ms, 0);  // found, verified and restored (a failed load fails the bench)
  EXPECT_DOUBLE_EQ(t.model_bytes, static_cast<double>(mem.params));
  EXPECT_GT(t.model_save_ms, 0);
  EXPECT_TRUE(fs::is_empty(dir));  // the bench cleans up after itself
  const auto j = r->ToJson();
  EXPECT_TRUE(j["run"]["data_open_s"].is_null());
  EXPECT_TRUE(j["run"]["sample_ms"].is_null());
  EXPECT_DOUBLE_EQ(j["run"]["forward_ms"].get<double>(), t.forward_ms);
  EXPECT_DOUBLE_EQ(j["run"]["checkpoint_load_ms"].get<double>(), t.checkpoint_load_ms);
  fs::remove_all(dir);
}

// The memory block: the model's allocation (what GptMemoryEstimate says), the process's peak resident set
// around it on a CPU, and GELU recompute's saving. The planner's figures are the CLI's (it links the
// planner).
TEST(Bench, MemoryBlockReportsTheAllocationAndTheMeasurement) {
  BenchOptions o = Tiny();
  o.measure_run = false;
  o.steps = 1;
  std::map<std::string, nlohmann::json> mem;
  for (const char* recompute : {"none", "gelu", "blocks"}) {
    o.recompute = ParseRecompute(recompute).value();
    Result<BenchResult> r = RunBench(o);
    ASSERT_TRUE(r.ok()) << r.status().message();
    const GptMemory est =
        GptMemoryEstimate(o.model, o.batch, o.seq, false, ParseRecompute(recompute).value());
    EXPECT_EQ(r->allocated.total(), est.total());
    EXPECT_EQ(r->allocated.activations, est.activations);
    const auto j = r->ToJson()["memory"];
    EXPECT_EQ(j["recompute"], recompute);
    EXPECT_EQ(j["allocated"]["total"].get<double>(), static_cast<double>(est.total()));
    EXPECT_EQ(j["allocated"]["activations"].get<double>(),
              static_cast<double>(est.activations + est.scratch));
    EXPECT_TRUE(j["planned"].is_null());  // only the CLI fills it in
    EXPECT_GT(j["peak_rss_bytes"].get<double>(),
              static_cast<double>(est.total()));  // a CPU: the whole process
    EXPECT_TRUE(j["device_mem_bytes"].is_null());
    mem[recompute] = j;
  }
  // Tiny(): L=2, B*T=32, C=32: one GELU output of 32 x 128 floats fewer.
  EXPECT_EQ(mem["none"]["allocated"]["saved_activations"].get<double>() -
                mem["gelu"]["allocated"]["saved_activations"].get<double>(),
            32.0 * 128 * 4);
  // blocks: one of the two layers' working sets fewer (fp32: 17 x 32 x 32 floats and two layer norms'
  // statistics, 32 x 4, and the naive attention's probabilities), and the GELU output as gelu.
  EXPECT_GT(mem["gelu"]["allocated"]["saved_activations"].get<double>(),
            mem["blocks"]["allocated"]["saved_activations"].get<double>());
  // A bad name is refused where it is parsed (the CLI's --recompute, the config's train.recompute).
  EXPECT_NE(ParseRecompute("full").status().message().find("none, gelu or blocks"), std::string::npos);
}

// The step is Trainer::Step with the run's config: an absurd learning rate without clipping makes the
// trainer's own check fail (a copy of the step with its own hyperparameters would not notice), and fp16 runs
// with the trainer's loss scaling.
TEST(Bench, StepIsTheTrainersStepWithTheRunsConfig) {
  BenchOptions o = Tiny();
  o.measure_run = false;
  o.train.lr = 1e12;
  o.train.warmup_steps = 0;
  o.train.grad_clip = 0;
  Result<BenchResult> bad = RunBench(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("lower train.lr"), std::string::npos) << bad.status().message();

  o = Tiny();
  o.measure_run = false;
  o.precision = TrainPrecision::kFp16;
  Result<BenchResult> fp16 = RunBench(o);
  ASSERT_TRUE(fp16.ok()) << fp16.status().message();
  EXPECT_EQ(fp16->ToJson()["precision"], "fp16");
  EXPECT_EQ(fp16->steps_ms.size(), 5u);
}

// With prepared data: the trainer's tokenizer and loaders are opened (and timed), and a sample is one
// Trainer::Samples call of full length.
TEST(Bench, RunBlockWithDataTimesTheDataAndASample) {
  const std::string data = testing::SharedSmallPreparedData();
  ASSERT_FALSE(data.empty());
  BenchOptions o = Tiny();
  o.model.vocab_size = 300;  // the prepared tokenizer's
  o.data_dir = data;
  o.sample_tokens = 8;
  o.sample_choices = 2;
  Result<BenchResult> r = RunBench(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_GT(r->run.data_open_s, 0);
  EXPECT_GT(r->run.sample_ms, 0);
  EXPECT_EQ(r->run.sample_tokens, 8);  // all of them: end-of-text does not end a timed sample
  EXPECT_EQ(r->run.sample_choices, 2);
  // The tokenizer's vocabulary must fit the model's, as in `tern train`.
  o.model.vocab_size = 64;
  EXPECT_NE(RunBench(o).status().message().find("smaller than the tokenizer's"), std::string::npos);
}

TEST(Bench, BadOptionsAreErrors) {
  BenchOptions o = Tiny();
  o.seq = 32;  // > block_size
  EXPECT_NE(RunBench(o).status().message().find("block_size"), std::string::npos);
  o = Tiny();
  o.grad_accum = 0;
  EXPECT_FALSE(RunBench(o).ok());
}

TEST(Bench, GpuNameFromTheCudaBackendName) {
  EXPECT_EQ(GpuNameFromBackendName("cuda (NVIDIA H200, sm_90, 140 GiB)"), "NVIDIA H200");
  EXPECT_EQ(GpuNameFromBackendName("cuda (NVIDIA A100-SXM4-80GB, sm_80, 79 GiB)"), "NVIDIA A100-SXM4-80GB");
  EXPECT_EQ(GpuNameFromBackendName("cpu (oneDNN, bf16)"), "");
  EXPECT_EQ(GpuNameFromBackendName("cuda"), "");
}

}  // namespace
}  // namespace tern
