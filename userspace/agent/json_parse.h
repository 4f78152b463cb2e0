#pragma once
// JSON the agent reads from outside itself (a target's result.json, a
// container's config.json or state, a server's reply, its spool): parsed
// iteratively, so that nesting costs heap, not stack. RapidJSON's default
// parse recurses once a level: 58 KB of '[' in a target's result.json
// overflowed the agent's stack (fuzz_agent_inject_result).
#include <rapidjson/document.h>

#include <string_view>

namespace mlprof::agent {

// True when `text` parsed (doc then holds it).
inline bool parse_json_iterative(rapidjson::Document& doc, std::string_view text) {
  doc.Parse<rapidjson::kParseIterativeFlag>(text.data(), text.size());
  return !doc.HasParseError();
}

}  // namespace mlprof::agent
