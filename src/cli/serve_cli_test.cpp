// `tern serve BASE --lora NAME=PATH`, end to end through the binary: an adapter directory beside a base run
// (adapter.safetensors as a LoRA run writes it), the server's /v1/models and a completion by the adapter
// (what an engine over the merged weights answers, computed here), and the refusals at start: an adapter
// of other weights, a name taken twice; an adapter loaded while serving (--allow-lora-updates); a spot notice
// that drains and stops the server.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "testing/processes.h"
#include "testing/tern_binary.h"
#include "testing/test_run.h"

namespace tern {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ServeCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tern_ = testing::FindTernBinary();
    ASSERT_FALSE(tern_.empty()) << "build the tern binary first (cmake --build build --target tern)";
    run_ = testing::MakeTestRun();
    base_ = fs::path(run_->dir.path()) / "base";
    fs::create_directories(base_);
    fs::copy_file(run_->dir / "model.safetensors", base_ / "model.safetensors");
    fs::copy_file(run_->dir / "tokenizer.model", base_ / "tokenizer.model");
    adapter_ = testing::RandomLoraAdapter(*run_, 4, kLoraQkv | kLoraFc, 8.0f, 11);
    fs::create_directories(fs::path(run_->dir.path()) / "law");
    ASSERT_TRUE(WriteLoraAdapter(run_->dir / "law/adapter.safetensors", adapter_).ok());
  }
  // Runs `tern serve` to its exit (a refusal at start): the exit code and what it printed.
  std::pair<int, std::string> Refused(std::vector<std::string> args) {
    const std::string log = run_->dir / "refused.log";
    args.insert(args.begin(), {tern_.string(), "serve"});
    args.insert(args.end(), {"--port", std::to_string(testing::FreePort())});
    testing::Child c(args, {}, log);
    const int code = c.Wait();
    return {code, ReadAll(log)};
  }

  // Waits (up to a minute) until the server answers /health with 200; false if it exited first.
  static bool Up(testing::Child& serve, httplib::Client& client) {
    client.set_connection_timeout(1, 0);
    for (int i = 0; i < 600 && serve.Running(); i++) {
      auto r = client.Get("/health");
      if (r && r->status == 200) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  std::map<std::string, std::string> RegistryEnv() const {
    return {{"TERN_REGISTRY", run_->dir / "registry"}};
  }
  // The law adapter's directory made a run (the base's weights and tokenizer beside adapter.safetensors) and
  // registered as models:/law@production.
  void RegisterLaw(const std::map<std::string, std::string>& env) {
    const fs::path law = fs::path(run_->dir.path()) / "law";
    fs::copy_file(base_ / "model.safetensors", law / "model.safetensors");
    fs::copy_file(base_ / "tokenizer.model", law / "tokenizer.model");
    testing::Child reg(
        {tern_.string(), "models", "register", law.string(), "--name", "law", "--alias", "production"}, env,
        run_->dir / "register.log");
    ASSERT_EQ(reg.Wait(), 0) << ReadAll(run_->dir / "register.log");
  }

  fs::path tern_, base_;
  std::unique_ptr<testing::TestRun> run_;
  LoraAdapter adapter_;
};

TEST_F(ServeCliTest, ServesTheAdapterBesideTheBaseModel) {
  const int port = testing::FreePort();
  const std::string log = run_->dir / "serve.log";
  // --lora before the positional model: it takes one value per occurrence.
  testing::Child serve({tern_.string(), "serve", "--lora", "law=" + (run_->dir / "law"), base_.string(),
                        "--port", std::to_string(port), "--threads", "1", "--kv-cache-mb", "16"},
                       {}, log);
  httplib::Client client("127.0.0.1", port);
  ASSERT_TRUE(Up(serve, client)) << ReadAll(log);
  auto models = client.Get("/v1/models");
  ASSERT_TRUE(models);
  const json list = json::parse(models->body);
  ASSERT_EQ(list["data"].size(), 2u) << models->body;
  EXPECT_EQ(list["data"][1]["id"], "law");
  EXPECT_EQ(list["data"][1]["parent"], "base");

  const std::string body = R"({"model":"law","prompt":"And God said","max_tokens":6,"temperature":0,)"
                           R"("ignore_eos":true})";
  auto r = client.Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["model"], "law");

  // The same request to an engine over the merged weights.
  EXPECT_EQ(j["choices"][0]["text"],
            testing::GreedyText(*run_, testing::MergedLoraParams(*run_, adapter_), "And God said", 6));
  serve.Signal(SIGTERM);
  EXPECT_EQ(serve.Wait(), 0) << ReadAll(log);
  EXPECT_NE(ReadAll(log).find("LoRA adapter law (r4 alpha8 qkv,fc"), std::string::npos) << ReadAll(log);
}

// --max-loaded-loras 1 with two adapters: the second is checked at start but left on disk, read back when a
// request names it (the first leaves), and each answers as its merged model however often they alternate.
TEST_F(ServeCliTest, ServesMoreAdaptersThanItKeepsInMemory) {
  const LoraAdapter gospel = testing::RandomLoraAdapter(*run_, 4, kLoraQkv | kLoraFc, 8.0f, 12);
  fs::create_directories(fs::path(run_->dir.path()) / "gospel");
  ASSERT_TRUE(WriteLoraAdapter(run_->dir / "gospel/adapter.safetensors", gospel).ok());
  const int port = testing::FreePort();
  const std::string log = run_->dir / "serve.log";
  testing::Child serve({tern_.string(), "serve", base_.string(), "--lora", "law=" + (run_->dir / "law"),
                        "--lora", "gospel=" + (run_->dir / "gospel"), "--max-loaded-loras", "1", "--port",
                        std::to_string(port), "--threads", "1", "--kv-cache-mb", "16"},
                       {}, log);
  httplib::Client client("127.0.0.1", port);
  ASSERT_TRUE(Up(serve, client)) << ReadAll(log);
  const std::map<std::string, std::string> expected = {
      {"law", testing::GreedyText(*run_, testing::MergedLoraParams(*run_, adapter_), "And God said", 6)},
      {"gospel", testing::GreedyText(*run_, testing::MergedLoraParams(*run_, gospel), "And God said", 6)}};
  ASSERT_NE(expected.at("law"), expected.at("gospel"))
      << "the adapters must differ for this to mean anything";
  for (const char* model : {"law", "gospel", "law", "gospel"}) {
    const std::string body = json{
        {"model", model},
        {"prompt", "And God said"},
        {"max_tokens", 6},
        {"temperature", 0},
        {"ignore_eos", true}}.dump();
    auto r = client.Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(json::parse(r->body)["choices"][0]["text"], expected.at(model)) << model;
  }
  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("\ntern_lora_loads_total 3\n"), std::string::npos) << metrics->body;
  EXPECT_NE(metrics->body.find("\ntern_lora_adapters 1\n"), std::string::npos) << metrics->body;
  serve.Signal(SIGTERM);
  EXPECT_EQ(serve.Wait(), 0) << ReadAll(log);
  EXPECT_NE(ReadAll(log).find("gospel: \"model\": \"gospel\", read into memory when a request names it"),
            std::string::npos)
      << ReadAll(log);
}

// --speculative-tokens: drafts by prompt lookup are verified by the model, so the completion is the one
// a plain engine gives, and /metrics counts the draft tokens the model confirmed.
TEST_F(ServeCliTest, SpeculativeDecodingAnswersWhatAPlainEngineAnswers) {
  const int port = testing::FreePort();
  const std::string log = run_->dir / "serve.log";
  testing::Child serve({tern_.string(), "serve", base_.string(), "--port", std::to_string(port), "--threads",
                        "1", "--kv-cache-mb", "16", "--speculative-tokens", "4", "--prompt-lookup-min", "1"},
                       {}, log);
  httplib::Client client("127.0.0.1", port);
  ASSERT_TRUE(Up(serve, client)) << ReadAll(log);
  const std::string prompt =
      "And God said, Let there be light. And God said, Let there be light. And God said";
  const std::string body =
      json{{"prompt", prompt}, {"max_tokens", 40}, {"temperature", 0}, {"ignore_eos", true}}.dump();
  auto r = client.Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"][0]["text"], testing::GreedyText(*run_, run_->params, prompt, 40));
  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  auto counter = [&](const std::string& name) {
    const size_t at = metrics->body.find("\n" + name + " ");
    return at == std::string::npos ? -1.0 : std::stod(metrics->body.substr(at + name.size() + 2));
  };
  EXPECT_GT(counter("tern_spec_decode_draft_tokens_total"), 0) << metrics->body;
  EXPECT_GT(counter("tern_spec_decode_accepted_tokens_total"), 0) << metrics->body;
  EXPECT_LT(counter("tern_forward_steps_total"), 40) << metrics->body;  // fewer forwards than tokens
  serve.Signal(SIGTERM);
  EXPECT_EQ(serve.Wait(), 0) << ReadAll(log);
  EXPECT_NE(ReadAll(log).find("speculative decoding by prompt lookup: up to 4 draft tokens"),
            std::string::npos)
      << ReadAll(log);
}

// `tern generate --speculative-tokens --stats`: the same text as without, and the stats line says how many
// draft tokens were confirmed in how many forwards.
TEST_F(ServeCliTest, GenerateSpeculativelyPrintsTheSameTextAndItsStats) {
  std::vector<std::string> outputs, stats;
  for (const char* k : {"0", "4"}) {
    const std::string log = run_->dir / (std::string("gen") + k + ".log");  // stdout, then the stats (stderr)
    testing::Child gen(
        {tern_.string(), "generate", base_.string(), "--prompt",
         "And God said, Let there be light. And God said, Let there be light. And God said", "--max-tokens",
         "40", "--temperature", "0", "--speculative-tokens", k, "--prompt-lookup-min", "1", "--stats"},
        {{"OMP_NUM_THREADS", "1"}}, log);
    ASSERT_EQ(gen.Wait(), 0) << ReadAll(log);
    const std::string all = ReadAll(log);
    const size_t at = all.find("tern generate: ");
    ASSERT_NE(at, std::string::npos) << all;
    outputs.push_back(all.substr(0, at));
    stats.push_back(all.substr(at));
  }
  EXPECT_EQ(outputs[1], outputs[0]);
  EXPECT_NE(stats[0].find("40 tokens in 40 forward passes"), std::string::npos) << stats[0];
  EXPECT_NE(stats[0].find("draft tokens accepted 0 of 0"), std::string::npos) << stats[0];
  EXPECT_EQ(stats[1].find("40 tokens in 40 forward passes"), std::string::npos) << stats[1];
  EXPECT_EQ(stats[1].find("draft tokens accepted 0 of"), std::string::npos) << stats[1];
}

// `tern diagnose --serve`: a real server's /metrics, read over HTTP with its key and from a saved file, gives
// its summary and findings: a server that mostly waits is idle_server, at $50/h of idle time.
// (cheaper_serving is the unit test's: this tiny model decodes faster than any GPU row's per-step overhead.)
TEST_F(ServeCliTest, DiagnoseServeReadsTheServersMetrics) {
  const int port = testing::FreePort();
  const std::string log = run_->dir / "serve.log", url = "http://127.0.0.1:" + std::to_string(port);
  testing::Child serve({tern_.string(), "serve", base_.string(), "--port", std::to_string(port), "--threads",
                        "1", "--kv-cache-mb", "16", "--price-per-hour", "50", "--api-key", "sk-diag"},
                       {}, log);
  httplib::Client client("127.0.0.1", port);
  ASSERT_TRUE(Up(serve, client)) << ReadAll(log);
  const httplib::Headers auth = {{"Authorization", "Bearer sk-diag"}};
  for (int i = 0; i < 2; i++) {
    auto r = client.Post("/v1/completions", auth, R"({"prompt":"And God said","max_tokens":4})",
                         "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // mostly idle
  auto diagnose = [&](const std::vector<std::string>& args, const std::string& name) {
    std::vector<std::string> argv = {tern_.string(), "diagnose"};
    argv.insert(argv.end(), args.begin(), args.end());
    testing::Child d(argv, {}, run_->dir / name);
    const int code = d.Wait();
    return std::pair{code, ReadAll(run_->dir / name)};
  };
  const auto [denied_code, denied] = diagnose({"--serve", url}, "d0.log");
  EXPECT_EQ(denied_code, 1);
  EXPECT_NE(denied.find("needs an API key"), std::string::npos) << denied;
  const fs::path before = fs::path(run_->dir.path()) / "before.prom";
  const auto [code, out] =
      diagnose({"--serve", url, "--api-key", "sk-diag", "--json", "--save", before.string()}, "d1.log");
  ASSERT_EQ(code, 0) << out;
  const json j = json::parse(out);
  EXPECT_EQ(j["summary"]["requests"], 2);
  EXPECT_EQ(j["summary"]["completion_tokens"], 4);
  EXPECT_EQ(j["summary"]["price_per_hour"], 50);
  EXPECT_EQ(j["summary"]["model"], "base");
  std::vector<std::string> rules;
  for (const json& f : j["findings"]) rules.push_back(f["rule"]);
  EXPECT_NE(std::find(rules.begin(), rules.end(), "idle_server"), rules.end()) << out;
  EXPECT_GT(j["findings"][0]["usd_per_hour"].get<double>(), 25) << out;  // idle more than half of $50/h
  // A scrape saved to a file reads the same.
  auto m = client.Get("/metrics", auth);
  ASSERT_TRUE(m);
  const fs::path saved = fs::path(run_->dir.path()) / "metrics.txt";
  std::ofstream(saved) << m->body;
  const auto [file_code, text] = diagnose({"--serve", saved.string()}, "d2.log");
  EXPECT_EQ(file_code, 0) << text;
  EXPECT_NE(text.find("base on cpu"), std::string::npos) << text;
  EXPECT_NE(text.find("[idle_server]"), std::string::npos) << text;
  // A window: --since the scrape --save kept, then --window over the live server; each counts only the
  // requests made in it (3, then 1), not the 2 before.
  for (int i = 0; i < 3; i++)
    ASSERT_EQ(client.Post("/v1/completions", auth, R"({"prompt":"And","max_tokens":2})", "application/json")
                  ->status,
              200);
  const auto [since_code, since_out] =
      diagnose({"--serve", url, "--api-key", "sk-diag", "--json", "--since", before.string()}, "d3.log");
  ASSERT_EQ(since_code, 0) << since_out;
  const json js = json::parse(since_out);
  EXPECT_EQ(js["summary"]["requests"], 3) << since_out;
  EXPECT_EQ(js["summary"]["completion_tokens"], 2) << since_out;
  EXPECT_GT(js["summary"]["hours"].get<double>(), 0);
  EXPECT_NE(js["source"].get<std::string>().find("since"), std::string::npos);
  // A scrape of an earlier life of the server (another start time): the window is the life since the restart,
  // all 5 requests, and the output says so.
  std::string earlier = ReadAll(before);
  const size_t at = earlier.find("\nprocess_start_time_seconds ");
  ASSERT_NE(at, std::string::npos) << earlier;
  earlier.insert(at + 28, "1");  // another start time: another life of the server
  const fs::path other_life = fs::path(run_->dir.path()) / "other-life.prom";
  std::ofstream(other_life) << earlier;
  const auto [life_code, life_out] =
      diagnose({"--serve", url, "--api-key", "sk-diag", "--json", "--since", other_life.string()}, "d3b.log");
  ASSERT_EQ(life_code, 0) << life_out;
  EXPECT_NE(life_out.find("restarted between the two scrapes (process_start_time_seconds changed"),
            std::string::npos)
      << life_out;
  const json jl = json::parse(life_out.substr(life_out.find('{')));
  EXPECT_EQ(jl["summary"]["requests"], 5) << life_out;
  EXPECT_NE(jl["source"].get<std::string>().find("since the restart"), std::string::npos) << life_out;
  testing::Child windowed(
      {tern_.string(), "diagnose", "--serve", url, "--api-key", "sk-diag", "--json", "--window", "3s"}, {},
      run_->dir / "d4.log");
  for (int i = 0; i < 300 && ReadAll(run_->dir / "d4.log").find("reading it again") == std::string::npos; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // after its first read
  ASSERT_EQ(
      client.Post("/v1/completions", auth, R"({"prompt":"And","max_tokens":2})", "application/json")->status,
      200);
  ASSERT_EQ(windowed.Wait(), 0) << ReadAll(run_->dir / "d4.log");
  const std::string wout = ReadAll(run_->dir / "d4.log");
  const json jw = json::parse(wout.substr(wout.find('{')));
  EXPECT_EQ(jw["summary"]["requests"], 1) << wout;
  EXPECT_GE(jw["summary"]["hours"].get<double>() * 3600, 2.9) << wout;  // the wait, and the reads around it
  EXPECT_LT(jw["summary"]["hours"].get<double>() * 3600, 30) << wout;
  const auto [bad_code, bad] = diagnose({"--serve", saved.string(), "--window", "1s"}, "d5.log");
  EXPECT_EQ(bad_code, 1);
  EXPECT_NE(bad.find("--since"), std::string::npos) << bad;
  serve.Signal(SIGTERM);
  EXPECT_EQ(serve.Wait(), 0) << ReadAll(log);
}

// Through the model registry: `tern models register` of the LoRA run stores its adapters, and `tern serve
// --lora models:/law@production` (named "law" after the registered name) serves them over the base.
TEST_F(ServeCliTest, ServesAnAdapterFromTheRegistry) {
  const std::map<std::string, std::string> env = RegistryEnv();
  ASSERT_NO_FATAL_FAILURE(RegisterLaw(env));
  const int port = testing::FreePort();
  const std::string log = run_->dir / "serve.log";
  testing::Child serve({tern_.string(), "serve", base_.string(), "--lora", "models:/law@production", "--port",
                        std::to_string(port), "--threads", "1", "--kv-cache-mb", "16"},
                       env, log);
  httplib::Client client("127.0.0.1", port);
  ASSERT_TRUE(Up(serve, client)) << ReadAll(log);
  auto one = client.Get("/v1/models/law");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 200) << one->body;
  EXPECT_EQ(json::parse(one->body)["root"], "models:/law@1") << "the alias pinned to the version it named";
  serve.Signal(SIGTERM);
  EXPECT_EQ(serve.Wait(), 0) << ReadAll(log);
}

// --max-loaded-loras with a registry adapter: when it is read back after the alias moved to another version,
// it is still the version the server loaded first (the alias is pinned at load), not a silent swap.
TEST_F(ServeCliTest, AReadBackAdapterIsTheVersionFirstLoaded) {
  const std::map<std::string, std::string> env = RegistryEnv();
  ASSERT_NO_FATAL_FAILURE(RegisterLaw(env));  // models:/law@1 = adapter_
  const LoraAdapter other = testing::RandomLoraAdapter(*run_, 4, kLoraQkv | kLoraFc, 8.0f, 13);
  fs::create_directories(fs::path(run_->dir.path()) / "gospel");
  ASSERT_TRUE(WriteLoraAdapter(run_->dir / "gospel/adapter.safetensors", other).ok());
  const int port = testing::FreePort();
  const std::string log = run_->dir / "serve.log";
  testing::Child serve({tern_.string(), "serve", base_.string(), "--lora", "models:/law@production", "--lora",
                        "gospel=" + (run_->dir / "gospel"), "--max-loaded-loras", "1", "--port",
                        std::to_string(port), "--threads", "1", "--kv-cache-mb", "16"},
                       env, log);
  httplib::Client client("127.0.0.1", port);
  ASSERT_TRUE(Up(serve, client)) << ReadAll(log);
  auto text = [&](const char* model) {
    auto r = client.Post("/v1/completions",
                         json{{"model", model},
                              {"prompt", "And God said"},
                              {"max_tokens", 6},
                              {"temperature", 0},
                              {"ignore_eos", true}}
                             .dump(),
                         "application/json");
    return r && r->status == 200 ? json::parse(r->body)["choices"][0]["text"].get<std::string>()
                                 : std::string("(failed)");
  };
  const std::string v1 =
      testing::GreedyText(*run_, testing::MergedLoraParams(*run_, adapter_), "And God said", 6);
  EXPECT_EQ(text("law"), v1);

  // Version 2 of law (the gospel adapter's weights) takes the alias.
  const fs::path law2 = fs::path(run_->dir.path()) / "law2";
  fs::create_directories(law2);
  fs::copy_file(base_ / "model.safetensors", law2 / "model.safetensors");
  fs::copy_file(base_ / "tokenizer.model", law2 / "tokenizer.model");
  ASSERT_TRUE(WriteLoraAdapter(law2 / "adapter.safetensors", other).ok());
  testing::Child reg(
      {tern_.string(), "models", "register", law2.string(), "--name", "law", "--alias", "production"}, env,
      run_->dir / "register2.log");
  ASSERT_EQ(reg.Wait(), 0) << ReadAll(run_->dir / "register2.log");

  EXPECT_NE(text("gospel"), v1);  // law leaves memory
  EXPECT_EQ(text("law"), v1);     // read back: still version 1
  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("\ntern_lora_loads_total 2\n"), std::string::npos) << metrics->body;
  serve.Signal(SIGTERM);
  EXPECT_EQ(serve.Wait(), 0) << ReadAll(log);
}

// While serving (--allow-lora-updates): POST /v1/load_lora_adapter reads a registry URI through the same
// loader as --lora (the adapter is the merged model's), and refuses an adapter of other weights with why.
TEST_F(ServeCliTest, LoadsAnAdapterWhileServing) {
  const std::map<std::string, std::string> env = RegistryEnv();
  ASSERT_NO_FATAL_FAILURE(RegisterLaw(env));
  LoraAdapter other = adapter_;
  other.base_fingerprint = "0123456789abcdef";
  const fs::path root = fs::path(run_->dir.path()) / "adapters";  // --lora-root: the route reads only here
  fs::create_directories(root);
  ASSERT_TRUE(WriteLoraAdapter(root / "other.safetensors", other).ok());
  const int port = testing::FreePort();
  const std::string log = run_->dir / "serve.log";
  testing::Child serve(
      {tern_.string(), "serve", base_.string(), "--allow-lora-updates", "--lora-root", root.string(),
       "--port", std::to_string(port), "--threads", "1", "--kv-cache-mb", "16"},
      env, log);
  httplib::Client client("127.0.0.1", port);
  ASSERT_TRUE(Up(serve, client)) << ReadAll(log);
  auto load = client.Post("/v1/load_lora_adapter",
                          R"({"lora_name":"law","lora_path":"models:/law@production"})", "application/json");
  ASSERT_TRUE(load);
  ASSERT_EQ(load->status, 200) << load->body;
  auto r = client.Post(
      "/v1/completions",
      R"({"model":"law","prompt":"And God said","max_tokens":6,"temperature":0,"ignore_eos":true})",
      "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"][0]["text"],
            testing::GreedyText(*run_, testing::MergedLoraParams(*run_, adapter_), "And God said", 6));
  auto wrong =
      client.Post("/v1/load_lora_adapter",
                  json({{"lora_name", "x"}, {"lora_path", (root / "other.safetensors").string()}}).dump(),
                  "application/json");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 400);
  EXPECT_NE(wrong->body.find("trained on other weights"), std::string::npos) << wrong->body;
  // The law adapter's own directory is a good adapter, but outside the root (also by "..").
  for (const std::string& outside : {run_->dir / "law", (root / ".." / "law").string()}) {
    auto refused = client.Post("/v1/load_lora_adapter",
                               json({{"lora_name", "y"}, {"lora_path", outside}}).dump(), "application/json");
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->status, 403) << refused->body;
    EXPECT_NE(refused->body.find("outside --lora-root"), std::string::npos) << refused->body;
  }
  serve.Signal(SIGTERM);
  EXPECT_EQ(serve.Wait(), 0) << ReadAll(log);
  EXPECT_NE(ReadAll(log).find("LoRA adapter law loaded from models:/law@production"), std::string::npos)
      << ReadAll(log);
}

TEST_F(ServeCliTest, RefusesAnAdapterOfOtherWeightsAndATakenName) {
  LoraAdapter other = adapter_;
  other.base_fingerprint = "0123456789abcdef";
  ASSERT_TRUE(WriteLoraAdapter(run_->dir / "other.safetensors", other).ok());
  auto [code, out] = Refused({base_.string(), "--lora", "x=" + (run_->dir / "other.safetensors")});
  EXPECT_EQ(code, 1);
  EXPECT_NE(out.find("was trained on other weights"), std::string::npos) << out;
  EXPECT_NE(out.find("train.init_from"), std::string::npos) << out;

  std::tie(code, out) = Refused({base_.string(), "--lora", "base=" + (run_->dir / "law")});
  EXPECT_EQ(code, 1);
  EXPECT_NE(out.find("the name 'base' is taken"), std::string::npos) << out;
  std::tie(code, out) = Refused({base_.string(), "--lora", run_->dir / "law", "--lora", run_->dir / "law"});
  EXPECT_EQ(code, 1);
  EXPECT_NE(out.find("the name 'law' is taken"), std::string::npos) << out;
  std::tie(code, out) = Refused({base_.string(), "--lora", "x=" + base_.string()});
  EXPECT_EQ(code, 1);
  EXPECT_NE(out.find("not trained with LoRA"), std::string::npos) << out;
}

// Serving on a spot instance (--notice-url): the cloud's notice (GCP's metadata saying TRUE, from a stub
// here) drains the server and stops it with exit 0, as SIGTERM does; until then it serves.
TEST_F(ServeCliTest, ASpotNoticeDrainsAndStopsTheServer) {
  std::atomic<bool> preempted{false};
  httplib::Server stub;
  stub.Get("/computeMetadata/v1/instance/preempted", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(preempted ? "TRUE" : "FALSE", "text/plain");
  });
  const int stub_port = stub.bind_to_any_port("127.0.0.1");
  std::thread stub_thread([&] { stub.listen_after_bind(); });
  const int port = testing::FreePort();
  const std::string log = run_->dir / "serve.log";
  testing::Child serve(
      {tern_.string(), "serve", base_.string(), "--port", std::to_string(port), "--threads", "1",
       "--kv-cache-mb", "16", "--notice-url", "http://127.0.0.1:" + std::to_string(stub_port),
       "--notice-kind", "gcp", "--notice-poll-s", "0.1"},
      {}, log);
  httplib::Client client("127.0.0.1", port);
  ASSERT_TRUE(Up(serve, client)) << ReadAll(log);
  auto r = client.Post("/v1/completions", R"({"prompt":"And God said","max_tokens":4})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(serve.Running()) << "no notice yet: " << ReadAll(log);
  preempted = true;
  for (int i = 0; i < 100 && serve.Running(); i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(serve.Running()) << "the notice must stop the server: " << ReadAll(log);
  EXPECT_EQ(serve.Wait(), 0) << ReadAll(log);
  EXPECT_NE(ReadAll(log).find("gcp preempted: nothing in flight"), std::string::npos) << ReadAll(log);
  stub.stop();
  stub_thread.join();
}

}  // namespace
}  // namespace tern
