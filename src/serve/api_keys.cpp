#include "serve/api_keys.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace tern {
namespace {

// Names that go into Prometheus labels and JSON as they are: no quoting needed.
bool SafeName(const std::string& s, const char* extra, size_t max_len) {
  if (s.empty() || s.size() > max_len) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && !std::strchr(extra, c)) return false;
  return true;
}

Status KeyError(const std::string& path, const YAML::Node& n, const std::string& what) {
  return Status::InvalidArgument(fmt::format("{}:{}: {} (docs/serving.md, \"Usage and cost per project\")",
                                             path, n.Mark().line + 1, what));
}

Result<double> Limit(const std::string& path, const YAML::Node& entry, const char* field) {
  const YAML::Node v = entry[field];
  if (!v) return 0.0;
  double x = -1;
  try {
    x = v.as<double>();
  } catch (const YAML::Exception&) {
  }
  if (!(x > 0) || !std::isfinite(x))
    return KeyError(path, v, fmt::format("'{}' must be a positive number per minute", field));
  return x;
}

}  // namespace

Result<std::vector<ApiKeyEntry>> ParseApiKeys(std::string_view text, const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(fmt::format("{}:{}: YAML syntax error: {}", path, e.mark.line + 1, e.msg));
  }
  const YAML::Node keys = root.IsMap() ? root["keys"] : YAML::Node();
  if (!keys || !keys.IsSequence() || keys.size() == 0)
    return Status::InvalidArgument(
        fmt::format("{}: expected a list 'keys:' of entries with id, key (or key_env) and project "
                    "(docs/serving.md, \"Usage and cost per project\")",
                    path));
  static const std::set<std::string> kFields = {
      "id", "key", "key_env", "project", "requests_per_min", "tokens_per_min", "admin", "priority"};
  std::vector<ApiKeyEntry> out;
  std::set<std::string> ids;
  for (const YAML::Node& e : keys) {
    if (!e.IsMap()) return KeyError(path, e, "each entry of 'keys' must be a mapping");
    for (const auto& kv : e) {
      // A field name that is itself a list or a mapping (`? {a: b}: c`, `[a]: b`): as<std::string>() throws.
      if (!kv.first.IsScalar())
        return KeyError(path, kv.first, "a field name must be a plain word (id, key, key_env, project, ...)");
      const std::string name = kv.first.as<std::string>();
      if (!kFields.count(name))
        return KeyError(
            path, kv.first,
            fmt::format("unknown field '{}' (allowed: id, key, key_env, project, requests_per_min, "
                        "tokens_per_min, admin, priority)",
                        name));
    }
    ApiKeyEntry k;
    if (!e["id"] || !e["id"].IsScalar()) return KeyError(path, e, "the entry has no 'id'");
    k.id = e["id"].as<std::string>();
    if (!SafeName(k.id, "_.-", 64))
      return KeyError(path, e["id"], fmt::format("id '{}' must be 1-64 of A-Z a-z 0-9 _ . -", k.id));
    if (!ids.insert(k.id).second) return KeyError(path, e["id"], fmt::format("id '{}' is used twice", k.id));
    if (e["key"] && e["key_env"]) return KeyError(path, e, "give 'key' or 'key_env', not both");
    for (const char* field : {"key", "key_env"})
      if (e[field] && !e[field].IsScalar())
        return KeyError(path, e[field],
                        fmt::format("'{}' of '{}' must be text, not a list or a mapping", field, k.id));
    if (e["key"]) {
      k.key = e["key"].as<std::string>();
    } else if (e["key_env"]) {
      const std::string var = e["key_env"].as<std::string>();
      const char* v = std::getenv(var.c_str());
      if (!v || !*v)
        return KeyError(path, e["key_env"], fmt::format("key_env: ${} is not set or empty", var));
      k.key = v;
    } else {
      return KeyError(path, e, fmt::format("key '{}' has no 'key' (or 'key_env')", k.id));
    }
    if (k.key.size() < 8)
      return KeyError(path, e["key"] ? e["key"] : e["key_env"],
                      fmt::format("the key of '{}' is shorter than 8 characters", k.id));
    if (!e["project"] || !e["project"].IsScalar())
      return KeyError(path, e, fmt::format("key '{}' has no 'project'", k.id));
    k.project = e["project"].as<std::string>();
    if (!SafeName(k.project, "_.-:/", 128))
      return KeyError(path, e["project"],
                      fmt::format("project '{}' must be 1-128 of A-Z a-z 0-9 _ . - : /", k.project));
    TERN_ASSIGN_OR_RETURN(k.requests_per_min, Limit(path, e, "requests_per_min"));
    TERN_ASSIGN_OR_RETURN(k.tokens_per_min, Limit(path, e, "tokens_per_min"));
    if (e["admin"]) {
      const YAML::Node& a = e["admin"];
      const std::string v = a.IsScalar() ? a.as<std::string>() : "";
      if (v != "true" && v != "false")
        return KeyError(path, a, fmt::format("admin of '{}' must be true or false", k.id));
      k.admin = v == "true";
    }
    if (e["priority"]) {
      const YAML::Node& p = e["priority"];
      int v = 0;
      if (!p.IsScalar() || !YAML::convert<int>::decode(p, v) || v < -1000 || v > 1000)
        return KeyError(path, p, fmt::format("priority of '{}' must be an integer in [-1000, 1000]", k.id));
      k.priority = v;
    }
    for (const ApiKeyEntry& other : out)
      if (ConstantTimeEquals(other.key, k.key))
        return KeyError(path, e, fmt::format("'{}' has the same key as '{}'", k.id, other.id));
    out.push_back(std::move(k));
  }
  return out;
}

Result<std::vector<ApiKeyEntry>> LoadApiKeys(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(fmt::format("--api-keys {} does not exist or cannot be read", path));
  std::ostringstream text;
  text << in.rdbuf();
  return ParseApiKeys(text.str(), path);
}

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  const size_t n = std::max(a.size(), b.size());
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; i++) {
    const unsigned char x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
    diff = diff | (x ^ y);
  }
  return diff == 0;
}

}  // namespace tern
