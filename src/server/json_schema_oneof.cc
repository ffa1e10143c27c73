#include "server/json_schema_oneof.h"

#include <map>
#include <optional>
#include <set>
#include <vector>

namespace glint::server {
namespace {

using Json = nlohmann::ordered_json;

constexpr int kMaxDepth = 16;
const std::set<std::string> kAllTypes = {"null", "boolean", "string", "number", "object", "array"};

// What a branch can match, over-approximated: the types it allows (integer folded into number), its values when
// it is a const/enum, and the const/enum values of its required properties.
struct Shape {
  std::set<std::string> types;
  std::optional<std::vector<Json>> values;
  std::map<std::string, std::vector<Json>> discriminators;
};

std::string SchemaTypeName(const Json& value) {
  if (value.is_null()) return "null";
  if (value.is_boolean()) return "boolean";
  if (value.is_string()) return "string";
  if (value.is_number()) return "number";
  if (value.is_object()) return "object";
  return "array";
}

// The schema a `$ref` chain ends at (null when it cannot be followed: the compiler reports that itself).
const Json* Resolve(const Json& schema, const Json& root) {
  const Json* at = &schema;
  for (int hops = 0; hops < kMaxDepth && at->is_object() && at->contains("$ref"); ++hops) {
    const Json& ref = (*at)["$ref"];
    if (!ref.is_string() || ref.get<std::string>().empty() || ref.get<std::string>()[0] != '#') return nullptr;
    try {
      const Json::json_pointer pointer(ref.get<std::string>().substr(1));
      if (!root.contains(pointer)) return nullptr;
      at = &root.at(pointer);
    } catch (const std::exception&) {
      return nullptr;
    }
  }
  return at;
}

std::optional<std::vector<Json>> ValuesOf(const Json& schema) {
  if (!schema.is_object()) return std::nullopt;
  if (schema.contains("const")) return std::vector<Json>{schema["const"]};
  if (schema.contains("enum") && schema["enum"].is_array()) {
    return std::vector<Json>(schema["enum"].begin(), schema["enum"].end());
  }
  return std::nullopt;
}

Shape ShapeOf(const Json& branch, const Json& root, int depth) {
  Shape shape;
  const Json* schema = Resolve(branch, root);
  if (schema == nullptr || !schema->is_object() || depth > kMaxDepth) {
    shape.types = kAllTypes;
    return shape;
  }
  if ((shape.values = ValuesOf(*schema))) {
    for (const Json& value : *shape.values) shape.types.insert(SchemaTypeName(value));
    return shape;
  }
  if (schema->contains("type")) {
    const Json& type = (*schema)["type"];
    for (const Json& t : type.is_array() ? type : Json::array({type})) {
      if (!t.is_string()) continue;
      shape.types.insert(t == "integer" ? std::string("number") : t.get<std::string>());
    }
  } else if (schema->contains("properties") || schema->contains("required")) {
    shape.types = {"object"};
  } else if (schema->contains("items")) {
    shape.types = {"array"};
  } else if (schema->contains("anyOf") || schema->contains("oneOf") || schema->contains("allOf")) {
    for (const char* keyword : {"anyOf", "oneOf", "allOf"}) {
      if (!schema->contains(keyword) || !(*schema)[keyword].is_array()) continue;
      for (const Json& inner : (*schema)[keyword]) {
        const Shape sub = ShapeOf(inner, root, depth + 1);
        shape.types.insert(sub.types.begin(), sub.types.end());
      }
    }
  } else {
    shape.types = kAllTypes;
  }
  if (shape.types.count("object") != 0 && schema->contains("required") && schema->contains("properties") &&
      (*schema)["required"].is_array() && (*schema)["properties"].is_object()) {
    for (const Json& name : (*schema)["required"]) {
      if (!name.is_string() || !(*schema)["properties"].contains(name.get<std::string>())) continue;
      const Json* property = Resolve((*schema)["properties"][name.get<std::string>()], root);
      if (property == nullptr) continue;
      if (auto values = ValuesOf(*property)) shape.discriminators[name.get<std::string>()] = std::move(*values);
    }
  }
  return shape;
}

bool NoCommonValue(const std::vector<Json>& a, const std::vector<Json>& b) {
  for (const Json& x : a) {
    for (const Json& y : b) {
      if (x == y) return false;  // nlohmann compares 1 and 1.0 as equal, as JSON Schema does
    }
  }
  return true;
}

bool Disjoint(const Shape& a, const Shape& b) {
  std::set<std::string> common;
  for (const std::string& type : a.types) {
    if (b.types.count(type) != 0) common.insert(type);
  }
  if (common.empty()) return true;
  if (a.values && b.values) return NoCommonValue(*a.values, *b.values);
  // Where they overlap only on objects, a required property with disjoint const/enum values separates them.
  if (common == std::set<std::string>{"object"}) {
    for (const auto& [name, values] : a.discriminators) {
      const auto other = b.discriminators.find(name);
      if (other != b.discriminators.end() && NoCommonValue(values, other->second)) return true;
    }
  }
  return false;
}

}  // namespace

Status CheckOneOfDisjoint(const Json& branches, const Json& root, const std::string& path) {
  std::vector<Shape> shapes;
  for (const Json& branch : branches) shapes.push_back(ShapeOf(branch, root, 0));
  for (size_t i = 0; i < shapes.size(); ++i) {
    for (size_t j = i + 1; j < shapes.size(); ++j) {
      if (Disjoint(shapes[i], shapes[j])) continue;
      return InvalidArgument("'oneOf' at ", path, ": branches ", i, " and ", j,
                             " may both match a value, and glint cannot enforce that exactly one does; make them "
                             "disjoint (different types, different const/enum values, or a required property with "
                             "different const values) or use 'anyOf'");
    }
  }
  return Status::Ok();
}

}  // namespace glint::server
