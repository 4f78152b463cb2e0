#include "model/functions.h"

#include <functional>
#include <utility>

namespace mlprof {

namespace {

bool contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

// `file` starts with `prefix` at a path boundary: "/usr/lib/python3.1" must not
// claim "/usr/lib/python3.12/...".
bool under_prefix(std::string_view file, std::string_view prefix) {
  if (prefix.empty() || !file.starts_with(prefix)) return false;
  if (file.size() == prefix.size()) return true;
  const char last = prefix.back();
  const char next = file[prefix.size()];
  return last == '/' || last == '\\' || next == '/' || next == '\\';
}

}  // namespace

bool classify_user_code(std::string_view file, const PathRules& rules,
                        std::string_view module_file) {
  // cloudpickle names every code it pickled by value "<dynamic-code>": a
  // model class defined in a notebook or script and logged with MLflow, and
  // the closures a library put on it (MLflow's tracing wrappers), whose
  // module is still the library's.
  if (file == kDynamicCode) return module_file.empty() || classify_user_code(module_file, rules);
  if (file.empty() || file.front() == '<') return false;  // "<frozen ...>", "<string>"
  if (contains(file, "/site-packages/") || contains(file, "/dist-packages/") ||
      contains(file, "\\site-packages\\") || contains(file, "\\dist-packages\\")) {
    return false;
  }
  for (const std::string& prefix : rules.library_prefixes) {
    if (under_prefix(file, prefix)) return false;
  }
  return true;
}

bool module_in(std::string_view module, std::string_view prefix) {
  if (prefix.empty() || !module.starts_with(prefix)) return false;
  return module.size() == prefix.size() || module[prefix.size()] == '.';
}

size_t FunctionTable::KeyHash::operator()(const Key& k) const {
  // Ids are dense and small; mixing them with distinct odd multipliers is enough.
  uint64_t h = k.name;
  h = h * 0x9E3779B97F4A7C15ull + k.module;
  h = h * 0x9E3779B97F4A7C15ull + k.file;
  h = h * 0x9E3779B97F4A7C15ull + static_cast<uint32_t>(k.line);
  h = h * 0x9E3779B97F4A7C15ull + static_cast<uint8_t>(k.kind);
  return std::hash<uint64_t>{}(h ^ (h >> 29));
}

FunctionTable::FunctionTable(std::shared_ptr<const FunctionTable> base)
    : base_(std::move(base)),
      base_size_(base_ ? static_cast<uint32_t>(base_->size()) : 0),
      strings_(base_ ? std::shared_ptr<const StringTable>(base_, &base_->strings_) : nullptr) {}

const uint32_t* FunctionTable::find(const Key& key) const {
  if (base_) {
    if (const uint32_t* id = base_->find(key)) return id;
  }
  const auto it = index_.find(key);
  return it == index_.end() ? nullptr : &it->second;
}

FunctionTable FunctionTable::flattened() const {
  // Interning in id order gives the same ids: a table holds no duplicates.
  FunctionTable out;
  for (uint32_t i = 1; i < strings_.size(); ++i) out.strings_.intern(strings_.get(i));
  for (uint32_t i = 0; i < size(); ++i) {
    const FunctionInfo& f = get(i);
    out.add(strings_.get(f.name), strings_.get(f.module), strings_.get(f.file), f.line, f.kind,
            f.user_code);
  }
  return out;
}

uint32_t FunctionTable::add(std::string_view name, std::string_view module, std::string_view file,
                            int32_t line, FunctionKind kind, bool user_code) {
  const Key key{strings_.intern(name), strings_.intern(module), strings_.intern(file), line, kind};
  if (const uint32_t* id = find(key)) return *id;
  const auto id = static_cast<uint32_t>(size());
  functions_.push_back(FunctionInfo{key.name, key.module, key.file, line, kind, user_code});
  index_.emplace(key, id);
  return id;
}

}  // namespace mlprof
