#pragma once
// The one member lookup of every reader of outside JSON (imports, the
// document reader, the agent's container files).
#include <rapidjson/document.h>

namespace mlprof {

// The member `name` of `o`, or nullptr when it has none or `o` is not an
// object: rapidjson's FindMember asserts IsObject (undefined behaviour in
// release builds; found by fuzz_import_speedscope).
inline const rapidjson::Value* member(const rapidjson::Value& o, const char* name) {
  if (!o.IsObject()) return nullptr;
  const auto it = o.FindMember(name);
  return it == o.MemberEnd() ? nullptr : &it->value;
}

}  // namespace mlprof
