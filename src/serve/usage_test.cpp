// usage.h without HTTP: the --api-keys file and its errors, the per-minute buckets, busy and idle seconds and
// the $ per 1M generated tokens under an injected clock, the usage file and the usage log.
#include "serve/usage.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace tern {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

class UsageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tern_usage_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  static std::string ReadAll(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  fs::path dir_;
};

TEST_F(UsageTest, LoadsKeysWithProjectsAndLimits) {
  setenv("TERN_USAGE_TEST_KEY", "sk-from-the-environment", 1);
  const std::string path = Write("keys.yaml",
                                 "keys:\n"
                                 "  - id: search-prod\n"
                                 "    key: sk-search-0123456789\n"
                                 "    project: search\n"
                                 "    requests_per_min: 600\n"
                                 "    tokens_per_min: 200000\n"
                                 "    admin: true\n"
                                 "    priority: -5\n"
                                 "  - id: batch\n"
                                 "    key_env: TERN_USAGE_TEST_KEY\n"
                                 "    project: ads\n");
  auto keys = LoadApiKeys(path);
  ASSERT_TRUE(keys.ok()) << keys.status().message();
  ASSERT_EQ(keys->size(), 2u);
  EXPECT_EQ((*keys)[0].id, "search-prod");
  EXPECT_EQ((*keys)[0].key, "sk-search-0123456789");
  EXPECT_EQ((*keys)[0].project, "search");
  EXPECT_EQ((*keys)[0].requests_per_min, 600);
  EXPECT_EQ((*keys)[0].tokens_per_min, 200000);
  EXPECT_EQ((*keys)[1].key, "sk-from-the-environment");
  EXPECT_EQ((*keys)[1].requests_per_min, 0);  // no limit
  EXPECT_TRUE((*keys)[0].admin);
  EXPECT_FALSE((*keys)[1].admin);  // by default
  EXPECT_EQ((*keys)[0].priority, -5);
  EXPECT_EQ((*keys)[1].priority, 0);  // by default
}

TEST_F(UsageTest, KeyFileErrorsNameTheFileAndLine) {
  const struct {
    std::string text, want;
  } cases[] = {
      {"keys:\n  - id: a\n    key: sk-aaaaaaaaaa\n", "keys.yaml:2: key 'a' has no 'project'"},
      {"keys:\n  - id: a\n    key: sk-aaaaaaaaaa\n    project: p\n  - id: a\n    key: sk-bbbbbbbbbb\n"
       "    project: p\n",
       "keys.yaml:5: id 'a' is used twice"},
      {"keys:\n  - id: a\n    key: sk-aaaaaaaaaa\n    project: p\n    rpm: 3\n",
       "keys.yaml:5: unknown field 'rpm'"},
      {"keys:\n  - id: a\n    key: sk-aaaaaaaaaa\n    project: p\n    requests_per_min: -1\n",
       "keys.yaml:5: 'requests_per_min' must be a positive number"},
      {"keys:\n  - id: a\n    key: short\n    project: p\n", "keys.yaml:3: the key of 'a' is shorter than 8"},
      {"keys:\n  - id: a\n    key: sk-aaaaaaaaaa\n    project: p\n  - id: b\n    key: sk-aaaaaaaaaa\n"
       "    project: q\n",
       "'b' has the same key as 'a'"},
      {"keys:\n  - id: a\n    key: sk-aaaaaaaaaa\n    project: p\n    admin: yes please\n",
       "keys.yaml:5: admin of 'a' must be true or false"},
      {"keys:\n  - id: a\n    key: sk-aaaaaaaaaa\n    project: p\n    priority: soon\n",
       "keys.yaml:5: priority of 'a' must be an integer in [-1000, 1000]"},
      {"keys: [\n", "YAML syntax error"},
      {"api_keys: []\n", "expected a list 'keys:'"},
  };
  for (const auto& c : cases) {
    auto keys = LoadApiKeys(Write("keys.yaml", c.text));
    ASSERT_FALSE(keys.ok()) << c.text;
    EXPECT_NE(keys.status().message().find(c.want), std::string::npos) << keys.status().message();
    EXPECT_EQ(keys.status().message().find("sk-aaaaaaaaaa"), std::string::npos) << "a key in an error";
  }
  EXPECT_FALSE(LoadApiKeys((dir_ / "missing.yaml").string()).ok());
}

struct FakeClock {
  double t = 1000;
};

UsageOptions TwoKeys(FakeClock* clock) {
  UsageOptions o;
  o.keys = {{"a", "sk-aaaaaaaaaaaa", "search", 2, 0}, {"b", "sk-bbbbbbbbbbbb", "ads", 0, 60}};
  o.clock = [clock] { return clock->t; };
  return o;
}

TEST_F(UsageTest, AuthenticatesEveryKeyAndNoOther) {
  FakeClock clock;
  UsageTracker u(TwoKeys(&clock));
  EXPECT_TRUE(u.auth_required());
  EXPECT_EQ(u.Authenticate("sk-aaaaaaaaaaaa"), 0);
  EXPECT_EQ(u.Authenticate("sk-bbbbbbbbbbbb"), 1);
  EXPECT_EQ(u.Authenticate("sk-bbbbbbbbbbb"), -1);
  EXPECT_EQ(u.Authenticate(""), -1);
  EXPECT_FALSE(u.IsAdmin(0)) << "keys are not admins unless the file says so";
  EXPECT_FALSE(u.IsAdmin(-1));
  FakeClock c2;
  UsageOptions none;
  none.clock = [&c2] { return c2.t; };
  EXPECT_TRUE(UsageTracker(none).IsAdmin(-1)) << "without keys the --allow-lora-updates flag is the consent";
  EXPECT_EQ(UsageTracker(none).Priority(-1, -7), -7) << "without keys a request's priority is its own";
}

// A key's priority is a floor: its requests may ask to wait longer, never to go sooner (a batch key cannot
// jump the interactive queue by sending "priority": -1000).
TEST_F(UsageTest, AKeysPriorityIsAFloor) {
  FakeClock clock;
  UsageOptions o = TwoKeys(&clock);
  o.keys[1].priority = 10;
  UsageTracker u(o);
  EXPECT_EQ(u.Priority(0, -4), 0) << "a key's default floor is 0";
  EXPECT_EQ(u.Priority(0, 3), 3);
  EXPECT_EQ(u.Priority(1, -1000), 10);
  EXPECT_EQ(u.Priority(1, 0), 10);
  EXPECT_EQ(u.Priority(1, 50), 50);
}

TEST_F(UsageTest, RequestsPerMinuteRefusesWithRetryAfterAndRefills) {
  FakeClock clock;
  UsageTracker u(TwoKeys(&clock));
  EXPECT_FALSE(u.Admit(0));
  EXPECT_FALSE(u.Admit(0));
  auto refused = u.Admit(0);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->limit, "requests");
  EXPECT_EQ(refused->retry_after_s, 30);  // 2 per minute: one more every 30 s
  EXPECT_EQ(refused->message.find("sk-"), std::string::npos);
  EXPECT_FALSE(u.Admit(1)) << "another key is not limited by this one";
  clock.t += 29;
  EXPECT_TRUE(u.Admit(0));
  clock.t += 1.5;
  EXPECT_FALSE(u.Admit(0));
  EXPECT_NE(u.RenderMetrics().find(
                "tern_usage_rate_limited_total{project=\"search\",key_id=\"a\",limit=\"requests\"} 2\n"),
            std::string::npos)
      << u.RenderMetrics();
}

TEST_F(UsageTest, TokensPerMinuteRefusesOnceOverdrawn) {
  FakeClock clock;
  UsageTracker u(TwoKeys(&clock));
  EXPECT_FALSE(u.Admit(1));
  u.Record({0, 1, "/v1/completions", 200, 30, 70, 0.5});  // 100 tokens of a 60/min budget: 40 overdrawn
  auto refused = u.Admit(1);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->limit, "tokens");
  EXPECT_EQ(refused->retry_after_s, 41);  // back to one token at one per second
  clock.t += 41;
  EXPECT_FALSE(u.Admit(1));
}

// A model's name is free text (--model-name): in /metrics it is escaped as Prometheus label values are.
TEST_F(UsageTest, ModelLabelsAreEscaped) {
  FakeClock clock;
  UsageOptions o = TwoKeys(&clock);
  o.model = "my \"best\" \\ model";
  UsageTracker u(o);
  u.Record({1.7e9, 0, "/v1/completions", 200, 1, 2, 0.1});
  const std::string m = u.RenderMetrics();
  EXPECT_NE(m.find("tern_usage_model_requests_total{model=\"my \\\"best\\\" \\\\ model\"} 1\n"),
            std::string::npos)
      << m;
}

TEST_F(UsageTest, BusyIdleAndCostPerMillionTokensFollowTheClock) {
  FakeClock clock;
  UsageOptions o = TwoKeys(&clock);
  o.price_per_hour = 3.6;  // $0.001 per second
  o.usage_file = (dir_ / "usage.json").string();
  o.usage_file_period_s = 3600;  // only at the end: the test writes it itself
  o.usage_log = (dir_ / "usage.jsonl").string();
  o.model = "tiny";
  {
    UsageTracker u(o);
    clock.t += 10;
    u.Begin();
    clock.t += 5;
    u.End();  // busy 5
    clock.t += 5;
    u.Begin();
    clock.t += 1;
    u.Begin();  // overlapping requests count once
    clock.t += 1;
    u.End();
    clock.t += 8;
    u.End();  // busy 5 + 10
    clock.t += 10;
    u.Record({1.7e9, 0, "/v1/completions", 200, 100, 600, 2.0});
    u.Record({1.7e9, 1, "/v1/chat/completions", 200, 50, 400, 1.0, "law"});  // a LoRA adapter's request
    u.Record({1.7e9, 1, "/v1/completions", 429, 0, 0, 0.001});
    EXPECT_DOUBLE_EQ(u.busy_s(), 15);
    EXPECT_DOUBLE_EQ(u.idle_s(), 25);
    const std::string m = u.RenderMetrics();
    EXPECT_NE(m.find("tern_busy_seconds_total 15\n"), std::string::npos) << m;
    EXPECT_NE(m.find("tern_idle_seconds_total 25\n"), std::string::npos) << m;
    EXPECT_NE(m.find("tern_cost_usd_total 0.04\n"), std::string::npos) << m;
    // $0.04 for the 40 s reserved over 1000 generated tokens
    EXPECT_NE(m.find("tern_usd_per_million_generated_tokens 40\n"), std::string::npos) << m;
    EXPECT_NE(m.find("tern_usage_generation_tokens_total{project=\"ads\",key_id=\"b\"} 400\n"),
              std::string::npos);
    const json j = u.UsageJson();
    EXPECT_DOUBLE_EQ(j["reserved_s"].get<double>(), 40);
    EXPECT_DOUBLE_EQ(j["utilisation"].get<double>(), 15.0 / 40);
    EXPECT_DOUBLE_EQ(j["usd"].get<double>(), 0.04);
    EXPECT_EQ(j["generation_tokens"], 1000);
    EXPECT_EQ(j["requests"], 3);
    ASSERT_EQ(j["by_project"].size(), 2u);
    EXPECT_EQ(j["by_project"][0]["project"], "ads");
    EXPECT_NEAR(j["by_project"][0]["usd"].get<double>(), 0.016, 1e-12);  // 400 of 1000 tokens
    EXPECT_EQ(j["by_project"][0]["requests"], 2);
    // Per served model: the LoRA adapter's tokens apart from the base model's ("tiny"), with their $ share.
    ASSERT_EQ(j["by_model"].size(), 2u) << j["by_model"].dump();
    EXPECT_EQ(j["by_model"][0]["model"], "law");
    EXPECT_EQ(j["by_model"][0]["generation_tokens"], 400);
    EXPECT_NEAR(j["by_model"][0]["usd"].get<double>(), 0.016, 1e-12);
    EXPECT_EQ(j["by_model"][1]["model"], "tiny");
    EXPECT_EQ(j["by_model"][1]["requests"], 2);
    EXPECT_NE(m.find("tern_usage_model_generation_tokens_total{model=\"law\"} 400\n"), std::string::npos)
        << m;
  }  // destroyed: the usage file is written
  const json file = json::parse(ReadAll(dir_ / "usage.json"), nullptr, false);
  ASSERT_FALSE(file.is_discarded());
  EXPECT_EQ(file["kind"], "tern-serve-usage");
  EXPECT_EQ(file["model"], "tiny");
  EXPECT_DOUBLE_EQ(file["usd_per_million_generated_tokens"].get<double>(), 40);
  EXPECT_FALSE(fs::exists(dir_ / "usage.json.tmp"));
  std::istringstream log(ReadAll(dir_ / "usage.jsonl"));
  std::string line;
  std::vector<json> lines;
  while (std::getline(log, line)) lines.push_back(json::parse(line));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["key_id"], "a");
  EXPECT_EQ(lines[0]["project"], "search");
  EXPECT_EQ(lines[0]["generation_tokens"], 600);
  EXPECT_EQ(lines[2]["status"], 429);
  EXPECT_EQ(lines[1]["model"], "law");
  EXPECT_EQ(lines[0]["model"], "tiny");
  for (const std::string f : {"usage.json", "usage.jsonl"})
    for (const char* key : {"sk-aaaaaaaaaaaa", "sk-bbbbbbbbbbbb"})
      EXPECT_EQ(ReadAll(dir_ / f).find(key), std::string::npos) << key << " in " << f;
}

}  // namespace
}  // namespace tern
