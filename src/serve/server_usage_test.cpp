// Usage and cost per project over HTTP (testing/server_fixture.h with several API keys): each key's usage
// counted apart in /metrics, one key over its requests/min (or tokens/min) limit answered 429 with
// Retry-After while another key is served, busy/idle seconds and $ per 1M generated tokens consistent with
// the counters, the usage file and log parse, and no key appears in /metrics, the log or the usage file.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "report/finops.h"
#include "testing/processes.h"
#include "testing/server_fixture.h"

namespace tern::testing {
namespace {

namespace fs = std::filesystem;

constexpr char kAlpha[] = "sk-alpha-SECRET-7f3a9c01";  // project search, no limits
constexpr char kBeta[] = "sk-beta-SECRET-2b8e4d55";    // project ads, 2 requests per minute
constexpr char kGamma[] = "sk-gamma-SECRET-90c1e7aa";  // project ads, 5 tokens per minute
constexpr double kPrice = 3.6;                         // $/h

fs::path Dir() {
  return fs::temp_directory_path() / ("tern_server_usage_test_" + std::to_string(::getpid()));
}

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class UsageServerTest : public ServerTest {
 protected:
  static void SetUpTestSuite() {
    fs::create_directories(Dir());
    ServerOptions so = DefaultOptions();
    so.api_key.clear();
    so.api_keys = {
        {"alpha", kAlpha, "search", 0, 0}, {"beta", kBeta, "ads", 2, 0}, {"gamma", kGamma, "ads", 0, 5}};
    so.price_per_hour = kPrice;
    so.usage_log = (Dir() / "usage.jsonl").string();
    so.usage_file = (Dir() / "usage.json").string();
    so.usage_file_period_s = 0.2;
    StartServer(so);
  }
  static void TearDownTestSuite() {
    ServerTest::TearDownTestSuite();
    fs::remove_all(Dir());
  }
  static HttpResult Complete(const std::string& key, int max_tokens = 3) {
    return Curl(
        "/v1/completions",
        fmt::format(R"({{"prompt":"And God said","max_tokens":{},"temperature":0,"ignore_eos":true}})",
                    max_tokens),
        key);
  }
  // The response headers and status of a completion (curl -D -).
  static std::string Headers(const std::string& key) {
    return Shell("curl -s -o /dev/null -D - -H 'Content-Type: application/json' -H " +
                 Quote(std::string("Authorization: Bearer ") + key) +
                 " --data-binary '{\"prompt\":\"x\",\"max_tokens\":1}' " + Quote(Url("/v1/completions")));
  }
  static double Sample(const std::map<std::string, double>& m, const std::string& name) {
    auto it = m.find(name);
    EXPECT_NE(it, m.end()) << "no sample " << name;
    return it == m.end() ? -1 : it->second;
  }
  static std::string Label(const char* family, const char* project, const char* key) {
    return fmt::format("{}{{project=\"{}\",key_id=\"{}\"}}", family, project, key);
  }
};

TEST_F(UsageServerTest, EachKeysUsageIsCountedApart) {
  const auto before = Metrics(kAlpha);
  const std::string a_req = Label("tern_usage_requests_total", "search", "alpha"),
                    a_gen = Label("tern_usage_generation_tokens_total", "search", "alpha"),
                    a_prompt = Label("tern_usage_prompt_tokens_total", "search", "alpha"),
                    g_req = Label("tern_usage_requests_total", "ads", "gamma");
  for (int i = 0; i < 2; i++) EXPECT_EQ(Complete(kAlpha, 4).status, 200);
  EXPECT_EQ(Complete(kGamma, 2).status, 200);
  EXPECT_EQ(Curl("/v1/completions", R"({"prompt":"x"})", "sk-nobody-0000000").status, 401);
  const auto after = Metrics(kAlpha);
  EXPECT_EQ(Sample(after, a_req) - Sample(before, a_req), 2);
  EXPECT_EQ(Sample(after, a_gen) - Sample(before, a_gen), 8);
  EXPECT_GT(Sample(after, a_prompt) - Sample(before, a_prompt), 0);
  EXPECT_EQ(Sample(after, g_req) - Sample(before, g_req), 1);
  EXPECT_EQ(Sample(after, Label("tern_usage_generation_tokens_total", "ads", "gamma")) -
                Sample(before, Label("tern_usage_generation_tokens_total", "ads", "gamma")),
            2);
  // Every generated token belongs to one key.
  double per_key = 0;
  for (const char* k : {"alpha", "beta", "gamma"})
    per_key += Sample(after, Label("tern_usage_generation_tokens_total", k[0] == 'a' ? "search" : "ads", k));
  EXPECT_EQ(per_key, Sample(after, "tern_generation_tokens_total"));
}

TEST_F(UsageServerTest, OverItsRequestLimitAKeyGets429WithRetryAfterWhileAnotherIsServed) {
  EXPECT_EQ(Complete(kBeta).status, 200);
  EXPECT_EQ(Complete(kBeta).status, 200);
  const HttpResult refused = Complete(kBeta);
  ASSERT_EQ(refused.status, 429) << refused.body;
  const json err = Json(refused);
  EXPECT_EQ(err["error"]["code"], "rate_limit_exceeded") << refused.body;
  EXPECT_EQ(err["error"]["type"], "requests") << refused.body;
  EXPECT_NE(err["error"]["message"].get<std::string>().find("'beta'"), std::string::npos);
  const std::string headers = Headers(kBeta);
  EXPECT_NE(headers.find(" 429"), std::string::npos) << headers;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(headers, m, std::regex(R"(Retry-After: (\d+))"))) << headers;
  EXPECT_GE(std::stoi(m[1]), 20);  // 2 per minute: the next one in about 30 s
  EXPECT_LE(std::stoi(m[1]), 30);
  EXPECT_EQ(Complete(kAlpha).status, 200) << "another key is still served";
  const auto metrics = Metrics(kAlpha);
  EXPECT_EQ(
      Sample(metrics, "tern_usage_rate_limited_total{project=\"ads\",key_id=\"beta\",limit=\"requests\"}"),
      2);
  EXPECT_EQ(Sample(metrics,
                   "tern_usage_rate_limited_total{project=\"search\",key_id=\"alpha\",limit=\"requests\"}"),
            0);
}

TEST_F(UsageServerTest, OverItsTokenLimitAKeyGets429) {
  Complete(kGamma, 8);  // the prompt and 8 tokens overdraw 5 per minute (whichever test ran first)
  const HttpResult refused = Complete(kGamma, 2);
  ASSERT_EQ(refused.status, 429) << refused.body;
  EXPECT_EQ(Json(refused)["error"]["type"], "tokens") << refused.body;
  EXPECT_EQ(Complete(kAlpha).status, 200);
}

TEST_F(UsageServerTest, BusyIdleAndCostPerMillionTokensAgreeWithTheCounters) {
  EXPECT_EQ(Complete(kAlpha, 8).status, 200);
  const auto m = Metrics(kAlpha);
  const double busy = Sample(m, "tern_busy_seconds_total"), idle = Sample(m, "tern_idle_seconds_total");
  EXPECT_GT(busy, 0);
  EXPECT_GT(idle, 0);
  EXPECT_EQ(Sample(m, "tern_price_per_hour_usd"), kPrice);
  const double cost = Sample(m, "tern_cost_usd_total");
  EXPECT_NEAR(cost, kPrice * (busy + idle) / 3600, 1e-6);
  EXPECT_NEAR(Sample(m, "tern_usd_per_million_generated_tokens"),
              cost / Sample(m, "tern_generation_tokens_total") * 1e6, 1e-3);

  // The usage file is rewritten every 0.2 s: it catches up with the counters.
  json j;
  for (int i = 0; i < 50; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    j = json::parse(ReadAll(Dir() / "usage.json"), nullptr, false);
    if (!j.is_discarded() && j["generation_tokens"] == Sample(m, "tern_generation_tokens_total")) break;
  }
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["kind"], "tern-serve-usage");
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["generation_tokens"], Sample(m, "tern_generation_tokens_total"));
  EXPECT_GE(j["busy_s"].get<double>(), busy);
  EXPECT_NEAR(j["reserved_s"].get<double>(), j["busy_s"].get<double>() + j["idle_s"].get<double>(), 1e-6);
  EXPECT_NEAR(j["usd"].get<double>(), kPrice * j["reserved_s"].get<double>() / 3600, 1e-9);
  EXPECT_NEAR(j["usd_per_million_generated_tokens"].get<double>(),
              j["usd"].get<double>() / j["generation_tokens"].get<double>() * 1e6, 1e-6);
  double project_usd = 0;
  for (const json& p : j["by_project"]) project_usd += p["usd"].get<double>();
  EXPECT_NEAR(project_usd, j["usd"].get<double>(), 1e-9) << "the cost is split over the projects";

  // `tern report --ledger --serving FILE` reads it: its serving section has the same figures.
  auto read = report::LoadServingUsage((Dir() / "usage.json").string());
  ASSERT_TRUE(read.ok()) << read.status().message();
  const json section = report::ServingJson({*read});
  EXPECT_EQ(section["servers"].size(), 1u);
  EXPECT_GE(section["totals"]["generation_tokens"].get<double>(), j["generation_tokens"].get<double>());
  EXPECT_GT(section["totals"]["usd_per_mtok"].get<double>(), 0);
  std::set<std::string> projects;
  for (const json& p : section["by_project"]) projects.insert(p["project"].get<std::string>());
  EXPECT_EQ(projects, (std::set<std::string>{"ads", "search"}));
  ASSERT_EQ(section["by_model"].size(), 1u);
  EXPECT_EQ(section["by_model"][0]["model"], "tiny");
  EXPECT_EQ(section["by_model"][0]["generation_tokens"], section["totals"]["generation_tokens"]);
}

TEST_F(UsageServerTest, TheUsageLogHasOneLinePerRequestAndNoKeyIsWrittenAnywhere) {
  EXPECT_EQ(
      Curl("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})", kAlpha)
          .status,
      200);
  EXPECT_EQ(
      Curl("/v1/completions", R"({"prompt":"x","max_tokens":2,"stream":true,"ignore_eos":true})", kAlpha)
          .status,
      200);
  const std::string metrics = Curl("/metrics", "", kAlpha).body;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the usage file's next rewrite
  const std::string log = ReadAll(Dir() / "usage.jsonl"), file = ReadAll(Dir() / "usage.json");
  std::istringstream lines(log);
  std::string line;
  int n = 0, streamed = 0;
  while (std::getline(lines, line)) {
    const json j = json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << line;
    for (const char* field : {"time_unix", "project", "key_id", "route", "status", "prompt_tokens",
                              "generation_tokens", "latency_s"})
      EXPECT_TRUE(j.contains(field)) << field << " missing in " << line;
    streamed += j["route"] == "/v1/completions" && j["key_id"] == "alpha" && j["generation_tokens"] == 2;
    n++;
  }
  EXPECT_GE(n, 2);
  EXPECT_GE(streamed, 1) << "the streamed request is logged with its tokens\n" << log;
  for (const char* key : {kAlpha, kBeta, kGamma, "SECRET"}) {
    EXPECT_EQ(metrics.find(key), std::string::npos) << "a key in /metrics";
    EXPECT_EQ(log.find(key), std::string::npos) << "a key in the usage log";
    EXPECT_EQ(file.find(key), std::string::npos) << "a key in the usage file";
  }
}

TEST_F(UsageServerTest, PromtoolAcceptsTheMetricsWithUsage) {
  EXPECT_EQ(Complete(kAlpha).status, 200);
  const std::string promtool = FindProgram("promtool");
  if (promtool.empty())
    TERN_SKIP_OR_FAIL_IN_CI(
        "promtool is not on PATH: install Debian's prometheus package (scripts/install-deps)");
  const std::string text = Curl("/metrics", "", kAlpha).body;
  ASSERT_NE(text.find("tern_usage_requests_total{project=\"search\",key_id=\"alpha\"}"), std::string::npos);
  std::ofstream(Dir() / "metrics.txt") << text;
  const auto check = RunCommand(promtool + " check metrics < " + (Dir() / "metrics.txt").string());
  EXPECT_EQ(check.code, 0) << check.output;
  EXPECT_EQ(check.output, "") << "promtool's lint found problems";
}

}  // namespace
}  // namespace tern::testing
