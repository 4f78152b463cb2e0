#include "store/store_paths.h"

#include <string>

namespace mlprof {

void StorePaths::load(StoreDriver& d) {
  stacks_.clear();
  order_.clear();
  for (const auto& r :
       d.query("SELECT k.stack_id, k.parent_stack_id, k.depth, CASE WHEN lo.label <> '' THEN "
               "lo.label ELSE f.name END, f.filename, f.start_line FROM stacks k JOIN locations lo "
               "ON lo.location_id = k.location_id JOIN functions f ON f.function_id = "
               "lo.function_id",
               {})) {
    const int64_t id = sql_int(r[0]);
    if (id == 0) continue;  // the root has no location; a row for it is damage
    const bool added =
        stacks_
            .insert_or_assign(id, Stack{sql_int(r[1]), sql_int(r[2]), sql_text(r[3]),
                                        sql_text(r[4]), static_cast<int32_t>(sql_int(r[5]))})
            .second;
    if (added) order_.push_back(id);
  }
}

void StorePaths::fail(int64_t stack) {
  throw StoreFailure("stack " + std::to_string(stack) + " has no path to a root");
}

const StorePaths::Stack& StorePaths::at_or_fail(int64_t s, int64_t from) const {
  const auto it = stacks_.find(s);
  if (it == stacks_.end()) fail(from);
  return it->second;
}

const StorePaths::Stack& StorePaths::at(int64_t stack) const { return at_or_fail(stack, stack); }

std::vector<std::string> StorePaths::names(int64_t stack) const {
  std::vector<int64_t> steps;
  chain(
      stack, [](int64_t) { return false; }, &steps);
  std::vector<std::string> out;
  out.reserve(steps.size());
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) out.push_back(stacks_.at(*it).name);
  return out;
}

}  // namespace mlprof
