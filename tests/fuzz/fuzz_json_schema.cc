// libFuzzer target: the JSON Schema compiler (src/server/json_schema_*.cc). The input is a schema (JSON text); it
// must compile or be refused with an error, never crash or hang; a compiled one is walked with masks checked
// against the reference (grammar_walk.h).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "base/json_depth.h"
#include "grammar_walk.h"
#include "server/json_schema_grammar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (!glint::JsonDepthWithin(text, 64)) return 0;  // the server refuses deeper bodies before parsing
  const glint::server::Json schema = glint::server::Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded() || !(schema.is_object() || schema.is_boolean())) return 0;
  glint::grammar::Grammar g;
  glint::server::JsonSchemaCompiler compiler(g);
  auto rule = compiler.AddSchema(schema);
  if (!rule.ok()) return 0;
  g.set_root(rule.value());
  auto compiled = glint::grammar::CompiledGrammar::Compile(g);
  if (!compiled.ok()) return 0;
  glint::fuzz::WalkAndCheck(compiled.value(), static_cast<uint32_t>(size), 12);
  return 0;
}
