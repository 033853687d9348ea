// The fixture of the HTTP end-to-end tests (server_test.cpp, server_fields_test.cpp): one server over a tiny
// random-weights model on loopback, with the real curl binary as the client (without curl the tests skip,
// or fail under CI).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "serve/server.h"
#include "testing/skip.h"
#include "testing/test_run.h"

namespace tern::testing {

using json = nlohmann::json;
inline constexpr char kKey[] = "sk-test-0123456789";

struct HttpResult {
  int status = 0;
  std::string body;
};

// Runs a shell command line and returns its stdout.
inline std::string Shell(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

inline std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

class ServerTest : public ::testing::Test {
 protected:
  static ServerOptions DefaultOptions() {
    ServerOptions so;
    so.port = 0;
    so.api_key = kKey;
    so.model_name = "tiny";
    so.max_body_bytes = 256 * 1024;
    so.http_threads = 48;
    return so;
  }
  static void SetUpTestSuite() { StartServer(DefaultOptions()); }
  // A suite with other server options (API keys, usage files) defines its own SetUpTestSuite calling this.
  // so.adapters names LoRA adapters to serve: random ones (RandomLoraAdapter, seeds 1, 2, ..., rank 4 of
  // every matrix, alpha 8), kept in adapters_; the engine holds the first so.max_loaded_loras (0: all).
  static void StartServer(const ServerOptions& so) {
    if (system("curl --version >/dev/null 2>&1") != 0) return;
    run_ = testing::MakeTestRun().release();
    metrics_ = new ServeMetrics();
    be_ = MakeCpuFastBackend().release();
    InferenceModelOptions mo;
    mo.num_blocks = 160;
    mo.max_rows = 64;
    mo.max_seqs = 32;
    EngineOptions eo;
    eo.max_batch = 32;
    eo.max_batch_tokens = 64;
    eo.max_queue = 64;
    eo.debug_step_delay_s = 0.004;  // streams last long enough for clients to leave mid-way
    auto model = InferenceModel::Create(be_, run_->cfg, run_->params, mo).value();
    adapters_.clear();
    for (size_t i = 0; i < so.adapters.size(); i++) {
      adapters_.push_back(RandomLoraAdapter(*run_, 4, kLoraAllTargets, 8.0f, static_cast<uint32_t>(i + 1)));
      if (so.max_loaded_loras == 0 || static_cast<int>(i) < so.max_loaded_loras) {
        ASSERT_TRUE(model->AddAdapter(adapters_.back()).ok());
      }
    }
    engine_ = new Engine(std::move(model), run_->tok.get(), eo, metrics_);
    server_ = new Server(so, metrics_);
    ASSERT_TRUE(server_->Bind().ok());
    serve_thread_ = new std::thread([] { server_->Serve(); });
    engine_->Start();
    server_->SetEngine(engine_, {"tiny", run_->tok.get(), engine_->max_seq_len()});
  }
  static void TearDownTestSuite() {
    if (!server_) return;
    engine_->Stop();
    server_->Stop();
    serve_thread_->join();
    delete serve_thread_;
    delete server_;
    delete engine_;
    delete be_;
    delete metrics_;
    delete run_;
    server_ = nullptr;
  }
  void SetUp() override {
    if (!server_) {
      TERN_SKIP_OR_FAIL_IN_CI(
          "curl is not installed: the HTTP end-to-end tests need it (scripts/install-deps)");
    }
  }

  static std::string Url(const std::string& path) {
    return "http://127.0.0.1:" + std::to_string(server_->port()) + path;
  }
  // curl with the API key (unless `auth` says otherwise); the status code is appended on the last line.
  static std::string CurlCommand(const std::string& path, const std::string& body,
                                 const std::string& auth = kKey) {
    std::string cmd = "curl -s -N -H 'Expect:' -w '\\n%{http_code}' ";
    if (!auth.empty()) cmd += "-H " + Quote("Authorization: Bearer " + auth) + " ";
    if (!body.empty()) cmd += "-H 'Content-Type: application/json' --data-binary " + Quote(body) + " ";
    return cmd + Quote(Url(path));
  }
  static HttpResult Split(const std::string& out) {
    HttpResult r;
    const size_t nl = out.rfind('\n');
    if (nl == std::string::npos) return r;
    r.status = std::atoi(out.c_str() + nl + 1);
    r.body = out.substr(0, nl);
    return r;
  }
  static HttpResult Curl(const std::string& path, const std::string& body = "",
                         const std::string& auth = kKey) {
    return Split(Shell(CurlCommand(path, body, auth)));
  }
  static json Json(const HttpResult& r) { return json::parse(r.body, nullptr, false); }
  // The data: payloads of an SSE body, in order.
  static std::vector<std::string> Events(const std::string& body) {
    std::vector<std::string> events;
    size_t pos = 0;
    while ((pos = body.find("data: ", pos)) != std::string::npos) {
      const size_t end = body.find("\n\n", pos);
      events.push_back(body.substr(pos + 6, end - pos - 6));
      pos = end;
    }
    return events;
  }
  static std::map<std::string, double> Metrics(const std::string& auth = kKey);

  inline static testing::TestRun* run_ = nullptr;
  inline static ServeMetrics* metrics_ = nullptr;
  inline static Backend* be_ = nullptr;
  inline static Engine* engine_ = nullptr;
  inline static Server* server_ = nullptr;
  inline static std::thread* serve_thread_ = nullptr;
  inline static std::vector<LoraAdapter> adapters_;  // served as ServerOptions::adapters names them
};

// Parses /metrics strictly as Prometheus text: every sample belongs to a declared family, names and labels
// are well formed, values are numbers, histogram buckets are cumulative and end with +Inf = _count.
inline std::map<std::string, double> ServerTest::Metrics(const std::string& auth) {
  HttpResult r = Curl("/metrics", "", auth);
  EXPECT_EQ(r.status, 200);
  std::map<std::string, double> samples;
  std::map<std::string, std::string> types;
  const std::regex type_re(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped))");
  const std::regex sample_re(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_]\w*="[^"\\]*"(,[a-zA-Z_]\w*="[^"\\]*")*)\})? (\S+))");
  std::istringstream in(r.body);
  std::string line, last_bucket_family;
  double last_bucket = -1;
  std::smatch m;
  while (std::getline(in, line)) {
    if (line.empty() || line.rfind("# HELP ", 0) == 0) continue;
    if (std::regex_match(line, m, type_re)) {
      types[m[1]] = m[2];
      continue;
    }
    EXPECT_TRUE(std::regex_match(line, m, sample_re)) << "not a Prometheus sample: " << line;
    if (m.empty()) continue;
    std::string name = m[1], family = name;
    for (const char* suffix : {"_bucket", "_sum", "_count"})
      if (!types.count(family) && family.size() > strlen(suffix) && family.ends_with(suffix))
        family = family.substr(0, family.size() - strlen(suffix));
    EXPECT_TRUE(types.count(family)) << "sample without # TYPE: " << line;
    char* end = nullptr;
    const std::string v = m[5];
    const double value = std::strtod(v.c_str(), &end);
    EXPECT_EQ(*end, '\0') << "bad value in: " << line;
    if (name.ends_with("_bucket")) {
      if (family != last_bucket_family) last_bucket = -1;
      EXPECT_GE(value, last_bucket) << "buckets must be cumulative: " << line;
      last_bucket = value;
      last_bucket_family = family;
      if (line.find("le=\"+Inf\"") != std::string::npos) samples[family + "_bucket_inf"] = value;
    }
    samples[m[2].matched ? name + m[2].str() : name] = value;
  }
  for (const auto& [name, type] : types)
    if (type == "histogram") {
      EXPECT_EQ(samples[name + "_bucket_inf"], samples[name + "_count"]) << name;
    }
  return samples;
}

}  // namespace tern::testing
