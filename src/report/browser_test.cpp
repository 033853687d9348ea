// The page in a real browser: Debian's chromium (headless, no network) opens a report of a real short
// `tern train` run from disk; the page's script says what each chart drew and any JavaScript error
// (<pre id="tern-drawn">), and the numbers it shows equal metrics.jsonl's. Then an A/B report of two real
// runs (fp32 vs bf16): both curves and the precision in the config diff. And the FinOps page (`tern report
// --ledger`) of a ledger written through the ledger API: every chart drew, the totals are the ledger's. And a
// real run preempted (SIGTERM, exit 75) and resumed: one continuous curve, the resume marked. And a GPU run's
// rows (written through the typed writer, as a CUDA run with NVML writes them): the GPU chart draws its three
// series, and the storage and egress cells price its s3:// checkpoints and model.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "metrics/run_record.h"
#include "run/ledger.h"
#include "testing/files.h"
#include "testing/prepared_data.h"
#include "testing/processes.h"
#include "testing/skip.h"
#include "testing/tern_binary.h"
#include "testing/tiny_config.h"

namespace tern {
namespace {

using nlohmann::json;

class ReportBrowserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    chromium_ = testing::FindProgram("chromium");
    if (chromium_.empty())
      TERN_SKIP_OR_FAIL_IN_CI(
          "chromium is not on PATH: the report's browser test needs Debian's chromium "
          "(scripts/install-deps installs it)");
    tern_ = testing::FindTernBinary().string();
    ASSERT_FALSE(tern_.empty()) << "build the tern binary first";
    data_ = testing::SharedSmallPreparedData();
    ASSERT_FALSE(data_.empty());
    root_ = tmp_.path();
    testing::WriteFile(root_ + "/tiny.yaml", testing::TinyTrainYaml(data_, {.n_layer = 2,
                                                                            .total_batch_tokens = 256,
                                                                            .steps = 30,
                                                                            .warmup_steps = 2,
                                                                            .lr = "3.0e-3",
                                                                            .schedule = "constant",
                                                                            .eval_every = 10,
                                                                            .more = "ckpt: {every: 10}\n"}));
  }
  std::string Train(const std::string& name, const std::string& extra = "") {
    const std::string dir = root_ + "/" + name;
    auto r = testing::RunCommand("OMP_NUM_THREADS=1 " + tern_ + " train " + root_ +
                                 "/tiny.yaml --quiet --price-per-hour 36 --set run.dir=" + dir + " " + extra +
                                 " 2>&1");
    EXPECT_EQ(r.code, 0) << r.output;
    return dir;
  }
  // The DOM after the page's script ran, and the JSON it wrote into <pre id="tern-drawn">.
  json Open(const std::string& html, std::string* dom) {
    auto r = testing::RunCommand(chromium_ +
                                 " --headless --no-sandbox --disable-gpu --no-first-run --disable-extensions "
                                 "--proxy-server=127.0.0.1:9 --virtual-time-budget=10000 --dump-dom file://" +
                                 html + " 2>/dev/null");
    EXPECT_EQ(r.code, 0);
    *dom = r.output;
    std::smatch m;
    static const std::regex pre(R"re(<pre id="tern-drawn"[^>]*>([^<]*)</pre>)re");
    if (!std::regex_search(r.output, m, pre)) {
      ADD_FAILURE() << "no <pre id=tern-drawn> in the DOM:\n" << r.output.substr(0, 2000);
      return json::object();
    }
    std::string text = m[1];
    text = std::regex_replace(text, std::regex("&quot;"), "\"");
    text = std::regex_replace(text, std::regex("&lt;"), "<");
    text = std::regex_replace(text, std::regex("&gt;"), ">");
    text = std::regex_replace(text, std::regex("&amp;"), "&");
    return json::parse(text, nullptr, false);
  }
  // data-value of the cell (run, key) of the summary table.
  static std::string Cell(const std::string& dom, int run, const std::string& key) {
    std::smatch m;
    const std::regex re("data-run=\"" + std::to_string(run) + "\" data-key=\"" + key +
                        "\" data-value=\"([^\"]*)\"");
    return std::regex_search(dom, m, re) ? m[1].str() : "";
  }
  std::string Report(const std::string& args, const std::string& out) {
    auto r = testing::RunCommand(tern_ + " report " + args + " --out " + out + " 2>&1");
    EXPECT_EQ(r.code, 0) << r.output;
    return out;
  }

  testing::TempDir tmp_;
  std::string chromium_, tern_, data_, root_;
};

TEST_F(ReportBrowserTest, OneRealRunDrawsEveryChartAndShowsMetricsNumbers) {
  const std::string run = Train("one");
  const std::string html = Report(run, root_ + "/one.html");
  std::string dom;
  const json drawn = Open(html, &dom);
  ASSERT_TRUE(drawn.is_object()) << dom.substr(0, 2000);
  EXPECT_TRUE(drawn["errors"].empty()) << drawn["errors"].dump();
  for (const char* id : {"chart-loss", "chart-throughput", "chart-optim", "chart-breakdown-0"}) {
    ASSERT_TRUE(drawn["charts"].contains(id)) << id << ": " << drawn.dump();
    for (const auto& ds : drawn["charts"][id]) {
      const std::string label = ds["label"];
      if (label == "communication" || label == "checkpoint stall") continue;  // one rank, may be all 0
      EXPECT_GT(ds["points"].get<int>(), 0) << id << " " << label;
    }
  }
  EXPECT_EQ(drawn["charts"]["chart-loss"][0]["points"], 30);  // train loss: every step
  EXPECT_EQ(drawn["charts"]["chart-loss"][1]["points"], 3);   // val loss: steps 10, 20, 30
  EXPECT_FALSE(drawn["charts"].contains("chart-choices")) << "no eval.choices, no accuracy chart";
  EXPECT_FALSE(drawn["charts"].contains("chart-mix")) << "no data.mix, no chart of it";
  // The numbers shown are metrics.jsonl's (its end row).
  auto rows = ReadMetricsFile(run + "/metrics.jsonl");
  ASSERT_TRUE(rows.ok());
  const auto& end = std::get<EndRecord>(rows.value().back().record);
  EXPECT_NEAR(std::stod(Cell(dom, 0, "final_val_loss")), end.val_loss, 1e-5);
  EXPECT_NEAR(std::stod(Cell(dom, 0, "usd")), end.cost_usd, 1e-6 + 1e-6 * end.cost_usd);
  EXPECT_EQ(std::stod(Cell(dom, 0, "tokens")), static_cast<double>(end.tokens));
  EXPECT_EQ(std::stoi(Cell(dom, 0, "steps")), end.steps);
  // On the dollar axis too.
  std::string dom_usd;
  const json usd = Open(html + "?x=usd", &dom_usd);
  EXPECT_EQ(usd["axis"], "usd");
  EXPECT_TRUE(usd["errors"].empty()) << usd["errors"].dump();
  EXPECT_EQ(usd["charts"]["chart-loss"][0]["points"], 30);
}

TEST_F(ReportBrowserTest, AbOfFp32AndBf16ShowsBothCurvesAndThePrecisionDiff) {
  const std::string a = Train("fp32"), b = Train("bf16", "--set train.precision=bf16");
  const std::string html = Report(a + " " + b, root_ + "/ab.html");
  std::string dom;
  const json drawn = Open(html, &dom);
  ASSERT_TRUE(drawn.is_object());
  EXPECT_TRUE(drawn["errors"].empty()) << drawn["errors"].dump();
  EXPECT_EQ(drawn["axis"], "usd");  // several runs with a price: loss against dollars
  const auto& loss = drawn["charts"]["chart-loss"];
  ASSERT_EQ(loss.size(), 4u);  // train and val of each run
  EXPECT_EQ(loss[0]["label"], "fp32 train loss");
  EXPECT_EQ(loss[2]["label"], "bf16 train loss");
  EXPECT_EQ(loss[0]["points"], 30);
  EXPECT_EQ(loss[2]["points"], 30);
  EXPECT_NE(dom.find("<tr data-key=\"config.train.precision\"><td>config.train.precision</td><td>fp32</td>"
                     "<td>bf16</td></tr>"),
            std::string::npos)
      << dom.substr(dom.find("config-diff") == std::string::npos ? 0 : dom.find("config-diff"), 3000);
  EXPECT_EQ(dom.find("data-key=\"config.train.lr\""), std::string::npos);  // the same in both: not shown
  EXPECT_NE(dom.find("id=\"ab-sentence\">bf16 reaches val "), std::string::npos);
  // --json: the same comparison for machines.
  auto r = testing::RunCommand(tern_ + " report " + a + " " + b + " --json");
  ASSERT_EQ(r.code, 0) << r.output;
  const json j = json::parse(r.output);
  EXPECT_EQ(j["comparison"]["config_diff"]["config.train.precision"], json({"fp32", "bf16"}));
  EXPECT_EQ(j["runs"].size(), 2u);
  EXPECT_TRUE(j["comparison"]["ratios"]["usd"].is_number());
}

TEST_F(ReportBrowserTest, PreemptedAndResumedRunIsOneContinuousCurve) {
  const std::string dir = root_ + "/resumed";
  const std::vector<std::string> argv = {tern_, "train", root_ + "/tiny.yaml", "--quiet", "--price-per-hour",
                                         "36",  "--set", "run.dir=" + dir};
  {
    // Each batch a little slower (the loader's test hook), so that the SIGTERM lands mid-run however fast the
    // machine: after the step-10 checkpoint, before step 30.
    testing::Child train(argv, {{"TERN_TEST_DATA_DELAY_MS", "40"}, {"OMP_NUM_THREADS", "1"}},
                         root_ + "/t1.log");
    int steps = 0;
    for (int i = 0; i < 1200 && steps < 12 && train.Running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      auto rows = ReadMetricsFile(dir + "/metrics.jsonl");
      steps = 0;
      if (rows.ok())
        for (const auto& r : *rows) steps += std::holds_alternative<StepRecord>(r.record);
    }
    ASSERT_GE(steps, 12) << testing::ReadFile(root_ + "/t1.log");
    ASSERT_LT(steps, 30) << "the run ended before the signal: raise TERN_TEST_DATA_DELAY_MS";
    train.Signal(SIGTERM);
    ASSERT_EQ(train.Wait(), 75) << "SIGTERM: save and exit 75\n" << testing::ReadFile(root_ + "/t1.log");
  }
  std::string cmd = "OMP_NUM_THREADS=1";
  for (const auto& a : argv) cmd += " " + a;
  auto resumed = testing::RunCommand(cmd + " --resume auto 2>&1");
  ASSERT_EQ(resumed.code, 0) << resumed.output;

  const std::string html = Report(dir, root_ + "/resumed.html");
  // The page's data (<script id="tern-data">): one run, steps 1..30 strictly increasing, time and $ never
  // going back (the second process's clock and bill continue the first's), the resume marked.
  const std::string page = testing::ReadFile(html);
  const std::string open_tag = "<script id=\"tern-data\" type=\"application/json\">";
  const size_t from = page.find(open_tag);
  ASSERT_NE(from, std::string::npos);
  const size_t begin = from + open_tag.size(), end = page.find("</script>", begin);
  const json data =
      json::parse(std::regex_replace(page.substr(begin, end - begin), std::regex("<\\\\/"), "</"));
  const json& series = data["runs"][0]["series"];
  const json& steps = series["x"]["step"];
  ASSERT_EQ(steps.size(), 30u) << steps.dump();
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].get<int>(), static_cast<int>(i) + 1) << "zig-zag at " << i << ": " << steps.dump();
    if (i == 0) continue;
    EXPECT_GE(series["x"]["t"][i].get<double>(), series["x"]["t"][i - 1].get<double>()) << i;
    EXPECT_GE(series["x"]["usd"][i].get<double>(), series["x"]["usd"][i - 1].get<double>()) << i;
  }
  int resumes = 0, preempted = 0;
  for (const auto& m : series["marks"]) {
    resumes += m["kind"] == "resume";
    preempted += m["kind"] == "preempted";
  }
  EXPECT_EQ(resumes, 1) << series["marks"].dump();
  EXPECT_EQ(preempted, 1) << series["marks"].dump();
  EXPECT_EQ(data["runs"][0]["attempts"], 2) << data["runs"][0].dump().substr(0, 400);
  // The evaluations too: steps 10, 20, 30 once each.
  std::vector<int> evals;
  for (const auto& e : series["evals"]) evals.push_back(e["step"]);
  EXPECT_EQ(evals, (std::vector<int>{10, 20, 30}));
  // In the browser: no error, the loss drawn once per step.
  std::string dom;
  const json drawn = Open(html, &dom);
  EXPECT_TRUE(drawn["errors"].empty()) << drawn["errors"].dump();
  EXPECT_EQ(drawn["charts"]["chart-loss"][0]["points"], 30);
}

TEST_F(ReportBrowserTest, FinOpsPageOfALedgerDrawsItsChartsOffline) {
  // Two projects over three UTC days: a preempted attempt and its resume (nlp), a crash (vision).
  const double d0 = 1793577600;  // 2026-11-02T00:00Z
  const std::string ledger_path = root_ + "/ledger.sqlite";
  {
    auto ledger = run::Ledger::Open(ledger_path);
    ASSERT_TRUE(ledger.ok()) << ledger.status().message();
    auto attempt = [&](const std::string& job, int n, double start_h, double hours, double usd,
                       const std::string& reason) {
      run::AttemptRow a;
      a.job_id = job;
      a.attempt = n;
      a.state = "ended";
      a.start_unix = d0 + start_h * 3600;
      a.end_unix = a.start_unix + hours * 3600;
      a.wall_s = a.productive_s = hours * 3600;
      a.cost_usd = usd;
      a.reason = reason;
      a.ranks = 8;
      a.lost_usd = n > 1 ? 1.5 : 0;
      ASSERT_TRUE((*ledger)->PutAttempt(a).ok());
    };
    for (const auto& [id, project] : {std::pair{"nlp-1", "nlp"}, std::pair{"vision-1", "vision"}}) {
      run::JobRow j;
      j.job_id = id;
      j.project = project;
      j.run_dir = root_ + "/" + id;
      j.state = "done";
      ASSERT_TRUE((*ledger)->PutJob(j).ok());
    }
    attempt("nlp-1", 1, 1, 2, 32, "preempted");
    attempt("nlp-1", 2, 30, 1, 16, "done");
    attempt("vision-1", 1, 50, 1, 4, "crashed");
  }
  // A serving usage file (tern serve --usage-file) with a LoRA adapter's share: the page bills it apart.
  const std::string usage = root_ + "/usage.json";
  std::ofstream(usage) << json({{"kind", "tern-serve-usage"},
                                {"version", 1},
                                {"model", "demo"},
                                {"started_unix", d0},
                                {"updated_unix", d0 + 3600},
                                {"price_per_hour", 2.0},
                                {"busy_s", 900},
                                {"idle_s", 2700},
                                {"usd", 2.0},
                                {"requests", 10},
                                {"prompt_tokens", 100},
                                {"generation_tokens", 1000},
                                {"usd_per_million_generated_tokens", 2000},
                                {"by_project", json::array()},
                                {"by_model",
                                 {{{"model", "demo"},
                                   {"requests", 6},
                                   {"prompt_tokens", 60},
                                   {"generation_tokens", 600},
                                   {"usd", 1.2}},
                                  {{"model", "law"},
                                   {"requests", 4},
                                   {"prompt_tokens", 40},
                                   {"generation_tokens", 400},
                                   {"usd", 0.8}}}}})
                              .dump();
  const std::string html = root_ + "/finops.html";
  auto r = testing::RunCommand(tern_ + " report --ledger " + ledger_path + " --since all --serving " + usage +
                               " --out " + html + " 2>&1");
  ASSERT_EQ(r.code, 0) << r.output;
  std::string dom;
  const json drawn = Open(html, &dom);
  ASSERT_TRUE(drawn.is_object()) << dom.substr(0, 2000);
  EXPECT_TRUE(drawn["errors"].empty()) << drawn["errors"].dump();
  const auto& day = drawn["charts"]["chart-spend-day"];
  ASSERT_EQ(day.size(), 2u);  // one dataset per project
  EXPECT_EQ(day[0]["label"], "nlp");
  EXPECT_GE(day[0]["points"].get<int>(), 3);  // every day from 2026-11-02 to today
  for (const char* id : {"chart-project", "chart-events"}) {
    ASSERT_TRUE(drawn["charts"].contains(id)) << drawn.dump();
    for (const auto& ds : drawn["charts"][id]) EXPECT_EQ(ds["points"], 2) << id;
  }
  std::smatch m;
  auto value = [&](const std::string& key) {
    const std::regex re("data-key=\"" + key + "\" data-value=\"([^\"]*)\"");
    return std::regex_search(dom, m, re) ? std::stod(m[1].str()) : -1.0;
  };
  EXPECT_NEAR(value("usd"), 52, 1e-9);
  EXPECT_NEAR(value("gpu_hours"), 32, 1e-9);
  EXPECT_EQ(value("preemptions"), 1);
  EXPECT_EQ(value("failures"), 1);
  EXPECT_NEAR(value("lost_usd"), 1.5, 1e-9);
  EXPECT_NEAR(value("project.nlp"), 48, 1e-9);
  EXPECT_NEAR(value("serving_model.law"), 0.8, 1e-9) << "the LoRA adapter's share, drawn in the page";
  EXPECT_NEAR(value("serving_model.demo"), 1.2, 1e-9);
  // --json: the same figures.
  auto j = testing::RunCommand(tern_ + " report --ledger " + ledger_path + " --since all --json");
  ASSERT_EQ(j.code, 0) << j.output;
  const json figures = json::parse(j.output);
  EXPECT_EQ(figures["totals"]["usd"], 52);
  EXPECT_EQ(figures["top_jobs"][0]["job_id"], "nlp-1");
  EXPECT_EQ(day[0]["points"], figures["by_day_utc"].size());
  EXPECT_EQ(figures["by_day_utc"][0]["day"], "2026-11-02");
  EXPECT_EQ(figures["by_day_utc"][0]["by_project"]["nlp"], 32);
}

TEST_F(ReportBrowserTest, GpuRunDrawsItsGpuChartAndPricesStorageAndEgress) {
  const std::string dir = root_ + "/gpu";
  std::string text;
  auto add = [&](nlohmann::json j) { text += j.dump() + "\n"; };
  StartRecord start;
  start.model = "L12 H12 C768 V50257 T1024";
  start.device = "cuda (NVIDIA H100 80GB HBM3, sm_90, 80 GiB)";
  start.precision = "bf16";
  start.params = 125'000'000;  // 0.5 GB of fp32 weights out
  start.price_per_hour = 3.6;
  add(ToJson(start));
  for (int s = 1; s <= 20; ++s) {
    StepRecord r;
    r.step = s;
    r.loss = 5.0 - 0.1 * s;
    r.tokens = static_cast<uint64_t>(s) * 524288;
    r.step_ms = 1000;
    r.elapsed_s = s * 1.0;
    r.cost_usd = s * 0.001;
    r.gpu = GpuRecord{90.0 + s % 3, 40.0 + s * 0.1, 600.0 + s, 0.5};
    add(ToJson(r));
    if (s % 10 == 0)
      add(ToJson(
          EvalRecord{s, 4.0 - 0.1 * s, 50, 0.25 + 0.01 * s, 0.3 + 0.01 * s, {{"data/web", 3.0 + 0.01 * s}}}));
    if (s % 10 == 0) {
      EventRecord e;
      e.event = "checkpoint";
      e.step = s;
      e.fields = {{"event", "checkpoint"},
                  {"step", s},
                  {"tier", "durable"},
                  {"bytes", 1.5e9},
                  {"location", "s3://b/gpu/step_" + std::to_string(s)}};
      add(ToJson(e));
    }
  }
  std::filesystem::create_directories(dir);
  testing::WriteFile(dir + "/metrics.jsonl", text);
  const std::string html = Report(dir, root_ + "/gpu.html");
  std::string dom;
  const json drawn = Open(html, &dom);
  ASSERT_TRUE(drawn.is_object()) << dom.substr(0, 2000);
  EXPECT_TRUE(drawn["errors"].empty()) << drawn["errors"].dump();
  ASSERT_TRUE(drawn["charts"].contains("chart-gpu")) << drawn.dump();
  ASSERT_EQ(drawn["charts"]["chart-gpu"].size(), 3u);  // utilisation, power, memory
  for (const auto& ds : drawn["charts"]["chart-gpu"]) EXPECT_EQ(ds["points"], 20) << ds["label"];
  // eval.choices: its accuracy chart, acc and acc_norm at the two evaluations.
  ASSERT_TRUE(drawn["charts"].contains("chart-choices")) << drawn.dump();
  ASSERT_EQ(drawn["charts"]["chart-choices"].size(), 2u);
  for (const auto& ds : drawn["charts"]["chart-choices"]) EXPECT_EQ(ds["points"], 2) << ds["label"];
  // data.mix: data.dir's val loss and the mixed-in dataset's, at the two evaluations.
  ASSERT_TRUE(drawn["charts"].contains("chart-mix")) << drawn.dump();
  ASSERT_EQ(drawn["charts"]["chart-mix"].size(), 2u);
  EXPECT_EQ(drawn["charts"]["chart-mix"][1]["label"], "data/web");
  for (const auto& ds : drawn["charts"]["chart-mix"]) EXPECT_EQ(ds["points"], 2) << ds["label"];
  // 3 GB in s3 for 20 s at $0.023/GB-month; 0.5 GB out at $0.09/GB (AWS: the s3:// checkpoints').
  EXPECT_NEAR(std::stod(Cell(dom, 0, "storage_usd")), 3.0 * (20.0 / 3600 / 730) * 0.023, 1e-12);
  EXPECT_NEAR(std::stod(Cell(dom, 0, "egress_usd")), 0.5 * 0.09, 1e-9);
  EXPECT_NE(dom.find("(model 0.500 GB out)"), std::string::npos);
}

}  // namespace
}  // namespace tern
