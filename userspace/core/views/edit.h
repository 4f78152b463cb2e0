#pragma once
// Edited copies of a profile: what span processors (mlflow_profiler.configure)
// hand to the exporters. Spans relabelled, their I/O summaries replaced, or
// removed with their subtrees; the input profile is never modified.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/summary.h"
#include "model/tree.h"
#include "util/result.h"

namespace mlprof {

// Span indices are those of the input profile.
struct ProfileEdits {
  // span -> its new display name. "" removes the label: the function's name shows.
  std::map<int32_t, std::string> labels;
  // span -> the rows that replace all of its I/O summaries (empty: none left).
  // A row's `span` field is ignored; arguments keep their order and come
  // before the return value, as Profile::io requires.
  std::map<int32_t, std::vector<SpanIO>> io;
  // Spans removed with all their descendants; edits to removed spans are ignored.
  std::vector<int32_t> drop;
  // Set on the copy's meta (provenance: which processors ran).
  std::map<std::string, std::string> meta;
};

// A copy of `in` with `edits` applied. Settled details:
// - Removed spans leave nothing behind: their subtrees, I/O rows and segments
//   go, and so do the strings and functions only they used (a relabelled
//   span's old label too), so an export of the copy cannot show them. Span,
//   function and string ids are renumbered; the order of what stays is kept.
// - A parent keeps its times: a removed child's time stays inside it.
// - Lanes keep their counts (recorded, dropped, truncated) but not their
//   events or I/O records, like a profile read back from a document: the
//   events would rebuild the removed spans, the records the replaced
//   summaries. build_tree must not run on the copy; stats are kept as captured.
// - A relabelled span does not get kSpanLabelled: that flag says the label
//   came from profile_span/profile_block, and it makes a span user code.
// Errors: a span index in `edits` outside the profile (kUnsupported, naming
// the index and the table it came from); an input whose spans do not come
// after their parents, or that names a function it does not have (kCorrupt).
Result<Profile> edit_profile(const Profile& in, const ProfileEdits& edits);

}  // namespace mlprof
