#pragma once
// What a span stands for: a Python function (code object), a C function, or a
// labelled block. Interned so that events carry a 32-bit id.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "util/strings.h"

namespace mlprof {

enum class FunctionKind : uint8_t {
  kPython = 0,  // a code object
  kC = 1,       // a builtin / extension function (capture_c_calls)
  kBlock = 2,   // a profile_block region: name is the block's label
};

// Whether `kind`, as a document or a store holds it, is a FunctionKind; a
// reader refuses any other as damage, naming kFunctionKinds.
constexpr bool is_function_kind(int64_t kind) {
  return kind >= 0 && kind <= static_cast<int64_t>(FunctionKind::kBlock);
}
inline constexpr const char* kFunctionKinds = "0 Python, 1 C, 2 block";

struct FunctionInfo {
  uint32_t name = 0;    // qualified name ("Pipeline.predict"); string id
  uint32_t module = 0;  // "sklearn.pipeline"; string id
  uint32_t file = 0;    // co_filename; string id
  int32_t line = 0;     // co_firstlineno, 0 if unknown
  FunctionKind kind = FunctionKind::kPython;
  bool user_code = false;  // see classify_user_code()
};

// Decides FunctionInfo::user_code from a file path: false for site-packages,
// dist-packages, the standard library (any of `library_prefixes`, given by the
// interpreter) and pseudo-files such as "<frozen importlib._bootstrap>".
struct PathRules {
  std::vector<std::string> library_prefixes;
};
// The file name cloudpickle gives code it pickled by value: user code
// unless `module_file`, the file of the loaded module the code's globals
// name, is a library's.
inline constexpr std::string_view kDynamicCode = "<dynamic-code>";
bool classify_user_code(std::string_view file, const PathRules& rules,
                        std::string_view module_file = {});

// True when `module` is `prefix` or inside it ("a.b" is inside "a", not "ab").
bool module_in(std::string_view module, std::string_view prefix);

// A table may start on a shared, immutable base, as its StringTable does:
// the agent gives every session Profile of a process that process's names
// this way, so a session adds none of them again (ids below base()->size()
// are the base's).
class FunctionTable {
 public:
  FunctionTable() = default;
  // Starts as `base`'s functions and strings, same ids (base must not change afterwards).
  explicit FunctionTable(std::shared_ptr<const FunctionTable> base);

  // Interns a function; the same (name, module, file, line, kind) gives the same id.
  uint32_t add(std::string_view name, std::string_view module, std::string_view file, int32_t line,
               FunctionKind kind, bool user_code);
  const FunctionInfo& get(uint32_t id) const {
    return id < base_size_ ? base_->get(id) : functions_.at(id - base_size_);
  }
  size_t size() const { return base_size_ + functions_.size(); }
  StringTable& strings() { return strings_; }
  const StringTable& strings() const { return strings_; }
  // The base this table started on; nullptr if none.
  const FunctionTable* base() const { return base_.get(); }
  const std::shared_ptr<const FunctionTable>& shared_base() const { return base_; }
  // A table with no base holding the same functions and strings under the
  // same ids (the base's and this table's own).
  FunctionTable flattened() const;
  // Convenience accessors.
  const std::string& name(uint32_t id) const { return strings_.get(get(id).name); }
  const std::string& module(uint32_t id) const { return strings_.get(get(id).module); }

 private:
  struct Key {
    uint32_t name, module, file;
    int32_t line;
    FunctionKind kind;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  // The id of `key` if it is here (in the base or the table's own).
  const uint32_t* find(const Key& key) const;

  std::shared_ptr<const FunctionTable> base_;
  uint32_t base_size_ = 0;  // ids below it are the base's
  StringTable strings_;
  std::vector<FunctionInfo> functions_;
  std::unordered_map<Key, uint32_t, KeyHash> index_;
};

}  // namespace mlprof
