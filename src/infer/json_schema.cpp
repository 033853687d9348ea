#include "infer/json_schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

namespace tern {
namespace {

using json = nlohmann::ordered_json;  // the properties' listed order

constexpr const char* kSupported =
    "supported: type (object, array, string, number, integer, boolean, null), properties, required, "
    "additionalProperties (false only), items, minItems, maxItems, enum (strings, numbers, booleans, null); "
    "ignored: description, title, $schema, $comment, examples, default";

std::string Dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

class Compiler {
 public:
  explicit Compiler(JsonSchema* out) : out_(out) {}
  std::optional<JsonSchemaError> error;

  // Appends the node for `s` (at `path`, `depth` nodes deep) and returns its index; -1 after an error.
  int Compile(const json& s, const std::string& path, int depth) {
    if (!s.is_object()) return Fail(path, fmt::format("{} must be a schema object, not {}", path, Dump(s)));
    if (depth > JsonSchema::kMaxDepth)
      return Fail(path, fmt::format("{} nests deeper than {} levels; flatten the schema", path,
                                    JsonSchema::kMaxDepth));
    if (static_cast<int>(out_->nodes.size()) >= JsonSchema::kMaxNodes)
      return Fail(path, fmt::format("the schema has more than {} nodes", JsonSchema::kMaxNodes));
    static const std::set<std::string> kIgnored = {"description", "title",    "$schema",
                                                   "$comment",    "examples", "default"};
    static const std::set<std::string> kKnown = {"type",  "properties", "required", "additionalProperties",
                                                 "items", "minItems",   "maxItems", "enum"};
    for (const auto& [k, v] : s.items())
      if (!kIgnored.count(k) && !kKnown.count(k))
        return Fail(path + "." + k, fmt::format("{}.{} is not supported ({})", path, k, kSupported));
    std::string type;
    if (s.contains("type")) {
      if (!s["type"].is_string())
        return Fail(path + ".type",
                    fmt::format("{}.type must be one type name such as \"string\" (type lists "
                                "are not supported; {})",
                                path, kSupported));
      type = s["type"].get<std::string>();
    }
    if (depth == 1 && type != "object")
      return Fail(path + ".type",
                  fmt::format("{}.type must be \"object\": the root of the schema is an object", path));
    auto only = [&](std::initializer_list<const char*> allowed) -> bool {
      for (const char* k :
           {"properties", "required", "additionalProperties", "items", "minItems", "maxItems"}) {
        bool ok = false;
        for (const char* a : allowed) ok |= std::string(a) == k;
        if (!ok && s.contains(k)) {
          Fail(path + "." + k, fmt::format("{}.{} does not apply to type '{}' ({})", path, k,
                                           type.empty() ? "enum" : type, kSupported));
          return false;
        }
      }
      return true;
    };
    if (s.contains("enum")) {
      if (!only({})) return -1;
      return Enum(s["enum"], path + ".enum", type);
    }
    const int self = static_cast<int>(out_->nodes.size());
    out_->nodes.emplace_back();
    auto node = [&]() -> JsonSchema::Node& { return out_->nodes[self]; };
    if (type == "object") {
      if (!only({"properties", "required", "additionalProperties"})) return -1;
      if (s.contains("additionalProperties") && s["additionalProperties"] != false)
        return Fail(path + ".additionalProperties",
                    fmt::format("{}.additionalProperties must be false: the object holds exactly its listed "
                                "properties",
                                path));
      node().kind = JsonSchema::kObject;
      std::vector<std::string> names;
      if (s.contains("properties")) {
        const json& props = s["properties"];
        if (!props.is_object())
          return Fail(path + ".properties", fmt::format("{}.properties must be an object", path));
        std::string seg = "{";
        for (const auto& [k, v] : props.items()) {
          const std::string key = Dump(json(k));
          if (static_cast<int>(key.size()) > JsonSchema::kMaxText)
            return Fail(path + ".properties", fmt::format("{}.properties: a name is longer than {} bytes",
                                                          path, JsonSchema::kMaxText));
          node().segments.push_back(seg + key + ":");
          seg = ",";
          names.push_back(k);
          const int child = Compile(v, path + ".properties." + k, depth + 1);
          if (child < 0) return -1;
          node().children.push_back(child);
        }
        node().segments.push_back(names.empty() ? "{}" : "}");
      } else {
        node().segments.push_back("{}");
      }
      if (s.contains("required")) {
        const json& req = s["required"];
        if (!req.is_array())
          return Fail(path + ".required", fmt::format("{}.required must be an array", path));
        for (const json& r : req)
          if (!r.is_string() || std::find(names.begin(), names.end(), r.get<std::string>()) == names.end())
            return Fail(path + ".required", fmt::format("{}.required names {}, which is not in {}.properties",
                                                        path, Dump(r), path));
      }
      return self;
    }
    if (type == "array") {
      if (!only({"items", "minItems", "maxItems"})) return -1;
      if (!s.contains("items"))
        return Fail(path + ".items",
                    fmt::format("{}.items is required for an array (the items' schema)", path));
      node().kind = JsonSchema::kArray;
      for (const char* k : {"minItems", "maxItems"}) {
        if (!s.contains(k)) continue;
        const json& v = s[k];
        if (!v.is_number_unsigned() || v.get<uint64_t>() > JsonSchema::kMaxItems)
          return Fail(path + "." + k,
                      fmt::format("{}.{} must be an integer 0..{}", path, k, JsonSchema::kMaxItems));
        (std::string(k) == "minItems" ? node().min_items : node().max_items) = v.get<int>();
      }
      if (node().min_items > node().max_items)
        return Fail(path + ".minItems", fmt::format("{}.minItems is above maxItems", path));
      const int items = Compile(s["items"], path + ".items", depth + 1);
      if (items < 0) return -1;
      node().items = items;
      return self;
    }
    if (!only({})) return -1;
    if (type == "string") {
      node().kind = JsonSchema::kString;
    } else if (type == "number") {
      node().kind = JsonSchema::kNumber;
    } else if (type == "integer") {
      node().kind = JsonSchema::kInteger;
    } else if (type == "boolean" || type == "null") {
      node().kind = JsonSchema::kEnum;
      node().values =
          type == "null" ? std::vector<std::string>{"null"} : std::vector<std::string>{"true", "false"};
    } else if (type.empty()) {
      return Fail(path, fmt::format("{} needs a 'type' or an 'enum' ({})", path, kSupported));
    } else {
      return Fail(path + ".type", fmt::format("{}.type '{}' is not supported ({})", path, type, kSupported));
    }
    return self;
  }

 private:
  int Fail(const std::string& path, std::string message) {
    error = JsonSchemaError{path, std::move(message)};
    return -1;
  }

  int Enum(const json& e, const std::string& path, const std::string& type) {
    if (!e.is_array() || e.empty() || e.size() > JsonSchema::kMaxEnum)
      return Fail(path, fmt::format("{} must be an array of 1 to {} values", path, JsonSchema::kMaxEnum));
    JsonSchema::Node n;
    n.kind = JsonSchema::kEnum;
    for (const json& v : e) {
      const bool fits = type.empty() || (type == "string" && v.is_string()) ||
                        (type == "number" && v.is_number()) || (type == "integer" && v.is_number_integer()) ||
                        (type == "boolean" && v.is_boolean()) || (type == "null" && v.is_null());
      if (!(v.is_string() || v.is_number() || v.is_boolean() || v.is_null()) || !fits)
        return Fail(path, fmt::format("{} holds {}: the values must be strings, numbers, booleans or null{}",
                                      path, Dump(v), type.empty() ? "" : " of the schema's type " + type));
      std::string text = Dump(v);
      if (static_cast<int>(text.size()) > JsonSchema::kMaxText)
        return Fail(path, fmt::format("{}: a value is longer than {} bytes", path, JsonSchema::kMaxText));
      if (std::find(n.values.begin(), n.values.end(), text) == n.values.end()) n.values.push_back(text);
    }
    out_->nodes.push_back(std::move(n));
    return static_cast<int>(out_->nodes.size()) - 1;
  }

  JsonSchema* out_;
};

}  // namespace

std::variant<std::shared_ptr<const JsonSchema>, JsonSchemaError> CompileJsonSchema(const json& schema,
                                                                                   const std::string& path) {
  auto out = std::make_shared<JsonSchema>();
  Compiler c(out.get());
  c.Compile(schema, path, 1);
  if (c.error) return *c.error;
  return std::shared_ptr<const JsonSchema>(std::move(out));
}

}  // namespace tern
