#include "serve/adapter_routes.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace tern {
namespace {

using json = nlohmann::json;

// The body's string field `name`, or an error naming it.
std::variant<std::string, ApiError> StringField(const json& body, const char* name) {
  if (!body.contains(name) || !body[name].is_string() || body[name].get<std::string>().empty())
    return BadRequest(name, fmt::format("'{}' must be a non-empty string", name));
  return body[name].get<std::string>();
}

std::variant<json, ApiError> ParseBody(std::string_view text) {
  json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object())
    return BadRequest("", "the request body must be a JSON object");
  return body;
}

}  // namespace

Status CheckLoraPath(const std::string& path, const std::string& root) {
  namespace fs = std::filesystem;
  if (root.empty() || path.rfind("models:/", 0) == 0) return Status::Ok();
  std::error_code ec;
  const fs::path r = fs::weakly_canonical(fs::absolute(root), ec);
  const fs::path p = ec ? fs::path() : fs::weakly_canonical(fs::absolute(path), ec);
  if (!ec && path.find("://") == std::string::npos) {
    auto [end, at] = std::mismatch(r.begin(), r.end(), p.begin(), p.end());
    if (end == r.end()) return Status::Ok();
  }
  return Status::InvalidArgument(fmt::format(
      "'{}' is outside --lora-root {}: put the adapter there, or register it and load models:/NAME@REF", path,
      root));
}

std::variant<std::string, ApiError> LoadAdapterRoute(std::string_view text, const AdapterRouteContext& c) {
  auto body = ParseBody(text);
  if (auto* e = std::get_if<ApiError>(&body)) return *e;
  auto name = StringField(std::get<json>(body), "lora_name");
  if (auto* e = std::get_if<ApiError>(&name)) return *e;
  auto path = StringField(std::get<json>(body), "lora_path");
  if (auto* e = std::get_if<ApiError>(&path)) return *e;
  const std::string& n = std::get<std::string>(name);
  const std::string& p = std::get<std::string>(path);
  if (Status st = CheckAdapterName(n); !st.ok()) return BadRequest("lora_name", st.message());
  if (n == c.model_name)
    return BadRequest("lora_name",
                      fmt::format("'{}' is the served model's own name; give the adapter another", n));
  if (Status st = CheckLoraPath(p, c.lora_root); !st.ok())
    return ApiError{403, st.message(), "invalid_request_error", "lora_path", "permission_denied"};
  std::string source = p;  // a registry alias pinned: a read-back (--max-loaded-loras) gets this version
  if (c.pin) {
    auto pinned = c.pin(p);
    if (!pinned.ok()) return BadRequest("lora_path", pinned.status().message());
    source = *pinned;
  }
  auto adapter = c.loader(source);
  if (!adapter.ok()) return BadRequest("lora_path", adapter.status().message());
  auto id = c.engine->AddAdapter(*adapter);
  if (!id.ok()) return BadRequest("lora_path", id.status().message());
  const int64_t now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  std::optional<ServedAdapters::Entry> replaced;
  if (!c.adapters->Put({n, *id, source, now}, static_cast<size_t>(std::max(c.max_adapters, 0)), &replaced)) {
    (void)c.engine->RemoveAdapter(*id);
    return ApiError{400,
                    fmt::format("this server already serves {} LoRA adapters, its --max-lora-adapters; "
                                "unload one first (POST /v1/unload_lora_adapter)",
                                c.max_adapters),
                    "invalid_request_error", "lora_name", "too_many_adapters"};
  }
  if (replaced && replaced->id != 0) (void)c.engine->RemoveAdapter(replaced->id);  // they finish on it
  if (c.pager) c.pager->MakeRoom(c.engine, n);
  const double bytes =
      static_cast<double>(adapter->params.size() * c.engine->model().adapter_bytes_per_param());
  std::fprintf(stderr, "tern serve: LoRA adapter %s %s from %s%s (%s, %.1f MB) by key %s\n", n.c_str(),
               replaced ? "replaced" : "loaded", p.c_str(), source == p ? "" : (" = " + source).c_str(),
               adapter->spec.ToString().c_str(), bytes / 1048576.0, c.who.c_str());
  return json({{"object", "lora_adapter"},
               {"id", n},
               {"parent", c.model_name},
               {"root", p},
               {"rank", adapter->spec.rank},
               {"alpha", adapter->spec.alpha},
               {"bytes", bytes},
               {"replaced", replaced.has_value()}})
      .dump();
}

std::variant<std::string, ApiError> UnloadAdapterRoute(std::string_view text, const AdapterRouteContext& c) {
  auto body = ParseBody(text);
  if (auto* e = std::get_if<ApiError>(&body)) return *e;
  auto name = StringField(std::get<json>(body), "lora_name");
  if (auto* e = std::get_if<ApiError>(&name)) return *e;
  const std::string& n = std::get<std::string>(name);
  const auto removed = c.adapters->Remove(n);
  if (!removed) {
    std::string served;
    for (const std::string& a : c.adapters->Names()) served += (served.empty() ? "'" : ", '") + a + "'";
    return ApiError{
        404, fmt::format("no LoRA adapter '{}' is served (served: {})", n, served.empty() ? "none" : served),
        "invalid_request_error", "lora_name", "model_not_found"};
  }
  if (removed->id != 0) (void)c.engine->RemoveAdapter(removed->id);  // 0: not in memory
  std::fprintf(stderr, "tern serve: LoRA adapter %s unloaded by key %s\n", n.c_str(), c.who.c_str());
  return json({{"object", "lora_adapter"}, {"id", n}, {"deleted", true}}).dump();
}

}  // namespace tern
