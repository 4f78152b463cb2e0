#include "views/group.h"

#include <algorithm>
#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "views/waiting.h"

namespace mlprof {

namespace {

constexpr std::string_view kPackage = "mlflow";

// What a grouped call does, judged by its name; the label lists the ones a
// run holds in this order. A name that matches none adds no word.
struct Category {
  std::string_view word;
  std::array<std::string_view, 10> needles;  // substrings of the qualified name
};
constexpr std::array<Category, 4> kCategories{{
    {"input checks",
     {"schema", "Schema", "validate", "enforce", "signature", "type_hint", "_is_list", "params",
      "input", "Input"}},
    {"context", {"context", "Context"}},
    {"tracing", {"trace", "Trace", "span", "Span"}},
    {"output", {"output", "Output"}},
}};

// MLflow frames that hand the call on to the model: never grouped, whatever
// runs under them (the flavor's model may be library code, not user code).
constexpr std::array<std::string_view, 8> kDelegates{
    "predict",       "_predict", "predict_stream", "_predict_stream",
    "predict_proba", "wrapper",  "_predict_fn",    "__call__"};

std::string_view last_component(std::string_view qualname) {
  const size_t dot = qualname.rfind('.');
  return dot == std::string_view::npos ? qualname : qualname.substr(dot + 1);
}

int category_of(std::string_view qualname, std::string_view module) {
  for (size_t c = 0; c < kCategories.size(); ++c) {
    for (const std::string_view needle : kCategories[c].needles) {
      if (!needle.empty() && qualname.find(needle) != std::string_view::npos)
        return static_cast<int>(c);
    }
  }
  return module_in(module, "mlflow.tracing") ? 2 : -1;
}

enum class Kind : uint8_t { kOther, kMlflow, kStdlib };

class Grouper {
 public:
  Grouper(Profile& p, GroupCache* cache)
      : p_(p), n_(p.spans.size()), cache_(cache), w_(cache ? cache->scratch : local_) {}

  void run() {
    classify();
    if (!find_runs()) return;
    rewrite();
  }

 private:
  // A function's kind and category: the same for every span of it, so
  // worked out once per function used (a session has fewer functions than
  // spans, and its table may hold many it does not use), and once per
  // shared base with a cache.
  using FunctionClass = GroupCache::FunctionClass;
  const FunctionClass& class_of(uint32_t function) {
    FunctionClass& c =
        function < shared_ ? cache_->classes[function] : w_.classes[function - shared_];
    if (c.known) return c;
    c.known = true;
    const FunctionInfo& f = p_.functions.get(function);
    c.user = f.user_code || f.kind == FunctionKind::kBlock;
    if (c.user) return c;
    const std::string& module = p_.functions.strings().get(f.module);
    const std::string& name = p_.functions.strings().get(f.name);
    if (module_in(module, kPackage)) {
      const std::string_view last = last_component(name);
      if (std::find(kDelegates.begin(), kDelegates.end(), last) == kDelegates.end()) {
        c.kind = static_cast<uint8_t>(Kind::kMlflow);
        c.category = static_cast<int8_t>(category_of(name, module));
      }
    } else if (f.kind == FunctionKind::kPython &&
               p_.functions.strings().get(f.file).find("-packages/") == std::string::npos) {
      c.kind = static_cast<uint8_t>(Kind::kStdlib);
    }
    return c;
  }

  Kind kind(int32_t span) const { return static_cast<Kind>(w_.kind[static_cast<size_t>(span)]); }

  void classify() {
    w_.kind.assign(n_, static_cast<uint8_t>(Kind::kOther));
    w_.category.assign(n_, -1);
    const auto& base = p_.functions.shared_base();
    if (cache_ && base) {
      if (cache_->base != base) {
        cache_->base = base;
        cache_->classes.assign(base->size(), FunctionClass{});
      }
      shared_ = static_cast<uint32_t>(base->size());
    }
    w_.classes.assign(p_.functions.size() - shared_, FunctionClass{});
    // A span's kind is its own: nothing under it counts. What runs under a
    // span at depth k is captured only at depths > k, so a rule that looked
    // there (it once kept an MLflow call that had user code or a labelled
    // pandas call under it out of its run) would group the same predict one
    // way at depth 5 and another at depth 6 (issue 42, item 5).
    for (size_t i = 0; i < n_; ++i) {
      const Span& s = p_.spans[i];
      if (s.function >= p_.functions.size()) continue;
      const FunctionClass& c = class_of(s.function);
      if (c.user || (s.flags & (kSpanLabelled | kSpanBlock))) continue;
      w_.kind[i] = c.kind;
      w_.category[i] = c.category;
    }
  }

  size_t runs() const { return w_.run_end.size(); }
  // Run r's members: [begin, end) of run_members.
  size_t run_begin(size_t r) const { return r == 0 ? 0 : w_.run_end[r - 1]; }
  int32_t run_last(size_t r) const { return w_.run_members[w_.run_end[r] - 1]; }

  // Marks run members (member = run number) and collects each run's
  // members; returns whether there is any run.
  bool find_runs() {
    w_.member.assign(n_, -1);
    w_.run_members.clear();
    w_.run_end.clear();
    // Whether `parent` (a generator) was suspended between t0 and t1: a run
    // never spans its parent's suspension (its wall would hold the consumer's).
    auto across_suspension = [&](int32_t parent, int64_t t0, int64_t t1) {
      if (parent < 0 || !(p_.spans[static_cast<size_t>(parent)].flags & kSpanGenerator))
        return false;
      auto [seg, end] = p_.segments_of(parent);
      if (seg == end) return false;
      for (; seg != end; ++seg) {
        if (seg->start_ns <= t0 && t1 <= seg->end_ns) return false;
      }
      return true;
    };
    auto scan = [&](const std::vector<int32_t>& sib, int32_t parent) {
      size_t i = 0;
      while (i < sib.size()) {
        if (kind(sib[i]) != Kind::kMlflow) {
          ++i;
          continue;
        }
        // Extend over MLflow spans, and standard-library spans followed by one.
        size_t end = i + 1, last = i;
        while (end < sib.size()) {
          const Kind k = kind(sib[end]);
          const Span& first = p_.spans[static_cast<size_t>(sib[i])];
          const Span& next = p_.spans[static_cast<size_t>(sib[end])];
          if (k == Kind::kOther || next.lane != first.lane ||
              across_suspension(parent, first.start_ns, next.start_ns)) {
            break;
          }
          if (k == Kind::kMlflow) last = end;
          ++end;
        }
        // A member still suspended when the sibling after the run starts
        // (MLflow's context manager around the model's steps) would stretch
        // the group over them: the run ends before it, and it stays a node.
        if (last + 1 < sib.size()) {
          const int64_t next = p_.spans[static_cast<size_t>(sib[last + 1])].start_ns;
          size_t j = i;
          while (j <= last && p_.spans[static_cast<size_t>(sib[j])].end_ns <= next) ++j;
          if (j <= last) {
            while (j > i && kind(sib[j - 1]) != Kind::kMlflow)
              --j;  // a run never ends with a stdlib span
            if (j == i) {
              ++i;
              continue;
            }
            last = j - 1;
          }
        }
        const auto group = static_cast<int32_t>(runs());
        w_.run_members.insert(w_.run_members.end(), sib.begin() + static_cast<std::ptrdiff_t>(i),
                              sib.begin() + static_cast<std::ptrdiff_t>(last) + 1);
        w_.run_end.push_back(w_.run_members.size());
        for (size_t j = i; j <= last; ++j) w_.member[static_cast<size_t>(sib[j])] = group;
        i = last + 1;
      }
    };
    scan(p_.roots, -1);
    // inside[i]: i or an ancestor is a member, so its children are inside a
    // group already. Parents come first, and a span's children are scanned
    // (member set) before the loop reaches them.
    std::vector<char>& inside = w_.inside;
    inside.assign(n_, 0);
    for (size_t i = 0; i < n_; ++i) {
      const int32_t parent = p_.spans[i].parent;
      inside[i] = w_.member[i] >= 0 || (parent >= 0 && inside[static_cast<size_t>(parent)]);
      if (inside[i]) continue;
      w_.siblings.clear();
      for (int32_t c = p_.spans[i].first_child; c >= 0;
           c = p_.spans[static_cast<size_t>(c)].next_sibling) {
        w_.siblings.push_back(c);
      }
      scan(w_.siblings, static_cast<int32_t>(i));
    }
    return runs() > 0;
  }

  // "[mlflow: input checks, context]" for run r, into the scratch string.
  const std::string& label(size_t r) {
    std::array<bool, kCategories.size()> has{};
    for (size_t k = run_begin(r); k < w_.run_end[r]; ++k) {
      // NOLINTNEXTLINE(bugprone-signed-char-misuse): -1 is "no category"
      const int c = w_.category[static_cast<size_t>(w_.run_members[k])];
      if (c >= 0) has[static_cast<size_t>(c)] = true;
    }
    std::string& out = w_.label;
    out.assign("[").append(kPackage);
    const char* sep = ": ";
    for (size_t c = 0; c < has.size(); ++c) {
      if (!has[c]) continue;
      out += sep;
      out += kCategories[c].word;
      sep = ", ";
    }
    out += ']';
    return out;
  }

  void rewrite() {
    std::vector<Span>& out = w_.spans;
    out.clear();
    out.reserve(n_ + runs());
    std::vector<int32_t>& new_index = w_.new_index;
    std::vector<int32_t>& group_index = w_.group_index;
    std::vector<uint32_t>& shift = w_.shift;
    new_index.assign(n_, -1);
    group_index.assign(runs(), -1);
    std::vector<int64_t> group_running(runs(), 0);
    shift.assign(n_, 0);
    for (size_t i = 0; i < n_; ++i) {
      Span s = p_.spans[i];
      const int32_t old_parent = s.parent;
      if (old_parent >= 0) shift[i] = shift[static_cast<size_t>(old_parent)];
      const int32_t group = w_.member[i];
      if (group >= 0 && group_index[static_cast<size_t>(group)] < 0) {
        const auto r = static_cast<size_t>(group);
        const Span& last = p_.spans[static_cast<size_t>(run_last(r))];
        Span g;
        g.parent = old_parent < 0 ? -1 : new_index[static_cast<size_t>(old_parent)];
        g.function = p_.functions.add(label(r), kPackage, "", 0, FunctionKind::kPython, false);
        g.lane = s.lane;
        g.depth = s.depth + shift[i];
        g.flags = kSpanGroup;
        g.start_ns = s.start_ns;
        g.end_ns = last.end_ns;
        g.active_ns = g.end_ns - g.start_ns;
        if ((last.flags & kSpanException) && !(last.flags & kSpanCaught)) g.flags |= kSpanException;
        group_index[r] = static_cast<int32_t>(out.size());
        out.push_back(g);
      }
      if (group >= 0) {
        s.parent = group_index[static_cast<size_t>(group)];
        out[static_cast<size_t>(s.parent)].waiting_ns += s.waiting_ns;
        group_running[static_cast<size_t>(group)] += s.running_ns();
        ++shift[i];
      } else if (old_parent >= 0) {
        s.parent = new_index[static_cast<size_t>(old_parent)];
      }
      s.depth += shift[i];
      new_index[i] = static_cast<int32_t>(out.size());
      out.push_back(s);
    }
    for (size_t r = 0; r < group_index.size(); ++r) {
      if (group_index[r] < 0) continue;
      Span& g = out[static_cast<size_t>(group_index[r])];
      g.waiting_ns = group_waiting_ns(g.duration_ns(), g.waiting_ns, group_running[r]);
    }
    p_.spans.swap(out);  // the old spans' memory stays in the scratch for the next profile
    for (SpanIO& io : p_.io) io.span = new_index[static_cast<size_t>(io.span)];
    for (Segment& seg : p_.segments) seg.span = new_index[static_cast<size_t>(seg.span)];
    for (SpanValue& v : p_.values) v.span = new_index[static_cast<size_t>(v.span)];
    for (Mark& m : p_.marks) {
      if (m.span >= 0) m.span = new_index[static_cast<size_t>(m.span)];
    }
    link_tree(p_);
    add_group_values();
  }

  // A group's value of a kind: the sum of its calls' (siblings, so nothing
  // counts twice), when every one of them has it.
  void add_group_values() {
    if (p_.values.empty()) return;
    std::vector<SpanValue> added;
    for (size_t g = 0; g < p_.spans.size(); ++g) {
      if (!(p_.spans[g].flags & kSpanGroup)) continue;
      for (int k = 0; k < kValueKinds; ++k) {
        const auto kind = static_cast<ValueKind>(k);
        uint64_t sum = 0;
        bool all = p_.spans[g].first_child >= 0;
        for (int32_t c = p_.spans[g].first_child; c >= 0 && all; c = p_.spans[c].next_sibling) {
          const uint64_t* v = p_.value_of(c, kind);
          all = v != nullptr;
          if (v) sum += *v;
        }
        if (all) added.push_back({static_cast<int32_t>(g), kind, sum});
      }
    }
    p_.values.insert(p_.values.end(), added.begin(), added.end());
    std::stable_sort(p_.values.begin(), p_.values.end(),
                     [](const SpanValue& a, const SpanValue& b) {
                       return a.span != b.span ? a.span < b.span : a.kind < b.kind;
                     });
  }

  Profile& p_;
  const size_t n_;
  GroupCache* cache_;
  GroupCache::Scratch local_;  // without a cache: this call's own
  GroupCache::Scratch& w_;
  uint32_t shared_ = 0;  // function ids below it: cache_'s classes
};

}  // namespace

void group_framework_spans(Profile& profile, GroupCache* cache) {
  Grouper(profile, cache).run();
  // A rare huge profile's arrays are not kept for the ordinary ones after it.
  constexpr size_t kKeptSpans = size_t{1} << 16;
  if (cache &&
      std::max(cache->scratch.kind.capacity(), cache->scratch.spans.capacity()) > kKeptSpans)
    cache->scratch = GroupCache::Scratch{};
}

}  // namespace mlprof
