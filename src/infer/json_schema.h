// response_format json_schema: the supported subset of JSON Schema compiled into a tree of nodes that
// SchemaRecognizer (json_constraint.h) walks (docs/structured-output.md). Compiling needs nlohmann::json
// only, so the HTTP request parser (and its fuzz harness) can check a schema without the engine.
//
// Supported: type object (properties, required, additionalProperties false), string, number, integer,
// boolean, null, array (items, minItems, maxItems), and enum of strings, numbers, booleans and null at any
// level. description, title, $schema, $comment, examples and default are ignored. The root is an object.
// Anything else is refused with the keyword's path.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <variant>
#include <vector>

namespace tern {

struct JsonSchema {
  static constexpr int kMaxDepth = 32;      // nested nodes on a path from the root, leaves included
  static constexpr int kMaxNodes = 4096;    // nodes in the whole schema
  static constexpr int kMaxEnum = 64;       // values of one enum
  static constexpr int kMaxItems = 65535;   // the largest maxItems (and minItems) honoured
  static constexpr int kMaxIntDigits = 18;  // an integer has at most this many digits (fits int64)
  static constexpr int kMaxText = 1024;     // bytes of a property name or enum value, as JSON

  enum Kind : uint8_t { kObject, kArray, kString, kNumber, kInteger, kEnum };
  struct Node {
    Kind kind;
    // kObject: the fixed text around the property values, in the listed order: segments[0] = `{"k0":`,
    // segments[i] = `,"ki":`, segments[n] = `}` (`{}` alone without properties); children[i] the values.
    std::vector<std::string> segments;
    std::vector<int> children;
    int items = -1;  // kArray: the items' node
    int min_items = 0, max_items = kMaxItems;
    std::vector<std::string> values;  // kEnum: each value as compact JSON (nlohmann's dump)
  };
  std::vector<Node> nodes;  // nodes[0] is the root object
};

struct JsonSchemaError {
  std::string path;     // "response_format.json_schema.schema.properties.age.minimum"
  std::string message;  // the whole message, naming the path and what is supported
};

// `path` names `schema` in messages ("response_format.json_schema.schema"). An ordered_json: the object's
// properties are emitted in the order the schema lists them.
std::variant<std::shared_ptr<const JsonSchema>, JsonSchemaError> CompileJsonSchema(
    const nlohmann::ordered_json& schema, const std::string& path);

}  // namespace tern
