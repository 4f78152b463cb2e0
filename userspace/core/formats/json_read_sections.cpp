// The profile document's sections (docs/format.md), read into a Profile
// one by one, checking each value's type and range before use: header,
// meta, strings, functions, lanes, spans, segments, I/O, marks, the kernel's
// data, span values. The text-level checks are json_read.cpp.

#include <rapidjson/document.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "formats/json_doc.h"
#include "formats/json_read_detail.h"
#include "formats/json_stream.h"
#include "views/waiting.h"

namespace mlprof::json_read_detail {

namespace {

constexpr std::string_view kFormat = "mlflow-profiler";
constexpr int kOldestVersion = 1;

// Reads a document tree into a Profile, field by field, checking each type
// and range before use. The first problem found stops the read.
class DocumentReader : DocumentAccess {
 public:
  DocumentReader(const Value& root, SpanRows& spans) : DocumentAccess(root, spans) {}

  Result<Profile> read() {
    Profile p;
    if (!root_.IsObject()) {
      return Error{Error::Kind::kCorrupt, 0,
                   std::string("not a profile document: the JSON is ") + type_name(root_) +
                       ", a profile document is an object with meta.format \"mlflow-profiler\""};
    }
    if (!read_header()) return take_error();
    if (!read_meta(p) || !read_stats(p) || !read_strings(p) || !read_functions(p) ||
        !read_lanes(p) || !read_spans(p) || !read_segments(p) || !read_io(p) || !read_marks(p) ||
        !read_kernel(p) || !read_span_values(p) || !read_waits(p)) {
      return take_error();
    }
    link_tree(p);
    if (waiting_col_ < 0) compute_waiting(p);  // suspended time, and the kernel's if it has it
    return p;
  }

 private:
  // -- sections ---------------------------------------------------------------------

  // format and version first: a newer document may differ in everything else.
  bool read_header() {
    const Value* meta = member(root_, "meta");
    const Value* format = meta != nullptr ? member(*meta, "format") : nullptr;
    if (format == nullptr || !format->IsString() ||
        std::string_view(format->GetString(), format->GetStringLength()) != kFormat) {
      error_ = Error{Error::Kind::kCorrupt, 0,
                     std::string("not a profile document: it is JSON, but meta.format is not "
                                 "\"mlflow-profiler\" ") +
                         kWhatLoadReads};
      return false;
    }
    const Value* version = member(*meta, "version");
    if (version == nullptr || !version->IsInt()) {
      error_ = Error{Error::Kind::kVersion, 0,
                     "the profile document has no integer meta.version, so its layout is unknown"};
      return false;
    }
    version_ = version->GetInt();
    if (version_ > kDocumentVersion) {
      error_ = Error{Error::Kind::kVersion, 0,
                     "the profile document is version " + std::to_string(version_) +
                         ", written by a newer mlflow-profiler; this one reads versions " +
                         std::to_string(kOldestVersion) + " to " +
                         std::to_string(kDocumentVersion) + ": upgrade mlflow-profiler to load it"};
      return false;
    }
    if (version_ < kOldestVersion) {
      error_ = Error{Error::Kind::kVersion, 0,
                     "the profile document says version " + std::to_string(version_) +
                         ", which no mlflow-profiler wrote (versions start at 1)"};
      return false;
    }
    return true;
  }

  bool read_meta(Profile& p) {
    const Value& meta = root_["meta"];  // read_header checked it
    const char* s = "meta";
    int32_t depth = 0;
    int64_t duration = 0;
    std::string clock;
    if (!get_field(meta, Where{s, -1, "captured_depth"}, depth) ||
        !get_field(meta, Where{s, -1, "start_ns"}, p.start_ns) ||
        !get_field(meta, Where{s, -1, "end_ns"}, p.end_ns) ||
        !get_field(meta, Where{s, -1, "duration_ns"}, duration) ||
        !get_field(meta, Where{s, -1, "clock"}, clock)) {
      return false;
    }
    p.captured_depth = depth;
    if (auto d = session_defect(p)) return fail(*d);
    if (duration != p.end_ns - p.start_ns) {
      return fail(Where{s, -1, "duration_ns"}, "is not end_ns - start_ns");
    }
    const Value* view = required(meta, Where{s, -1, "view_depth"});
    if (view == nullptr) return false;
    if (!view->IsNull() && !view->IsInt())
      return fail_type(Where{s, -1, "view_depth"}, *view, "an integer or null");
    for (const auto& m : meta.GetObject()) {
      const std::string key(m.name.GetString(), m.name.GetStringLength());
      if (key == "format" || key == "version" || key == "captured_depth" || key == "view_depth" ||
          key == "clock" || key == "start_ns" || key == "end_ns" || key == "duration_ns") {
        continue;
      }
      // Provenance (engine, python, pid, host ...) is strings only.
      if (!m.value.IsString())
        return fail_type(Where{"meta", -1, key.c_str()}, m.value, "a string");
      p.meta.emplace(key, std::string(m.value.GetString(), m.value.GetStringLength()));
    }
    return true;
  }

  bool read_stats(Profile& p) {
    const Value* stats = required(root_, Where{"document", -1, "stats"});
    if (stats == nullptr) return false;
    if (!stats->IsObject()) return fail_type(Where{"stats"}, *stats, "an object");
    return get_field(*stats, Where{"stats", -1, "events_captured"}, p.stats.events_captured) &&
           get_field(*stats, Where{"stats", -1, "events_skipped"}, p.stats.events_skipped) &&
           get_field(*stats, Where{"stats", -1, "unmatched_returns"}, p.stats.unmatched_returns);
  }

  // Interning in document order gives every string its id back.
  bool read_strings(Profile& p) {
    const Value* strings = table("strings");
    if (strings == nullptr) return false;
    if (strings->Empty() || !(*strings)[0].IsString() || (*strings)[0].GetStringLength() != 0) {
      return fail(Where{"strings", 0}, "must be the empty string");
    }
    StringTable& table = p.functions.strings();
    for (rapidjson::SizeType i = 1; i < strings->Size(); ++i) {
      const Value& v = (*strings)[i];
      if (!v.IsString()) return fail_type(Where{"strings", i}, v, "a string");
      const uint32_t id = table.intern(std::string_view(v.GetString(), v.GetStringLength()));
      if (id != i) return fail(Where{"strings", i}, "repeats strings[" + std::to_string(id) + "]");
    }
    return true;
  }

  // Re-adding in order gives every function its id back; the check catches a
  // document that lists one function twice.
  bool read_functions(Profile& p) {
    Columns c;
    const Value* rows = table("functions");
    if (rows == nullptr ||
        !columns("function_fields", {"name", "module", "file", "line", "kind", "user_code"}, c)) {
      return false;
    }
    const size_t n_strings = p.functions.strings().size();
    for (rapidjson::SizeType i = 0; i < rows->Size(); ++i) {
      const Value* r = row(*rows, "functions", i, c);
      if (r == nullptr) return false;
      uint32_t name = 0, module = 0, file = 0, kind = 0, user_code = 0;
      int32_t line = 0;
      const char* s = "functions";
      if (!get_id((*r)[c.at[0]], Where{s, i, "name"}, n_strings, "strings", name) ||
          !get_id((*r)[c.at[1]], Where{s, i, "module"}, n_strings, "strings", module) ||
          !get_id((*r)[c.at[2]], Where{s, i, "file"}, n_strings, "strings", file) ||
          !get((*r)[c.at[3]], Where{s, i, "line"}, line) ||
          !get((*r)[c.at[4]], Where{s, i, "kind"}, kind) ||
          !get((*r)[c.at[5]], Where{s, i, "user_code"}, user_code)) {
        return false;
      }
      if (!is_function_kind(kind)) {
        return fail(Where{s, i, "kind"},
                    "unknown kind " + std::to_string(kind) + " (" + kFunctionKinds + ")");
      }
      if (user_code > 1) return fail(Where{s, i, "user_code"}, "must be 0 or 1");
      const StringTable& st = p.functions.strings();
      const uint32_t id = p.functions.add(st.get(name), st.get(module), st.get(file), line,
                                          static_cast<FunctionKind>(kind), user_code == 1);
      if (id != i) return fail(Where{s, i}, "repeats functions[" + std::to_string(id) + "]");
    }
    return true;
  }

  bool read_lanes(Profile& p) {
    const Value* lanes = table("lanes");
    if (lanes == nullptr) return false;
    p.lanes.resize(lanes->Size());
    for (rapidjson::SizeType i = 0; i < lanes->Size(); ++i) {
      const Value& v = (*lanes)[i];
      if (!v.IsObject()) return fail_type(Where{"lanes", i}, v, "an object");
      Lane& lane = p.lanes[i];
      const char* s = "lanes";
      if (!get_field(v, Where{s, i, "thread_id"}, lane.thread_id) ||
          !get_field(v, Where{s, i, "native_tid"}, lane.native_tid) ||
          !get_field(v, Where{s, i, "thread_name"}, lane.thread_name) ||
          !get_field(v, Where{s, i, "task"}, lane.task) ||
          !get_field(v, Where{s, i, "parent_lane"}, lane.parent_lane) ||
          !get_field(v, Where{s, i, "parent_call"}, lane.parent_call) ||
          !get_field(v, Where{s, i, "events"}, lane.recorded) ||
          !get_field(v, Where{s, i, "dropped"}, lane.dropped) ||
          !get_field(v, Where{s, i, "truncated"}, lane.truncated)) {
        return false;
      }
      // The agent's provenance, absent in in-process documents.
      if (!get_absent_ok(v, Where{s, i, "pid"}, lane.pid) ||
          !get_absent_ok(v, Where{s, i, "session"}, lane.session) ||
          !get_absent_ok(v, Where{s, i, "trace_id"}, lane.trace_id) ||
          !get_absent_ok(v, Where{s, i, "span_id"}, lane.span_id)) {
        return false;
      }
      if (auto d = lane_defect(p, i)) return fail(*d);
    }
    return true;
  }

  bool read_spans(Profile& p) {
    Columns c;
    const Value* rows = table("spans");
    if (rows == nullptr || !columns("span_fields",
                                    {"parent", "function", "label", "lane", "depth", "flags",
                                     "start_ns", "end_ns", "active_ns", "resumes"},
                                    c)) {
      return false;
    }
    const size_t n_rows = spans_.streamed() ? spans_.size() : rows->Size();
    if (n_rows > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      return fail(Where{"spans"}, "more spans than a profile can index");
    }
    // Running vs waiting (optional: a document written before it has none;
    // read_document computes what it can then).
    waiting_col_ = optional_column(root_, "span_fields", "waiting_ns");
    const int resource_col = optional_column(root_, "span_fields", "resource");
    const size_t n_functions = p.functions.size();
    const size_t n_strings = p.functions.strings().size();
    const size_t n_lanes = p.lanes.size();
    p.spans.resize(n_rows);
    rapidjson::Document streamed_row;  // the row spans_ decodes into
    for (rapidjson::SizeType i = 0; i < n_rows; ++i) {
      const Value* r = spans_.streamed() ? streamed(i, c, streamed_row) : row(*rows, "spans", i, c);
      if (r == nullptr) return false;
      Span& span = p.spans[i];
      const char* s = "spans";
      if (!get((*r)[c.at[0]], Where{s, i, "parent"}, span.parent) ||
          !get_id((*r)[c.at[1]], Where{s, i, "function"}, n_functions, "functions",
                  span.function) ||
          !get_id((*r)[c.at[2]], Where{s, i, "label"}, n_strings, "strings", span.label) ||
          !get_id((*r)[c.at[3]], Where{s, i, "lane"}, n_lanes, "lanes", span.lane) ||
          !get((*r)[c.at[4]], Where{s, i, "depth"}, span.depth) ||
          !get((*r)[c.at[5]], Where{s, i, "flags"}, span.flags) ||
          !get((*r)[c.at[6]], Where{s, i, "start_ns"}, span.start_ns) ||
          !get((*r)[c.at[7]], Where{s, i, "end_ns"}, span.end_ns) ||
          !get((*r)[c.at[8]], Where{s, i, "active_ns"}, span.active_ns) ||
          !get((*r)[c.at[9]], Where{s, i, "resumes"}, span.resumes) ||
          (waiting_col_ >= 0 &&
           !get((*r)[waiting_col_], Where{s, i, "waiting_ns"}, span.waiting_ns)) ||
          (resource_col >= 0 && !get_id((*r)[resource_col], Where{s, i, "resource"}, n_strings,
                                        "strings", span.resource))) {
        return false;
      }
      if (auto d = span_defect(p, i)) return fail(*d);
    }
    spans_.release();
    return true;
  }

  // Version 1 has no segments and no I/O: they stay empty.
  bool read_segments(Profile& p) {
    if (version_ < 2) return true;
    Columns c;
    const Value* rows = table("segments");
    if (rows == nullptr || !columns("segment_fields", {"span", "start_ns", "end_ns"}, c))
      return false;
    // Coalesced resumes (optional: a document written before them has none).
    const int resumes_col = optional_column(root_, "segment_fields", "resumes");
    const int paused_col = optional_column(root_, "segment_fields", "paused_ns");
    p.segments.resize(rows->Size());
    for (rapidjson::SizeType i = 0; i < rows->Size(); ++i) {
      const Value* r = row(*rows, "segments", i, c);
      if (r == nullptr) return false;
      Segment& seg = p.segments[i];
      uint32_t span = 0;
      const char* s = "segments";
      if (!get_id((*r)[c.at[0]], Where{s, i, "span"}, p.spans.size(), "spans", span) ||
          !get((*r)[c.at[1]], Where{s, i, "start_ns"}, seg.start_ns) ||
          !get((*r)[c.at[2]], Where{s, i, "end_ns"}, seg.end_ns) ||
          (resumes_col >= 0 && !get((*r)[resumes_col], Where{s, i, "resumes"}, seg.resumes)) ||
          (paused_col >= 0 && !get((*r)[paused_col], Where{s, i, "paused_ns"}, seg.paused_ns))) {
        return false;
      }
      seg.span = static_cast<int32_t>(span);
      if (auto d = segment_defect(p, i)) return fail(*d);
    }
    return true;
  }

  bool read_io(Profile& p) {
    if (version_ < 2) return true;
    Columns c;
    const Value* rows = table("io");
    if (rows == nullptr || !columns("io_fields",
                                    {"span", "role", "name", "type", "shape", "dtype", "length",
                                     "size_bytes", "device", "repr"},
                                    c)) {
      return false;
    }
    p.io.resize(rows->Size());
    for (rapidjson::SizeType i = 0; i < rows->Size(); ++i) {
      const Value* r = row(*rows, "io", i, c);
      if (r == nullptr) return false;
      SpanIO& io = p.io[i];
      IOSummary& sum = io.summary;
      uint32_t span = 0, role = 0;
      const char* s = "io";
      if (!get_id((*r)[c.at[0]], Where{s, i, "span"}, p.spans.size(), "spans", span) ||
          !get((*r)[c.at[1]], Where{s, i, "role"}, role) ||
          !get((*r)[c.at[2]], Where{s, i, "name"}, io.name) ||
          !get((*r)[c.at[3]], Where{s, i, "type"}, sum.type_name) ||
          !read_shape((*r)[c.at[4]], Where{s, i, "shape"}, sum) ||
          !get_optional((*r)[c.at[5]], Where{s, i, "dtype"}, sum.dtype) ||
          !get_optional((*r)[c.at[6]], Where{s, i, "length"}, sum.length) ||
          !get_optional((*r)[c.at[7]], Where{s, i, "size_bytes"}, sum.size_bytes) ||
          !get_optional((*r)[c.at[8]], Where{s, i, "device"}, sum.device) ||
          !get_optional((*r)[c.at[9]], Where{s, i, "repr"}, sum.repr_short)) {
        return false;
      }
      io.span = static_cast<int32_t>(span);
      // Past IORole's uint8_t, a role would wrap before io_defect saw it.
      io.role = static_cast<IORole>(std::min<uint32_t>(role, 255));
      if (auto d = io_defect(p, i)) return fail(*d);
    }
    return true;
  }

  // Instants (optional: a document with none, or written before them, has
  // no "marks" table).
  bool read_marks(Profile& p) {
    if (member(root_, "marks") == nullptr) return true;
    Columns c;
    const Value* rows = table("marks");
    if (rows == nullptr ||
        !columns("mark_fields", {"lane", "ts_ns", "span", "name", "resource"}, c))
      return false;
    const size_t n_strings = p.functions.strings().size();
    p.marks.resize(rows->Size());
    for (rapidjson::SizeType i = 0; i < rows->Size(); ++i) {
      const Value* r = row(*rows, "marks", i, c);
      if (r == nullptr) return false;
      Mark& m = p.marks[i];
      const char* s = "marks";
      if (!get_id((*r)[c.at[0]], Where{s, i, "lane"}, p.lanes.size(), "lanes", m.lane) ||
          !get((*r)[c.at[1]], Where{s, i, "ts_ns"}, m.ts_ns) ||
          !get((*r)[c.at[2]], Where{s, i, "span"}, m.span) ||
          !get_id((*r)[c.at[3]], Where{s, i, "name"}, n_strings, "strings", m.name) ||
          !get_id((*r)[c.at[4]], Where{s, i, "resource"}, n_strings, "strings", m.resource)) {
        return false;
      }
      if (auto d = mark_defect(p, i)) return fail(*d);
    }
    return true;
  }

  // The eBPF agent's data (optional in version 2): present when the document
  // has a "kernel" object.
  bool read_kernel(Profile& p) {
    const Value* kernel = member(root_, "kernel");
    if (kernel == nullptr) return true;
    if (!kernel->IsObject()) return fail_type(Where{"kernel"}, *kernel, "an object");
    p.kernel.present = true;
    return get_field(*kernel, Where{"kernel", -1, "lost_events"}, p.kernel.lost_events) &&
           read_off_cpu(*kernel, p) && read_threads(*kernel, p);
  }

  // The table `key` of object `obj` with its "<key>_fields"-style header.
  const Value* nested_table(const Value& obj, const char* section, const char* key,
                            const char* fields_key, std::initializer_list<const char*> names,
                            Columns& c) {
    const Value* rows = required(obj, Where{section, -1, key});
    const Value* fields = required(obj, Where{section, -1, fields_key});
    if (rows == nullptr || fields == nullptr) return nullptr;
    if (!rows->IsArray()) {
      fail_type(Where{section, -1, key}, *rows, "an array");
      return nullptr;
    }
    if (!fields->IsArray()) {
      fail_type(Where{section, -1, fields_key}, *fields, "an array");
      return nullptr;
    }
    c.width = fields->Size();
    for (const char* name : names) {
      int found = -1;
      for (rapidjson::SizeType i = 0; i < fields->Size(); ++i) {
        const Value& f = (*fields)[i];
        if (f.IsString() && std::strcmp(f.GetString(), name) == 0) found = static_cast<int>(i);
      }
      if (found < 0) {
        fail(Where{section, -1, fields_key}, std::string("no \"") + name + "\" column");
        return nullptr;
      }
      c.at.push_back(found);
    }
    return rows;
  }

  bool read_off_cpu(const Value& kernel, Profile& p) {
    Columns c;
    const Value* rows = nested_table(
        kernel, "kernel", "off_cpu", "off_cpu_fields",
        {"tid", "pid", "start_ns", "wake_ns", "end_ns", "blocked", "waker_tid", "prev_state"}, c);
    if (rows == nullptr) return false;
    p.kernel.off_cpu.resize(rows->Size());
    const int wait_col = optional_column(kernel, "off_cpu_fields", "wait");
    for (rapidjson::SizeType i = 0; i < rows->Size(); ++i) {
      const Value* r = row(*rows, "kernel.off_cpu", i, c);
      if (r == nullptr) return false;
      OffCpuInterval& iv = p.kernel.off_cpu[i];
      const char* s = "kernel.off_cpu";
      if (!get((*r)[c.at[0]], Where{s, i, "tid"}, iv.tid) ||
          !get((*r)[c.at[1]], Where{s, i, "pid"}, iv.pid) ||
          !get((*r)[c.at[2]], Where{s, i, "start_ns"}, iv.start_ns) ||
          !get((*r)[c.at[3]], Where{s, i, "wake_ns"}, iv.wake_ns) ||
          !get((*r)[c.at[4]], Where{s, i, "end_ns"}, iv.end_ns) ||
          !get((*r)[c.at[5]], Where{s, i, "blocked"}, iv.blocked) ||
          !get((*r)[c.at[6]], Where{s, i, "waker_tid"}, iv.waker_tid) ||
          !get((*r)[c.at[7]], Where{s, i, "prev_state"}, iv.prev_state)) {
        return false;
      }
      // Optional columns (written since the agent named wakers and waits).
      if (int col = optional_column(kernel, "off_cpu_fields", "syscall"); col >= 0) {
        if (!get((*r)[col], Where{s, i, "syscall"}, iv.syscall)) return false;
      }
      if (auto d = off_cpu_defect(p, i)) return fail(*d);
      if (int col = optional_column(kernel, "off_cpu_fields", "waker_kind"); col >= 0) {
        std::string kind;
        if (!get((*r)[col], Where{s, i, "waker_kind"}, kind)) return false;
        if (!parse_waker_kind(kind, iv.waker_kind))
          return fail(Where{s, i, "waker_kind"}, "\"" + kind + "\" is not a waker kind");
      }
      if (int col = optional_column(kernel, "off_cpu_fields", "waker_name"); col >= 0) {
        if (!get((*r)[col], Where{s, i, "waker_name"}, iv.waker_name)) return false;
      }
      if (wait_col >= 0 && !read_wait_object((*r)[wait_col], Where{s, i, "wait"}, iv.wait))
        return false;
    }
    return true;
  }

  // A "wait" cell: "", "futex", "lock" or "gil" (WaitObject).
  bool read_wait_object(const Value& cell, const Where& where, WaitObject& out) {
    std::string name;
    if (!get(cell, where, name)) return false;
    if (!parse_wait_object(name, out)) return fail(where, "\"" + name + "\" is not a wait object");
    return true;
  }

  // The column of `name` in the header array obj[fields_key], -1 absent.
  int optional_column(const Value& obj, const char* fields_key, const char* name) {
    const Value* fields = member(obj, fields_key);
    if (fields == nullptr || !fields->IsArray()) return -1;
    for (rapidjson::SizeType i = 0; i < fields->Size(); ++i) {
      const Value& f = (*fields)[i];
      if (f.IsString() && std::strcmp(f.GetString(), name) == 0) return static_cast<int>(i);
    }
    return -1;
  }

  // kernel.waits (optional): SpanKernel::waits, after the span values.
  bool read_waits(Profile& p) {
    const Value* kernel = member(root_, "kernel");
    if (kernel == nullptr || member(*kernel, "waits") == nullptr) return true;
    if (p.kernel.spans.size() != p.spans.size())
      p.kernel.spans.assign(p.spans.size(), SpanKernel{});
    Columns c;
    const Value* rows = nested_table(*kernel, "kernel", "waits", "wait_fields",
                                     {"span", "syscall", "state", "blocked_ns", "count"}, c);
    if (rows == nullptr) return false;
    // Optional (written since the agent told GIL and lock waits apart).
    const int wait_col = optional_column(*kernel, "wait_fields", "wait");
    const int waker_col = optional_column(*kernel, "wait_fields", "waker");
    const int waker_ns_col = optional_column(*kernel, "wait_fields", "waker_ns");
    for (rapidjson::SizeType i = 0; i < rows->Size(); ++i) {
      const Value* r = row(*rows, "kernel.waits", i, c);
      if (r == nullptr) return false;
      const char* s = "kernel.waits";
      uint32_t span = 0;
      WaitReason w;
      std::string state;
      if (!get_id((*r)[c.at[0]], Where{s, i, "span"}, p.spans.size(), "spans", span) ||
          !get((*r)[c.at[1]], Where{s, i, "syscall"}, w.syscall) ||
          !get((*r)[c.at[2]], Where{s, i, "state"}, state) ||
          !get((*r)[c.at[3]], Where{s, i, "blocked_ns"}, w.blocked_ns) ||
          !get((*r)[c.at[4]], Where{s, i, "count"}, w.count)) {
        return false;
      }
      if (state.size() != 1) return fail(Where{s, i, "state"}, "not one letter");
      if (w.syscall < -1) return fail(Where{s, i, "syscall"}, "below -1");
      w.state = state[0];
      const rapidjson::SizeType cells = (*r).Size();
      if (wait_col >= 0 && static_cast<rapidjson::SizeType>(wait_col) < cells &&
          !read_wait_object((*r)[wait_col], Where{s, i, "wait"}, w.object))
        return false;
      if (waker_col >= 0 && static_cast<rapidjson::SizeType>(waker_col) < cells &&
          !get((*r)[waker_col], Where{s, i, "waker"}, w.waker))
        return false;
      if (waker_ns_col >= 0 && static_cast<rapidjson::SizeType>(waker_ns_col) < cells &&
          !get((*r)[waker_ns_col], Where{s, i, "waker_ns"}, w.waker_ns))
        return false;
      p.kernel.spans[span].waits.push_back(w);
    }
    return true;
  }

  bool read_threads(const Value& kernel, Profile& p) {
    Columns c;
    const Value* rows = nested_table(
        kernel, "kernel", "threads", "thread_fields",
        {"tid", "pid", "parent_tid", "start_ns", "end_ns", "name", "started_under", "exit_code"},
        c);
    if (rows == nullptr) return false;
    p.kernel.threads.resize(rows->Size());
    for (rapidjson::SizeType i = 0; i < rows->Size(); ++i) {
      const Value* r = row(*rows, "kernel.threads", i, c);
      if (r == nullptr) return false;
      ThreadLifetime& t = p.kernel.threads[i];
      const char* s = "kernel.threads";
      if (!get((*r)[c.at[0]], Where{s, i, "tid"}, t.tid) ||
          !get((*r)[c.at[1]], Where{s, i, "pid"}, t.pid) ||
          !get((*r)[c.at[2]], Where{s, i, "parent_tid"}, t.parent_tid) ||
          !get((*r)[c.at[3]], Where{s, i, "start_ns"}, t.start_ns) ||
          !get((*r)[c.at[4]], Where{s, i, "end_ns"}, t.end_ns) ||
          !get((*r)[c.at[5]], Where{s, i, "name"}, t.name) ||
          !get((*r)[c.at[6]], Where{s, i, "started_under"}, t.started_under) ||
          !get((*r)[c.at[7]], Where{s, i, "exit_code"}, t.exit_code)) {
        return false;
      }
      if (auto d = thread_defect(p, i)) return fail(*d);
    }
    return true;
  }

  // Long-form span values (optional in version 2). Kinds this reader does
  // not know are skipped: a newer writer may add kinds without a new version.
  bool read_span_values(Profile& p) {
    if (member(root_, "span_values") == nullptr) return true;
    Columns c;
    const Value* rows = table("span_values");
    if (rows == nullptr || !columns("span_value_fields", {"span", "type", "unit", "value"}, c)) {
      return false;
    }
    if (p.kernel.present) p.kernel.spans.assign(p.spans.size(), SpanKernel{});
    std::vector<uint8_t> seen(p.spans.size() * kSpanValueTypes.size(), 0);
    std::vector<uint8_t> seen_here(p.spans.size() * kValueKinds, 0);
    for (rapidjson::SizeType i = 0; i < rows->Size(); ++i) {
      const Value* r = row(*rows, "span_values", i, c);
      if (r == nullptr) return false;
      uint32_t span = 0;
      std::string type, unit;
      const char* s = "span_values";
      if (!get_id((*r)[c.at[0]], Where{s, i, "span"}, p.spans.size(), "spans", span) ||
          !get((*r)[c.at[1]], Where{s, i, "type"}, type) ||
          !get((*r)[c.at[2]], Where{s, i, "unit"}, unit)) {
        return false;
      }
      // In process (cpu_time, alloc_bytes): "alloc" always, "cpu" where no
      // kernel data holds it.
      const auto here = std::find_if(std::begin(kValueKindNames), std::end(kValueKindNames),
                                     [&](const ValueKindName& t) { return t.type == type; });
      if (here != std::end(kValueKindNames) &&
          (!p.kernel.present || here->kind != ValueKind::kCpuNs)) {
        if (unit != here->unit) {
          return fail(Where{s, i, "unit"}, "\"" + unit + "\" for \"" + type + "\", expected \"" +
                                               std::string(here->unit) + "\"");
        }
        uint64_t value = 0;
        if (!get((*r)[c.at[3]], Where{s, i, "value"}, value)) return false;
        uint8_t& once =
            seen_here[static_cast<size_t>(span) * kValueKinds + static_cast<size_t>(here->kind)];
        if (once != 0)
          return fail(Where{s, i}, "repeats \"" + type + "\" of span " + std::to_string(span));
        once = 1;
        p.values.push_back({static_cast<int32_t>(span), here->kind, value});
        continue;
      }
      const auto known = std::find_if(kSpanValueTypes.begin(), kSpanValueTypes.end(),
                                      [&](const SpanValueType& t) { return t.type == type; });
      if (known == kSpanValueTypes.end() || !p.kernel.present) continue;
      if (unit != known->unit) {
        return fail(Where{s, i, "unit"}, "\"" + unit + "\" for \"" + type + "\", expected \"" +
                                             std::string(known->unit) + "\"");
      }
      uint64_t value = 0;
      if (!get((*r)[c.at[3]], Where{s, i, "value"}, value)) return false;
      if (value > known->max) {
        return fail(Where{s, i, "value"},
                    std::to_string(value) + " is too large for \"" + type + "\"");
      }
      uint8_t& once = seen[span * kSpanValueTypes.size() +
                           static_cast<size_t>(known - kSpanValueTypes.begin())];
      if (once != 0)
        return fail(Where{s, i}, "repeats \"" + type + "\" of span " + std::to_string(span));
      once = 1;
      known->set(p.kernel.spans[span], value);
    }
    std::stable_sort(p.values.begin(), p.values.end(), [](const SpanValue& a, const SpanValue& b) {
      return a.span != b.span ? a.span < b.span : a.kind < b.kind;
    });
    return true;
  }

  // null: no shape; an array: dimensions, null for one that is not known.
  bool read_shape(const Value& v, const Where& w, IOSummary& sum) {
    if (v.IsNull()) return true;
    if (!v.IsArray()) return fail_type(w, v, "an array or null");
    sum.has_shape = true;
    sum.shape.reserve(v.Size());
    for (const Value& d : v.GetArray()) {
      if (d.IsNull()) {
        sum.shape.push_back(-1);
      } else if (d.IsInt64() && d.GetInt64() >= 0) {
        sum.shape.push_back(d.GetInt64());
      } else {
        return fail_type(w, d, "dimensions that are non-negative integers or null");
      }
    }
    return true;
  }

  int version_ = 0;
  int waiting_col_ = -1;  // span_fields' waiting_ns, -1: absent
};

}  // namespace

Result<Profile> read_document(const Value& root, SpanRows& spans) {
  return DocumentReader(root, spans).read();
}

}  // namespace mlprof::json_read_detail
