#pragma once
// A store's call paths (the stacks table), read once: each stack's parent,
// depth and name, and the walk from a stack up to the root. One rule for
// every reader that names paths (store_scan.cpp, views/function_stats.cpp,
// and through _core.store_stack_paths the trend's I/O drift): a location's
// label before its function's name; a missing parent or a loop of parents
// is a damaged store (StoreFailure), never an endless walk.

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "store/store.h"

namespace mlprof {

class StorePaths {
 public:
  struct Stack {
    int64_t parent = 0;
    int64_t depth = 0;
    std::string name;      // the location's label, else its function's name
    std::string filename;  // the function's
    int32_t start_line = 0;
  };

  // Reads every stack but the root (stack 0). Stacks are few: one per
  // distinct call path in the whole store.
  void load(StoreDriver& d);

  // `stack`'s row; StoreFailure when the store has none.
  const Stack& at(int64_t stack) const;
  // The stacks read, in the order the store gave them.
  const std::vector<int64_t>& ids() const { return order_; }

  // Appends to *chain the stacks from `stack` outwards while known(s) is
  // false (the root, 0, is always known), innermost first: the caller then
  // builds each one's value from its parent's, in reverse.
  template <class Known>
  void chain(int64_t stack, const Known& known, std::vector<int64_t>* out) const {
    out->clear();
    for (int64_t s = stack; s != 0 && !known(s);) {
      if (out->size() >= stacks_.size()) fail(stack);  // more steps than stacks: a loop
      out->push_back(s);
      s = at_or_fail(s, stack).parent;
    }
  }

  // The names from the root's first callee to `stack` (the root: none).
  std::vector<std::string> names(int64_t stack) const;

 private:
  [[noreturn]] static void fail(int64_t stack);
  const Stack& at_or_fail(int64_t s, int64_t from) const;

  std::unordered_map<int64_t, Stack> stacks_;
  std::vector<int64_t> order_;
};

}  // namespace mlprof
