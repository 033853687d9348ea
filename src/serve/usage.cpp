#include "serve/usage.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "serve/server.h"

namespace tern {
namespace {

using json = nlohmann::json;

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

UsageTracker::UsageTracker(UsageOptions options) : opt_(std::move(options)) {
  if (!opt_.clock) opt_.clock = SteadySeconds;
  start_ = opt_.clock();
  start_unix_ = UnixSeconds();
  usage_.resize(opt_.keys.size() + 1);
  for (size_t i = 0; i < opt_.keys.size(); i++) {
    usage_[i].rpm = {opt_.keys[i].requests_per_min, start_};  // buckets start full
    usage_[i].tpm = {opt_.keys[i].tokens_per_min, start_};
  }
  if (!opt_.usage_log.empty()) {
    log_ = std::fopen(opt_.usage_log.c_str(), "a");
    if (!log_) std::fprintf(stderr, "tern serve: cannot open --usage-log %s\n", opt_.usage_log.c_str());
  }
  if (!opt_.usage_file.empty())
    writer_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!stop_cv_.wait_for(lock, std::chrono::duration<double>(opt_.usage_file_period_s),
                                [this] { return stop_; })) {
        lock.unlock();
        if (Status st = WriteUsageFile(); !st.ok())
          std::fprintf(stderr, "tern serve: %s\n", st.message().c_str());
        lock.lock();
      }
    });
}

UsageTracker::~UsageTracker() {
  if (writer_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    stop_cv_.notify_all();
    writer_.join();
    if (Status st = WriteUsageFile(); !st.ok())
      std::fprintf(stderr, "tern serve: %s\n", st.message().c_str());
  }
  if (log_) std::fclose(log_);
}

int UsageTracker::Authenticate(const std::string& given) const {
  int found = -1;
  for (size_t i = 0; i < opt_.keys.size(); i++)  // no early exit: the time does not say which key matched
    found = ConstantTimeEquals(given, opt_.keys[i].key) ? static_cast<int>(i) : found;
  return found;
}

bool UsageTracker::IsAdmin(int key) const {
  if (opt_.keys.empty()) return true;
  return key >= 0 && key < static_cast<int>(opt_.keys.size()) && opt_.keys[key].admin;
}

int UsageTracker::Priority(int key, int requested) const {
  if (key < 0 || key >= static_cast<int>(opt_.keys.size())) return requested;
  return std::max(requested, opt_.keys[key].priority);
}

const std::string& UsageTracker::KeyId(int key) const {
  static const std::string kNone = "none";
  return key >= 0 && key < static_cast<int>(opt_.keys.size()) ? opt_.keys[key].id : kNone;
}
const std::string& UsageTracker::Project(int key) const {
  static const std::string kDefault = "default";
  return key >= 0 && key < static_cast<int>(opt_.keys.size()) ? opt_.keys[key].project : kDefault;
}
UsageTracker::KeyUsage& UsageTracker::Slot(int key) {
  return key >= 0 && key < static_cast<int>(opt_.keys.size()) ? usage_[key] : usage_.back();
}

void UsageTracker::Refill(Bucket* b, double per_min, double now) const {
  b->level = std::min(per_min, b->level + (now - b->last) * per_min / 60);
  b->last = now;
}

std::optional<UsageTracker::Refusal> UsageTracker::Admit(int key) {
  if (key < 0 || key >= static_cast<int>(opt_.keys.size())) return std::nullopt;
  const ApiKeyEntry& k = opt_.keys[key];
  std::lock_guard<std::mutex> lock(mu_);
  KeyUsage& u = usage_[key];
  const double now = opt_.clock();
  auto refuse = [&](const char* limit, double per_min, double missing) {
    Refusal r;
    r.limit = limit;
    r.retry_after_s = std::max(1, static_cast<int>(std::ceil(missing / (per_min / 60))));
    r.message = fmt::format(
        "Rate limit reached for key '{}' (project '{}') on {} per minute: limit {}. Please try again in {} "
        "s.",
        k.id, k.project, limit, per_min, r.retry_after_s);
    (limit[0] == 'r' ? u.limited_requests : u.limited_tokens)++;
    return r;
  };
  if (k.requests_per_min > 0) {
    Refill(&u.rpm, k.requests_per_min, now);
    if (u.rpm.level < 1) return refuse("requests", k.requests_per_min, 1 - u.rpm.level);
  }
  if (k.tokens_per_min > 0) {  // a request that overdrew the bucket makes the next ones wait
    Refill(&u.tpm, k.tokens_per_min, now);
    if (u.tpm.level <= 0) return refuse("tokens", k.tokens_per_min, 1 - u.tpm.level);
  }
  if (k.requests_per_min > 0) u.rpm.level -= 1;
  return std::nullopt;
}

void UsageTracker::Begin() {
  std::lock_guard<std::mutex> lock(mu_);
  if (in_flight_++ == 0) busy_since_ = opt_.clock();
}

void UsageTracker::End() {
  std::lock_guard<std::mutex> lock(mu_);
  if (in_flight_ > 0 && --in_flight_ == 0) busy_acc_ += opt_.clock() - busy_since_;
}

void UsageTracker::Record(const UsageRecord& r) {
  std::lock_guard<std::mutex> lock(mu_);
  KeyUsage& u = Slot(r.key);
  u.requests++;
  u.prompt_tokens += r.prompt_tokens;
  u.generation_tokens += r.generation_tokens;
  ModelUsage& m = by_model_[r.model.empty() ? opt_.model : r.model];
  m.requests++;
  m.prompt_tokens += r.prompt_tokens;
  m.generation_tokens += r.generation_tokens;
  if (r.key >= 0 && r.key < static_cast<int>(opt_.keys.size()) && opt_.keys[r.key].tokens_per_min > 0) {
    Refill(&u.tpm, opt_.keys[r.key].tokens_per_min, opt_.clock());
    u.tpm.level -= static_cast<double>(r.prompt_tokens + r.generation_tokens);
  }
  if (!log_) return;
  const json line = {{"time_unix", r.unix_s},
                     {"project", Project(r.key)},
                     {"key_id", KeyId(r.key)},
                     {"route", r.route},
                     {"model", r.model.empty() ? opt_.model : r.model},
                     {"status", r.status},
                     {"prompt_tokens", r.prompt_tokens},
                     {"generation_tokens", r.generation_tokens},
                     {"latency_s", r.latency_s}};
  std::fprintf(log_, "%s\n", line.dump().c_str());
  std::fflush(log_);
}

double UsageTracker::busy_s() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_acc_ + (in_flight_ > 0 ? opt_.clock() - busy_since_ : 0);
}

double UsageTracker::idle_s() const {
  const double busy = busy_s();
  return std::max(0.0, opt_.clock() - start_ - busy);
}

std::string UsageTracker::RenderMetrics() const {
  const double busy = busy_s(), idle = idle_s();
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  std::lock_guard<std::mutex> lock(mu_);
  auto per_key = [&](const char* name, const char* help, auto field) {
    family(name, "counter", help);
    for (size_t i = 0; i < usage_.size(); i++) {
      if (i + 1 == usage_.size() && !opt_.keys.empty()) break;  // "none" only without keys
      const int k = static_cast<int>(i);
      out += fmt::format("{}{{project=\"{}\",key_id=\"{}\"}} {}\n", name, Project(k), KeyId(k),
                         field(usage_[i]));
    }
  };
  per_key("tern_usage_requests_total", "Generation requests answered (any status), by project and key id.",
          [](const KeyUsage& u) { return u.requests; });
  per_key("tern_usage_prompt_tokens_total", "Prompt tokens of answered requests, by project and key id.",
          [](const KeyUsage& u) { return u.prompt_tokens; });
  per_key("tern_usage_generation_tokens_total", "Tokens generated, by project and key id.",
          [](const KeyUsage& u) { return u.generation_tokens; });
  // Per served model: the base model and each LoRA adapter (`tern serve --lora`), whose fine-tune's
  // owner the tokens can be billed to.
  family("tern_usage_model_requests_total", "counter",
         "Generation requests answered (any status), by the model or LoRA adapter they named.");
  // A label value as Prometheus text escapes it: the model's name (--model-name, a directory's) is free text.
  auto label = [](const std::string& v) {
    std::string e;
    for (char c : v) e += c == '\\' ? "\\\\" : c == '"' ? "\\\"" : c == '\n' ? "\\n" : std::string(1, c);
    return e;
  };
  for (const auto& [name, m] : by_model_)
    out += fmt::format("tern_usage_model_requests_total{{model=\"{}\"}} {}\n", label(name), m.requests);
  family("tern_usage_model_generation_tokens_total", "counter",
         "Tokens generated, by the model or LoRA adapter the requests named.");
  for (const auto& [name, m] : by_model_)
    out += fmt::format("tern_usage_model_generation_tokens_total{{model=\"{}\"}} {}\n", label(name),
                       m.generation_tokens);
  family("tern_usage_rate_limited_total", "counter",
         "Requests refused with 429 by a key's per-minute limit, by project, key id and limit.");
  for (size_t i = 0; i < opt_.keys.size(); i++)
    for (const char* limit : {"requests", "tokens"})
      out += fmt::format("tern_usage_rate_limited_total{{project=\"{}\",key_id=\"{}\",limit=\"{}\"}} {}\n",
                         opt_.keys[i].project, opt_.keys[i].id, limit,
                         limit[0] == 'r' ? usage_[i].limited_requests : usage_[i].limited_tokens);
  family("tern_busy_seconds_total", "counter", "Seconds with at least one generation request in flight.");
  out += fmt::format("tern_busy_seconds_total {}\n", busy);
  family("tern_idle_seconds_total", "counter", "Seconds since start with no generation request in flight.");
  out += fmt::format("tern_idle_seconds_total {}\n", idle);
  // The standard name of Prometheus's client libraries: a change between two scrapes is a restart
  // (`tern diagnose --serve --since` then diagnoses the life since it).
  family("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.");
  out += fmt::format("process_start_time_seconds {:.3f}\n", start_unix_);
  if (opt_.price_per_hour > 0) {
    uint64_t generated = 0;
    for (const KeyUsage& u : usage_) generated += u.generation_tokens;
    family("tern_price_per_hour_usd", "gauge", "The instance price given with --price-per-hour.");
    out += fmt::format("tern_price_per_hour_usd {}\n", opt_.price_per_hour);
    family("tern_cost_usd_total", "counter", "The reserved time (busy + idle) at --price-per-hour.");
    out += fmt::format("tern_cost_usd_total {}\n", opt_.price_per_hour * (busy + idle) / 3600);
    if (generated > 0) {
      family("tern_usd_per_million_generated_tokens", "gauge",
             "Cost of the whole reserved time per 1M generated tokens, at the measured utilisation.");
      out += fmt::format("tern_usd_per_million_generated_tokens {}\n",
                         opt_.price_per_hour * (busy + idle) / 3600 / static_cast<double>(generated) * 1e6);
    }
  }
  return out;
}

json UsageTracker::UsageJson() const {
  const double busy = busy_s(), idle = idle_s(), reserved = busy + idle;
  const double usd = opt_.price_per_hour * reserved / 3600;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t generated = 0, prompt = 0, requests = 0;
  for (const KeyUsage& u : usage_) {
    generated += u.generation_tokens;
    prompt += u.prompt_tokens;
    requests += u.requests;
  }
  const auto share = [&](uint64_t tokens) {  // a project's part of the cost: its part of the tokens generated
    return opt_.price_per_hour > 0 && generated > 0 ? json(usd * static_cast<double>(tokens) / generated)
                                                    : json(nullptr);
  };
  json keys = json::array();
  std::map<std::string, std::array<uint64_t, 4>> projects;  // requests, prompt, generated, 429s
  for (size_t i = 0; i < usage_.size(); i++) {
    const KeyUsage& u = usage_[i];
    if (i + 1 == usage_.size() && !opt_.keys.empty() && u.requests == 0) break;
    const int k = static_cast<int>(i);
    const uint64_t limited = u.limited_requests + u.limited_tokens;
    keys.push_back({{"key_id", KeyId(k)},
                    {"project", Project(k)},
                    {"requests", u.requests},
                    {"prompt_tokens", u.prompt_tokens},
                    {"generation_tokens", u.generation_tokens},
                    {"rate_limited", limited},
                    {"usd", share(u.generation_tokens)}});
    auto& p = projects[Project(k)];
    p[0] += u.requests;
    p[1] += u.prompt_tokens;
    p[2] += u.generation_tokens;
    p[3] += limited;
  }
  json by_project = json::array();
  for (const auto& [name, p] : projects)
    by_project.push_back({{"project", name},
                          {"requests", p[0]},
                          {"prompt_tokens", p[1]},
                          {"generation_tokens", p[2]},
                          {"rate_limited", p[3]},
                          {"usd", share(p[2])}});
  json by_model = json::array();
  for (const auto& [name, m] : by_model_)
    by_model.push_back({{"model", name},
                        {"requests", m.requests},
                        {"prompt_tokens", m.prompt_tokens},
                        {"generation_tokens", m.generation_tokens},
                        {"usd", share(m.generation_tokens)}});
  const bool priced = opt_.price_per_hour > 0;
  return {{"kind", "tern-serve-usage"},
          {"version", 1},
          {"model", opt_.model},
          {"started_unix", start_unix_},
          {"updated_unix", start_unix_ + reserved},
          {"price_per_hour", priced ? json(opt_.price_per_hour) : json(nullptr)},
          {"busy_s", busy},
          {"idle_s", idle},
          {"reserved_s", reserved},
          {"utilisation", reserved > 0 ? json(busy / reserved) : json(nullptr)},
          {"usd", priced ? json(usd) : json(nullptr)},
          {"requests", requests},
          {"prompt_tokens", prompt},
          {"generation_tokens", generated},
          {"usd_per_million_generated_tokens",
           priced && generated > 0 ? json(usd / static_cast<double>(generated) * 1e6) : json(nullptr)},
          {"keys", keys},
          {"by_project", by_project},
          {"by_model", by_model}};
}

Status UsageTracker::WriteUsageFile() const {
  if (opt_.usage_file.empty()) return Status::Ok();
  const std::string tmp = opt_.usage_file + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << UsageJson().dump(2) << "\n";
    out.flush();
    if (!out) return Status::Unavailable(fmt::format("cannot write the usage file {} (disk full?)", tmp));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, opt_.usage_file, ec);
  if (ec)
    return Status::Unavailable(
        fmt::format("cannot rename {} to --usage-file {}: {}", tmp, opt_.usage_file, ec.message()));
  return Status::Ok();
}

}  // namespace tern
