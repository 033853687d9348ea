// The "serving" section of `tern report --ledger --serving FILE`: the usage files of `tern serve
// --usage-file` (serve/usage.h writes them; docs/serving.md, "Usage and cost per project").
#include <fstream>
#include <map>
#include <sstream>

#include "report/finops.h"

namespace tern::report {
namespace {

using nlohmann::json;

std::optional<double> Optional(const json& j, const char* field) {
  return j.contains(field) && j[field].is_number() ? std::optional<double>(j[field].get<double>())
                                                   : std::nullopt;
}
json OrNull(const std::optional<double>& v) {
  return v ? json(*v) : json(nullptr);
}

}  // namespace

Result<ServingUsage> LoadServingUsage(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    return Status::NotFound(
        fmt::format("--serving {}: no such file (tern serve --usage-file FILE writes it)", path));
  std::stringstream text;
  text << in.rdbuf();
  const json j = json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("kind", "") != "tern-serve-usage")
    return Status::InvalidArgument(fmt::format(
        "--serving {}: not a tern serve usage file (JSON with \"kind\": \"tern-serve-usage\")", path));
  ServingUsage u;
  u.file = path;
  try {
    u.model = j.value("model", "");
    u.started_unix = j.at("started_unix").get<double>();
    u.updated_unix = j.at("updated_unix").get<double>();
    u.busy_s = j.at("busy_s").get<double>();
    u.idle_s = j.at("idle_s").get<double>();
    u.requests = j.at("requests").get<double>();
    u.prompt_tokens = j.at("prompt_tokens").get<double>();
    u.generation_tokens = j.at("generation_tokens").get<double>();
    u.price_per_hour = Optional(j, "price_per_hour");
    u.usd = Optional(j, "usd");
    u.usd_per_mtok = Optional(j, "usd_per_million_generated_tokens");
    for (const json& p : j.at("by_project"))
      u.by_project.push_back({p.at("project").get<std::string>(), p.at("requests").get<double>(),
                              p.at("prompt_tokens").get<double>(), p.at("generation_tokens").get<double>(),
                              p.at("rate_limited").get<double>(), Optional(p, "usd")});
    if (j.contains("by_model"))
      for (const json& m : j.at("by_model"))
        u.by_model.push_back({m.at("model").get<std::string>(), m.at("requests").get<double>(),
                              m.at("prompt_tokens").get<double>(), m.at("generation_tokens").get<double>(),
                              Optional(m, "usd")});
  } catch (const json::exception& e) {
    return Status::InvalidArgument(
        fmt::format("--serving {}: a field is missing or of the wrong type ({})", path, e.what()));
  }
  return u;
}

json ServingJson(const std::vector<ServingUsage>& serving) {
  json servers = json::array();
  std::map<std::string, ServingProject> projects;
  std::map<std::string, ServingModel> models;
  double busy = 0, idle = 0, generated = 0, usd = 0;
  bool priced = false;
  for (const ServingUsage& u : serving) {
    json by = json::array();
    for (const ServingProject& p : u.by_project) {
      by.push_back({{"project", p.project},
                    {"requests", p.requests},
                    {"prompt_tokens", p.prompt_tokens},
                    {"generation_tokens", p.generation_tokens},
                    {"rate_limited", p.rate_limited},
                    {"usd", OrNull(p.usd)}});
      ServingProject& sum = projects[p.project];
      sum.project = p.project;
      sum.requests += p.requests;
      sum.prompt_tokens += p.prompt_tokens;
      sum.generation_tokens += p.generation_tokens;
      sum.rate_limited += p.rate_limited;
      if (p.usd) sum.usd = sum.usd.value_or(0) + *p.usd;
    }
    json by_model = json::array();
    for (const ServingModel& m : u.by_model) {
      by_model.push_back({{"model", m.model},
                          {"requests", m.requests},
                          {"prompt_tokens", m.prompt_tokens},
                          {"generation_tokens", m.generation_tokens},
                          {"usd", OrNull(m.usd)}});
      ServingModel& sum = models[m.model];
      sum.model = m.model;
      sum.requests += m.requests;
      sum.prompt_tokens += m.prompt_tokens;
      sum.generation_tokens += m.generation_tokens;
      if (m.usd) sum.usd = sum.usd.value_or(0) + *m.usd;
    }
    const double reserved = u.busy_s + u.idle_s;
    servers.push_back({{"file", u.file},
                       {"model", u.model},
                       {"started_unix", u.started_unix},
                       {"updated_unix", u.updated_unix},
                       {"busy_s", u.busy_s},
                       {"idle_s", u.idle_s},
                       {"utilisation", reserved > 0 ? json(u.busy_s / reserved) : json(nullptr)},
                       {"requests", u.requests},
                       {"generation_tokens", u.generation_tokens},
                       {"price_per_hour", OrNull(u.price_per_hour)},
                       {"usd", OrNull(u.usd)},
                       {"usd_per_mtok", OrNull(u.usd_per_mtok)},
                       {"by_project", by},
                       {"by_model", by_model}});
    busy += u.busy_s;
    idle += u.idle_s;
    generated += u.generation_tokens;
    if (u.usd) {
      priced = true;
      usd += *u.usd;
    }
  }
  json by_project = json::array();
  for (const auto& [name, p] : projects)
    by_project.push_back({{"project", name},
                          {"requests", p.requests},
                          {"prompt_tokens", p.prompt_tokens},
                          {"generation_tokens", p.generation_tokens},
                          {"rate_limited", p.rate_limited},
                          {"usd", OrNull(p.usd)}});
  json by_model = json::array();
  for (const auto& [name, m] : models)
    by_model.push_back({{"model", name},
                        {"requests", m.requests},
                        {"prompt_tokens", m.prompt_tokens},
                        {"generation_tokens", m.generation_tokens},
                        {"usd", OrNull(m.usd)}});
  return {{"servers", servers},
          {"by_project", by_project},
          {"by_model", by_model},
          {"totals",
           {{"busy_s", busy},
            {"idle_s", idle},
            {"utilisation", busy + idle > 0 ? json(busy / (busy + idle)) : json(nullptr)},
            {"generation_tokens", generated},
            {"usd", priced ? json(usd) : json(nullptr)},
            {"usd_per_mtok", priced && generated > 0 ? json(usd / generated * 1e6) : json(nullptr)}}}};
}

}  // namespace tern::report
