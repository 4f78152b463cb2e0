#pragma once
// What the renderers and views rely on of a profile that did not come from
// build_tree: a document (formats/json_read_sections.cpp checks each row as
// it reads it) or a store someone was sent (store/store_read.cpp checks the
// profile it assembled). One check a table's row, so both readers refuse the
// same things in the same words.

#include <cstdint>
#include <optional>
#include <string>

#include "model/tree.h"

namespace mlprof {

// Where a profile breaks a rule, and which: `table`[`row`].`column`: `what`
// ("spans[3]: parent 7 is not an earlier span"). row -1: the table as a whole
// (the session's "meta"); column nullptr: the row as a whole.
struct ProfileDefect {
  const char* table = "";
  int64_t row = -1;
  const char* column = nullptr;
  std::string what;

  std::string str() const;
};

// The session ends after it starts, within range; its depth is -1 or more.
std::optional<ProfileDefect> session_defect(const Profile& p);
// Each check below reads row i of its table, and rows before it (which must
// have passed): a lane's parent_lane is -1 or a lane; a span's parent is an
// earlier span, its depth its parent's plus one, its lane a lane, it ends
// after it starts, its waiting within its wall time; segments and I/O
// summaries are of a span, in span order, segments end after they start with
// their pauses within, I/O roles are 0 or 1; marks name -1 or a span, in time
// order; off-CPU intervals end after they start, their syscall -1 or more;
// threads started under -1 or a span, and end after they start when both
// times are known. Every time is_time.
std::optional<ProfileDefect> lane_defect(const Profile& p, size_t i);
std::optional<ProfileDefect> span_defect(const Profile& p, size_t i);
std::optional<ProfileDefect> segment_defect(const Profile& p, size_t i);
std::optional<ProfileDefect> io_defect(const Profile& p, size_t i);
std::optional<ProfileDefect> mark_defect(const Profile& p, size_t i);
std::optional<ProfileDefect> off_cpu_defect(const Profile& p, size_t i);
std::optional<ProfileDefect> thread_defect(const Profile& p, size_t i);

// Every check above over the whole profile: "" when all hold, else the first
// that does not, for a one-line refusal.
std::string profile_defect(const Profile& profile);

}  // namespace mlprof
