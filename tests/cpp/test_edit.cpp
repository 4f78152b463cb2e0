#include "views/edit.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "formats/json_doc.h"
#include "formats/json_read.h"
#include "profile_builder.h"
#include "render/render_text.h"

namespace mlprof {
namespace {

using test::call;
using test::label;
using test::make_lane;
using test::resume;
using test::ret;
using test::suspend;

IOSummary summary(const std::string& type, const std::string& repr = "") {
  IOSummary s;
  s.type_name = type;
  s.repr_short = repr;
  return s;
}

// Spans, by index:
//   lane 0 (MainThread)            lane 1 (Worker-1, started inside preprocess)
//   0 predict                      6 work        (child of 1)
//   1 preprocess ("ssn 123-45")    7   encode
//   2   len (C)
//   3   StandardScaler.transform
//   4 batches (generator: 2 segments)
//   5   encode
// I/O: predict (X, return), preprocess (ssn, df, return), batches (return),
// work (job).
Profile sample_profile() {
  Profile p;
  const uint32_t predict = test::user_fn(p, "predict");
  const uint32_t preprocess = test::user_fn(p, "preprocess");
  const uint32_t batches = test::user_fn(p, "batches");
  const uint32_t encode = test::lib_fn(p, "encode", "tok.core");
  const uint32_t len = test::c_fn(p, "len");
  const uint32_t transform =
      test::lib_fn(p, "StandardScaler.transform", "sklearn.preprocessing._data");
  const uint32_t work = test::user_fn(p, "work", "app.workers");
  const uint32_t secret = p.functions.strings().intern("ssn 123-45");
  p.captured_depth = 3;
  p.start_ns = 50;
  p.end_ns = 1'000;
  p.stats.events_captured = 21;
  p.stats.events_skipped = 4;
  p.meta = {{"engine", "test"}};
  // clang-format off
  Lane main_lane = make_lane({
      call(100, predict),                                   // 0
      label(secret), call(110, preprocess),                 // 1, 2
      call(120, len, kEvCFunction), ret(130),               // 3, 4
      call(132, transform), ret(138),                       // 5, 6
      ret(140),                                             // 7
      call(150, batches),                                   // 8
      call(152, encode), ret(155),                          // 9, 10
      suspend(160, 8), resume(190, 8), ret(200),            // 11-13
      ret(900),                                             // 14
  });
  // clang-format on
  main_lane.io = {{0, IORole::kArgument, "X", summary("numpy.ndarray")},
                  {0, IORole::kReturn, "", summary("numpy.ndarray")},
                  {2, IORole::kArgument, "ssn", summary("str", "'123-45-6789'")},
                  {2, IORole::kArgument, "df", summary("pandas.DataFrame")},
                  {2, IORole::kReturn, "", summary("pandas.DataFrame")},
                  {8, IORole::kReturn, "", summary("NoneType")}};
  p.lanes.push_back(std::move(main_lane));
  Lane worker =
      make_lane({call(115, work), call(116, encode), ret(117), ret(125)}, "Worker-1", 0, 0, 2);
  worker.thread_id = 2;
  worker.io = {{0, IORole::kArgument, "job", summary("dict")}};
  p.lanes.push_back(std::move(worker));
  build_tree(p);
  return p;
}

Profile edited(const Profile& p, const ProfileEdits& e) {
  Result<Profile> r = edit_profile(p, e);
  if (!r.ok()) ADD_FAILURE() << r.error().message;
  return r.ok() ? std::move(r.value()) : Profile{};
}

std::vector<std::string> names(const Profile& p) {
  std::vector<std::string> out;
  for (const Span& s : p.spans) out.push_back(p.display_name(s));
  return out;
}

std::vector<int32_t> parents(const Profile& p) {
  std::vector<int32_t> out;
  for (const Span& s : p.spans) out.push_back(s.parent);
  return out;
}

std::vector<std::string> io_names(const Profile& p, int32_t span) {
  std::vector<std::string> out;
  auto [first, last] = p.io_of(span);
  for (const SpanIO* io = first; io != last; ++io) {
    out.push_back((io->role == IORole::kReturn ? "return:" : io->name + ":") +
                  io->summary.type_name);
  }
  return out;
}

bool table_has(const Profile& p, const std::string& s) {
  const StringTable& st = p.functions.strings();
  for (uint32_t i = 0; i < st.size(); ++i) {
    if (st.get(i) == s) return true;
  }
  return false;
}

// What every profile must satisfy for the renderers and the reader.
void expect_consistent(const Profile& p) {
  for (size_t i = 0; i < p.spans.size(); ++i) {
    const Span& s = p.spans[i];
    ASSERT_LT(s.parent, static_cast<int32_t>(i));
    ASSERT_LT(s.function, p.functions.size());
    ASSERT_LT(s.label, p.functions.strings().size());
    ASSERT_LT(s.lane, p.lanes.size());
    EXPECT_EQ(s.depth, s.parent < 0 ? 0u : p.spans[s.parent].depth + 1);
  }
  for (size_t i = 1; i < p.io.size(); ++i) EXPECT_LE(p.io[i - 1].span, p.io[i].span);
  for (size_t i = 1; i < p.segments.size(); ++i) {
    EXPECT_LE(p.segments[i - 1].span, p.segments[i].span);
  }
  for (const SpanIO& io : p.io) EXPECT_LT(io.span, static_cast<int32_t>(p.spans.size()));
  for (const Segment& seg : p.segments) EXPECT_LT(seg.span, static_cast<int32_t>(p.spans.size()));
}

TEST(EditTest, NoEditsGiveTheSameDocument) {
  const Profile p = sample_profile();
  const Profile copy = edited(p, {});
  EXPECT_EQ(to_json_document(copy), to_json_document(p));
  EXPECT_EQ(render_text(copy, {}), render_text(p, {}));
  EXPECT_EQ(copy.roots, p.roots);
  // The copy carries no events: they would rebuild what the edits removed.
  for (const Lane& lane : copy.lanes) {
    EXPECT_TRUE(lane.events.empty());
    EXPECT_TRUE(lane.io.empty());
  }
  EXPECT_EQ(copy.lanes[0].recorded, p.lanes[0].recorded);
}

TEST(EditTest, RelabelShowsEverywhereAndForgetsTheOldLabel) {
  const Profile p = sample_profile();
  ProfileEdits e;
  e.labels[1] = "preprocess (redacted)";
  e.labels[5] = "tokenize";
  const std::string before = to_json_document(p);
  const Profile out = edited(p, e);
  EXPECT_EQ(to_json_document(p), before) << "the input is never modified";
  EXPECT_EQ(names(out), (std::vector<std::string>{"predict", "preprocess (redacted)", "len",
                                                  "StandardScaler.transform", "batches", "tokenize",
                                                  "work", "encode"}));
  EXPECT_NE(render_text(out, {}).find("  preprocess (redacted): "), std::string::npos);
  EXPECT_NE(render_text(out, {}).find("    tokenize: "), std::string::npos);
  EXPECT_EQ(to_json_document(out).find("ssn 123-45"), std::string::npos);
  EXPECT_FALSE(table_has(out, "ssn 123-45"));
  EXPECT_FALSE(out.spans[5].flags & kSpanLabelled) << "a processor's label is not profile_span's";
  EXPECT_EQ(out.spans[1].flags, p.spans[1].flags);
  EXPECT_EQ(parents(out), parents(p));
  EXPECT_EQ(out.io, p.io);
}

TEST(EditTest, AnEmptyLabelShowsTheFunctionName) {
  const Profile p = sample_profile();
  ProfileEdits e;
  e.labels[1] = "";
  const Profile out = edited(p, e);
  EXPECT_EQ(out.display_name(out.spans[1]), "preprocess");
  EXPECT_EQ(out.spans[1].label, 0u);
  EXPECT_FALSE(table_has(out, "ssn 123-45"));
}

TEST(EditTest, ReplacedIoRowsKeepTheOrderTheProfileNeeds) {
  const Profile p = sample_profile();
  ProfileEdits e;
  // Given return first: arguments still come first, in the order given.
  e.io[1] = {{99, IORole::kReturn, "", summary("pandas.DataFrame")},
             {99, IORole::kArgument, "ssn", summary("REDACTED")},
             {99, IORole::kArgument, "df", summary("pandas.DataFrame")},
             {99, IORole::kArgument, "added", summary("int", "3")}};
  e.io[6] = {};                                                // none left
  e.io[3] = {{-5, IORole::kArgument, "x", summary("float")}};  // had none
  const Profile out = edited(p, e);
  expect_consistent(out);
  EXPECT_EQ(io_names(out, 1), (std::vector<std::string>{"ssn:REDACTED", "df:pandas.DataFrame",
                                                        "added:int", "return:pandas.DataFrame"}));
  EXPECT_TRUE(io_names(out, 6).empty());
  EXPECT_EQ(io_names(out, 3), (std::vector<std::string>{"x:float"}));
  EXPECT_EQ(io_names(out, 0), io_names(p, 0));
  EXPECT_EQ(io_names(out, 4), io_names(p, 4));
  const std::string doc = to_json_document(out);
  EXPECT_EQ(doc.find("123-45-6789"), std::string::npos);
  EXPECT_NE(doc.find("REDACTED"), std::string::npos);
  ViewOptions show_io;
  show_io.show_io = true;
  EXPECT_NE(render_text(out, show_io).find("in:  ssn=(REDACTED)"), std::string::npos)
      << render_text(out, show_io);
}

TEST(EditTest, DropRemovesTheSubtreeAcrossLanesAndRenumbers) {
  const Profile p = sample_profile();
  ProfileEdits e;
  e.drop = {1};  // preprocess: len, transform and the worker thread's spans go with it
  const Profile out = edited(p, e);
  expect_consistent(out);
  EXPECT_EQ(names(out), (std::vector<std::string>{"predict", "batches", "encode"}));
  EXPECT_EQ(parents(out), (std::vector<int32_t>{-1, 0, 1}));
  EXPECT_EQ(out.roots, (std::vector<int32_t>{0}));
  EXPECT_EQ(out.spans[0].first_child, 1);
  EXPECT_EQ(out.spans[1].next_sibling, -1);
  EXPECT_EQ(out.spans[1].first_child, 2);
  // The parent keeps its times: the removed child's time stays in it.
  EXPECT_EQ(out.spans[0].start_ns, p.spans[0].start_ns);
  EXPECT_EQ(out.spans[0].end_ns, p.spans[0].end_ns);
  EXPECT_EQ(out.spans[0].active_ns, p.spans[0].active_ns);
  // I/O and segments follow their spans to the new indices.
  EXPECT_EQ(io_names(out, 0), io_names(p, 0));
  EXPECT_EQ(io_names(out, 1), io_names(p, 4));
  EXPECT_TRUE(io_names(out, 2).empty());
  ASSERT_EQ(out.segments.size(), 2u);
  EXPECT_EQ(out.segments[0], (Segment{1, 150, 160}));
  EXPECT_EQ(out.segments[1], (Segment{1, 190, 200}));
  // Lanes stay (the worker's has no spans now); nothing of the removed spans remains.
  EXPECT_EQ(out.lanes.size(), 2u);
  EXPECT_EQ(out.lanes[1].thread_name, "Worker-1");
  EXPECT_FALSE(table_has(out, "ssn 123-45"));
  EXPECT_FALSE(table_has(out, "work"));
  EXPECT_FALSE(table_has(out, "StandardScaler.transform"));
  EXPECT_FALSE(table_has(out, "app.workers"));
  EXPECT_TRUE(table_has(out, "encode")) << "batches' child still uses it";
  EXPECT_EQ(out.functions.size(), 3u);
  const std::string doc = to_json_document(out);
  EXPECT_EQ(doc.find("123-45"), std::string::npos);
  EXPECT_EQ(out.stats.events_captured, p.stats.events_captured);
}

TEST(EditTest, DropInsideAnotherLaneAndInsideADroppedSpan) {
  const Profile p = sample_profile();
  ProfileEdits e;
  e.drop = {4, 5, 4, 7};  // batches (and its child 5 again, twice), the worker's encode
  const Profile out = edited(p, e);
  expect_consistent(out);
  EXPECT_EQ(names(out), (std::vector<std::string>{"predict", "ssn 123-45", "len",
                                                  "StandardScaler.transform", "work"}));
  // work (was 6) hangs under preprocess from the other lane; its index moved down.
  EXPECT_EQ(parents(out), (std::vector<int32_t>{-1, 0, 1, 1, 1}));
  EXPECT_EQ(out.spans[4].lane, 1u);
  EXPECT_TRUE(out.segments.empty());
  EXPECT_EQ(io_names(out, 4), (std::vector<std::string>{"job:dict"}));
  EXPECT_EQ(io_names(out, 1), io_names(p, 1));
  EXPECT_FALSE(table_has(out, "batches"));
}

TEST(EditTest, DroppingEveryRootLeavesAnEmptyProfile) {
  const Profile p = sample_profile();
  ProfileEdits e;
  e.drop = {0};
  const Profile out = edited(p, e);
  EXPECT_TRUE(out.spans.empty());
  EXPECT_TRUE(out.roots.empty());
  EXPECT_TRUE(out.io.empty());
  EXPECT_TRUE(out.segments.empty());
  EXPECT_EQ(out.functions.size(), 0u);
  EXPECT_EQ(out.functions.strings().size(), 1u);  // "" only
  EXPECT_EQ(out.max_depth(), -1);
  Result<Profile> back = read_json_document(to_json_document(out));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_TRUE(back.value().spans.empty());
}

TEST(EditTest, AllEditsTogether) {
  const Profile p = sample_profile();
  ProfileEdits e;
  e.labels[0] = "model.predict";
  e.labels[2] = "gone anyway";                                   // a dropped span: ignored
  e.io[2] = {{0, IORole::kArgument, "x", summary("REDACTED")}};  // likewise
  e.io[1] = {{0, IORole::kArgument, "ssn", summary("REDACTED")}};
  e.io[6] = {};
  e.drop = {2, 4};
  e.meta["span_processors"] = "redact_pii";
  const Profile out = edited(p, e);
  expect_consistent(out);
  EXPECT_EQ(names(out), (std::vector<std::string>{"model.predict", "ssn 123-45",
                                                  "StandardScaler.transform", "work", "encode"}));
  EXPECT_EQ(parents(out), (std::vector<int32_t>{-1, 0, 1, 1, 3}));
  EXPECT_EQ(io_names(out, 1), (std::vector<std::string>{"ssn:REDACTED"}));
  EXPECT_TRUE(io_names(out, 3).empty());
  EXPECT_EQ(io_names(out, 0), io_names(p, 0));
  EXPECT_FALSE(table_has(out, "gone anyway"));
  EXPECT_FALSE(table_has(out, "len"));
  EXPECT_EQ(out.meta.at("span_processors"), "redact_pii");
  EXPECT_EQ(out.meta.at("engine"), "test");
}

TEST(EditTest, AnEditedProfileSurvivesTheDocumentRoundTrip) {
  const Profile p = sample_profile();
  ProfileEdits e;
  e.labels[5] = "tokenize";
  e.io[1] = {{0, IORole::kArgument, "ssn", summary("REDACTED")},
             {0, IORole::kReturn, "", summary("pandas.DataFrame")}};
  e.drop = {3};
  e.meta["span_processors"] = "redact_pii,rename";
  const Profile out = edited(p, e);
  const std::string doc = to_json_document(out);
  Result<Profile> back = read_json_document(doc);
  ASSERT_TRUE(back.ok()) << back.error().message;
  const Profile& q = back.value();
  EXPECT_EQ(to_json_document(q), doc);
  EXPECT_EQ(render_text(q, {}), render_text(out, {}));
  EXPECT_EQ(names(q), names(out));
  EXPECT_EQ(q.display_name(q.spans[4]), "tokenize");
  EXPECT_EQ(io_names(q, 1), (std::vector<std::string>{"ssn:REDACTED", "return:pandas.DataFrame"}));
  EXPECT_EQ(q.segments, out.segments);
  EXPECT_EQ(q.meta.at("span_processors"), "redact_pii,rename");
  // And editing what was read back works like editing a capture.
  ProfileEdits again;
  again.drop = {4};
  const Profile twice = edited(q, again);
  expect_consistent(twice);
  EXPECT_EQ(twice.spans.size(), out.spans.size() - 1);
}

TEST(EditTest, AnIndexOutsideTheProfileIsAnError) {
  const Profile p = sample_profile();
  const std::string before = to_json_document(p);
  ProfileEdits labels;
  labels.labels[8] = "x";
  ProfileEdits io;
  io.io[-1] = {};
  ProfileEdits drop;
  drop.drop = {0, 100};
  for (const auto& [edits, table, index] :
       {std::tuple{labels, "labels", "8"}, std::tuple{io, "io", "-1"},
        std::tuple{drop, "drop", "100"}}) {
    Result<Profile> r = edit_profile(p, edits);
    ASSERT_FALSE(r.ok()) << table;
    EXPECT_EQ(r.error().kind, Error::Kind::kUnsupported);
    const std::string& m = r.error().message;
    EXPECT_NE(m.find(std::string(table) + " names span " + index), std::string::npos) << m;
    EXPECT_NE(m.find("has 8 spans"), std::string::npos) << m;
  }
  EXPECT_EQ(to_json_document(p), before);
}

TEST(EditTest, AnInputWhoseParentComesLaterIsAnError) {
  Profile p = sample_profile();
  p.spans[1].parent = 5;
  Result<Profile> r = edit_profile(p, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, Error::Kind::kCorrupt);
  EXPECT_NE(r.error().message.find("span 1 has parent 5"), std::string::npos);
  Profile q = sample_profile();
  q.spans[2].function = 1000;
  Result<Profile> r2 = edit_profile(q, {});
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.error().kind, Error::Kind::kCorrupt);
}

// Random captures with generators, random drops: what stays is exactly the
// spans with no dropped ancestor, in order, with their I/O and segments.
TEST(EditTest, RandomDropsKeepEverythingElse) {
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    Profile p = test::random_profile(seed, 400, 6, true);
    // I/O on every third span, so re-indexing of rows is exercised.
    for (int32_t i = 0; i < static_cast<int32_t>(p.spans.size()); i += 3) {
      std::string name = std::to_string(i);
      name.insert(0, 1, 'a');
      p.io.push_back({i, IORole::kArgument, name, summary("int")});
    }
    std::mt19937 rng(seed);
    ProfileEdits e;
    for (int k = 0; k < 5; ++k) e.drop.push_back(static_cast<int32_t>(rng() % p.spans.size()));
    const Profile out = edited(p, e);
    expect_consistent(out);
    std::vector<bool> gone(p.spans.size(), false);
    for (const int32_t d : e.drop) gone[d] = true;
    std::vector<int32_t> kept;
    for (size_t i = 0; i < p.spans.size(); ++i) {
      if (p.spans[i].parent >= 0 && gone[p.spans[i].parent]) gone[i] = true;
      if (!gone[i]) kept.push_back(static_cast<int32_t>(i));
    }
    ASSERT_EQ(out.spans.size(), kept.size()) << "seed " << seed;
    size_t rows = 0;
    for (size_t j = 0; j < kept.size(); ++j) {
      const Span& a = p.spans[kept[j]];
      const Span& b = out.spans[j];
      EXPECT_EQ(p.display_name(a), out.display_name(b));
      EXPECT_EQ(a.start_ns, b.start_ns);
      EXPECT_EQ(a.end_ns, b.end_ns);
      EXPECT_EQ(a.flags, b.flags);
      EXPECT_EQ(a.depth, b.depth);
      if (a.parent >= 0) {
        EXPECT_EQ(kept[b.parent], a.parent);
      }
      EXPECT_EQ(io_names(out, static_cast<int32_t>(j)), io_names(p, kept[j]));
      auto [sf, sl] = p.segments_of(kept[j]);
      auto [tf, tl] = out.segments_of(static_cast<int32_t>(j));
      ASSERT_EQ(sl - sf, tl - tf);
      for (; sf != sl; ++sf, ++tf) EXPECT_EQ(sf->start_ns, tf->start_ns);
      rows += static_cast<size_t>(p.io_of(kept[j]).second - p.io_of(kept[j]).first);
    }
    EXPECT_EQ(out.io.size(), rows);
  }
}

}  // namespace
}  // namespace mlprof
