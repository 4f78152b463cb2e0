#pragma once
// MLflow's own calls, grouped: each run of consecutive sibling spans that are
// MLflow's work (schema enforcement, prediction context, signature checks,
// output conversion) becomes one node, "[mlflow: input checks, context]",
// whose children are those calls. The model's steps stay where they were,
// so the reader sees at once how much of predict is MLflow's and how much is
// the model's (docs/decisions/0004-mlflow-work-as-named-groups.md).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/tree.h"

namespace mlprof {

// What the grouping works out per function, kept across profiles that start
// on one shared base (FunctionTable's: the agent's sessions of a process),
// so the next session does not work it out again. Filled by
// group_framework_spans; a caller only keeps it from one call to the next.
struct GroupCache {
  struct FunctionClass {
    bool known = false;
    bool user = false;
    uint8_t kind = 0;
    int8_t category = -1;
  };
  std::shared_ptr<const FunctionTable> base;
  std::vector<FunctionClass> classes;  // by function id of `base`
  // The grouping's working arrays, kept so that the next profile reuses
  // their memory instead of allocating a dozen arrays per profile.
  struct Scratch {
    std::vector<uint8_t> kind;
    std::vector<int8_t> category;
    std::vector<FunctionClass> classes;  // the profile's own functions' (id - base size)
    std::vector<char> inside;
    std::vector<int32_t> member, siblings, new_index, group_index;
    std::vector<int32_t> run_members;  // every run's members, run after run
    std::vector<size_t> run_end;       // per run: its end in run_members
    std::vector<uint32_t> shift;
    std::vector<Span> spans;  // the rewritten spans (then the old ones' memory)
    std::string label;
  } scratch;
};

// Rewrites a built profile (after build_tree) in place. Settled details:
// - A group's wall is MLflow's alone: a run never spans a suspension of
//   its parent (a generator's calls before and after a yield), and it ends
//   before a member still suspended when the sibling after the run starts
//   (MLflow's context manager around the model's steps), which stays a node.
// - Grouped: a span of a module in "mlflow" that is not a delegation to the
//   model (a *predict* method, a wrapper), not labelled and not a block,
//   whose parent is not grouped itself. Standard-library spans (inspect,
//   typing: no "-packages/" in the file, not user code) between two grouped
//   siblings join their run; a run never starts or ends with one.
// - Whether a span is grouped depends on it, its siblings and its ancestors
//   only, never on what runs under it (user code under an MLflow call stays
//   in its group, a level deeper): a capture at depth d and one deeper
//   group every span down to depth d alike, so every view at depth d is the
//   same for any capture depth >= d (docs/capture.md, "Depth").
// - A group span: kSpanGroup, a function named after the run's categories in
//   a fixed order (stable across calls, so metric names are too), start of
//   its first member to end of its last, the members' lane. Members and
//   their descendants go one level deeper; I/O rows and segments follow
//   their spans. An exception a member passed on goes on the group.
// - Spans keep their relative order; a group comes right before its first
//   member, so parents still come before children.
// cache: optional; see GroupCache.
void group_framework_spans(Profile& profile, GroupCache* cache = nullptr);

}  // namespace mlprof
