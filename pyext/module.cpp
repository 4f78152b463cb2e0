// mlflow_profiler._core: the capture engine, the span types and bindings to
// the C++ core (tree, views, renderers). Python-facing conversions only; the
// logic lives in the engine (engine_internal.h lists its files) and userspace/core.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <iterator>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "alloc_count.h"
#include "bindings.h"
#include "capture/capture.h"
#include "engine.h"
#include "exception_state.h"
#include "formats/json_doc.h"
#include "loop_watch.h"
#include "model/tree.h"
#include "on_cpu.h"
#include "overhead_cut.h"
#include "probes.h"
#include "render/render_text.h"
#include "span_api.h"
#include "summarize.h"
#include "views/group.h"
#include "views/view.h"

namespace py = pybind11;
using namespace mlprof;

namespace {

using ProfilePtr = std::shared_ptr<Profile>;

ViewOptions view_options(int depth, bool collapse_frameworks, std::vector<std::string> user_modules,
                         bool show_c_calls, bool show_io = false) {
  ViewOptions o;
  o.show_io = show_io;
  o.depth = depth;
  o.collapse_frameworks = collapse_frameworks;
  o.user_modules = std::move(user_modules);
  o.show_c_calls = show_c_calls;
  return o;
}

py::list flag_names(uint32_t flags) {
  py::list out;
  for (const SpanFlagName& f : kSpanFlagNames) {
    if (flags & f.bit) out.append(f.name);
  }
  return out;
}

// One dict per view node; `children` filled by to_tree.
py::dict node_dict(const Profile& p, const View& v, int32_t i, const ViewOptions& opts,
                   const std::vector<std::string>& paths) {
  const ViewNode& n = v.nodes[static_cast<size_t>(i)];
  const Span& s = p.spans[static_cast<size_t>(n.span)];
  const FunctionInfo& f = p.functions.get(s.function);
  const Lane& lane = p.lanes[s.lane];
  const StringTable& st = p.functions.strings();
  py::dict d;
  d["index"] = i;
  d["span_index"] = n.span;
  d["label"] = n.collapsed.empty() ? p.display_name(s) : n.collapsed;
  d["resource"] = s.resource == 0 ? py::object(py::none())
                                  : py::object(py::str(p.functions.strings().get(s.resource)));
  d["function"] = st.get(f.name);
  d["module"] = st.get(f.module);
  d["file"] = st.get(f.file);
  d["line"] = f.line;
  d["depth"] = n.depth;
  d["parent_index"] = n.parent < 0 ? py::object(py::none()) : py::object(py::int_(n.parent));
  d["start_ns"] = n.start_ns;
  d["end_ns"] = n.end_ns;
  d["duration_ns"] = n.duration_ns;  // as shown: a generator's running time (views/view.h)
  d["duration_ms"] = static_cast<double>(n.duration_ns) / 1e6;
  d["wall_ns"] = n.collapsed.empty() ? s.duration_ns() : n.duration_ns;
  d["active_ns"] = n.collapsed.empty() ? s.active_ns : n.duration_ns;
  d["waiting_ns"] = n.waiting_ns;  // of duration_ns (views/view.h)
  d["call_path"] = paths[static_cast<size_t>(i)];
  d["thread_id"] = lane.thread_id;
  d["thread_name"] = lane.thread_name;
  d["task"] = lane.task;
  d["is_user_code"] = n.collapsed.empty() ? is_user_code(p, s, opts) : false;
  d["collapsed"] = !n.collapsed.empty();
  d["merged"] = n.merged;
  d["flags"] = flag_names(s.flags);
  return d;
}

std::vector<std::string> view_paths(const Profile& p, const View& v) {
  std::vector<std::string> paths(v.nodes.size());
  for (size_t i = 0; i < v.nodes.size(); ++i) {  // pre-order: parents first
    const ViewNode& n = v.nodes[i];
    std::string name =
        n.collapsed.empty() ? p.display_name(p.spans[static_cast<size_t>(n.span)]) : n.collapsed;
    paths[i] = n.parent < 0 ? name : paths[static_cast<size_t>(n.parent)] + "/" + name;
  }
  return paths;
}

py::list to_flat(const ProfilePtr& p, const ViewOptions& o) {
  View v = make_view(*p, o);
  auto paths = view_paths(*p, v);
  py::list out;
  for (size_t i = 0; i < v.nodes.size(); ++i) {
    out.append(node_dict(*p, v, static_cast<int32_t>(i), o, paths));
  }
  return out;
}

py::list to_tree(const ProfilePtr& p, const ViewOptions& o) {
  View v = make_view(*p, o);
  auto paths = view_paths(*p, v);
  std::vector<py::dict> dicts;
  dicts.reserve(v.nodes.size());
  for (size_t i = 0; i < v.nodes.size(); ++i) {
    py::dict d = node_dict(*p, v, static_cast<int32_t>(i), o, paths);
    d["children"] = py::list();
    dicts.push_back(d);
  }
  py::list roots;
  for (size_t i = 0; i < v.nodes.size(); ++i) {
    int32_t parent = v.nodes[i].parent;
    if (parent < 0)
      roots.append(dicts[i]);
    else
      py::list(dicts[static_cast<size_t>(parent)]["children"]).append(dicts[i]);
  }
  return roots;
}

// (role, name, IOSummary) for each I/O summary of a span.
py::list span_io(const Profile& p, int32_t span) {
  py::list out;
  auto [first, last] = p.io_of(span);
  for (const SpanIO* io = first; io != last; ++io) {
    PyObject* summary = io_summary_object(io->summary);
    if (!summary) throw py::error_already_set();
    out.append(py::make_tuple(static_cast<int>(io->role), io->name,
                              py::reinterpret_steal<py::object>(summary)));
  }
  return out;
}

// One dict per span of the full capture: SpanRecord's fields by name
// (_session.py), and "io", its (role, name, IOSummary) rows.
py::list span_rows(const ProfilePtr& p) {
  py::list out;
  const StringTable& st = p->functions.strings();
  for (size_t i = 0; i < p->spans.size(); ++i) {
    const Span& s = p->spans[i];
    const FunctionInfo& f = p->functions.get(s.function);
    const Lane& lane = p->lanes[s.lane];
    const std::string& module = st.get(f.module);
    py::dict d;
    d["label"] = p->display_name(s);
    d["resource"] =
        s.resource == 0 ? py::object(py::none()) : py::object(py::str(st.get(s.resource)));
    d["module"] = module.empty() ? py::object(py::none()) : py::object(py::str(module));
    d["start_ns"] = s.start_ns;
    d["end_ns"] = (s.flags & (kSpanOpenAtEnd | kSpanSuspendedAtEnd))
                      ? py::object(py::none())
                      : py::object(py::int_(s.end_ns));
    d["parent_index"] = s.parent < 0 ? py::object(py::none()) : py::object(py::int_(s.parent));
    d["depth"] = s.depth;
    d["is_user_code"] =
        f.kind == FunctionKind::kBlock || (s.flags & kSpanLabelled) ? true : f.user_code;
    d["function"] = st.get(f.name);
    d["file"] = st.get(f.file);
    d["line"] = f.line;
    d["thread_id"] = lane.thread_id;
    d["thread_name"] = lane.thread_name;
    d["flags"] = py::tuple(flag_names(s.flags));
    d["active_ns"] = s.active_ns;
    d["waiting_ns"] = s.waiting_ns;
    const uint64_t* cpu = p->value_of(static_cast<int32_t>(i), ValueKind::kCpuNs);
    const uint64_t* alloc = p->value_of(static_cast<int32_t>(i), ValueKind::kAllocBytes);
    d["cpu_ns"] = cpu ? py::object(py::int_(*cpu)) : py::object(py::none());
    d["alloc_bytes"] = alloc ? py::object(py::int_(*alloc)) : py::object(py::none());
    d["io"] = span_io(*p, static_cast<int32_t>(i));
    out.append(std::move(d));
  }
  return out;
}

py::dict lanes_info(const Profile& p) {
  py::dict threads;
  for (const Lane& l : p.lanes) {
    py::dict d;
    d["thread_id"] = l.thread_id;
    d["native_tid"] = l.native_tid;
    d["thread_name"] = l.thread_name;
    d["task"] = l.task;
    d["events"] = l.recorded;
    d["dropped"] = l.dropped;
    d["truncated"] = l.truncated;
    std::string key = l.thread_name + (l.task ? ":task" + std::to_string(l.task) : "");
    threads[py::str(key)] = d;
  }
  return threads;
}

// One dict per session that had a trace context: pid (0: in process),
// session, trace_id, span_id; in lane order, each session once.
py::list traces_info(const Profile& p) {
  py::list out;
  std::vector<std::pair<uint32_t, uint64_t>> seen;
  for (const Lane& l : p.lanes) {
    if (l.trace_id.empty()) continue;
    const std::pair<uint32_t, uint64_t> key{l.pid, l.session};
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
    seen.push_back(key);
    py::dict d;
    d["pid"] = l.pid;
    d["session"] = l.session;
    d["trace_id"] = l.trace_id;
    d["span_id"] = l.span_id;
    out.append(d);
  }
  return out;
}

// The reference engine hands its lanes over as plain tuples.
ProfilePtr build_from_python(const py::list& lanes, const py::list& functions,
                             const std::vector<std::string>& labels, int depth, int64_t start_ns,
                             int64_t end_ns, uint64_t skipped,
                             const std::map<std::string, std::string>& meta) {
  auto p = std::make_shared<Profile>();
  std::vector<uint32_t> fmap;
  for (const auto& item : functions) {
    auto t = item.cast<py::tuple>();
    fmap.push_back(p->functions.add(
        t[0].cast<std::string>(), t[1].cast<std::string>(), t[2].cast<std::string>(),
        t[3].cast<int32_t>(), static_cast<FunctionKind>(t[4].cast<int>()), t[5].cast<bool>()));
  }
  // The profiler's stretches leave its thread's timeline, every lane of that
  // thread alike, as in the native engine's build (overhead_cut.h); times
  // are ns already.
  std::unordered_map<uint64_t, TimePairs> cuts;
  std::unordered_map<uint64_t, TimePairs> lane_reads;  // per lane, in order
  std::unordered_map<uint64_t, TimePairs> thread_reads;
  bool any_overhead = false;
  for (size_t i = 0; i < lanes.size(); ++i) {
    auto d = lanes[i].cast<py::dict>();
    if (d.contains("cpu_reads")) {  // (ns, the thread's CPU ns): views/waiting.h
      TimePairs& reads = lane_reads[i];
      for (const auto& rec : d["cpu_reads"].cast<py::list>()) {
        auto r = rec.cast<py::tuple>();
        reads.emplace_back(r[0].cast<int64_t>(), r[1].cast<int64_t>());
      }
      auto& t = thread_reads[d["thread_id"].cast<uint64_t>()];
      t.insert(t.end(), reads.begin(), reads.end());
    }
    cuts[d["thread_id"].cast<uint64_t>()];  // every thread has a (maybe empty) cut
    if (!d.contains("overhead")) continue;
    any_overhead = true;
    auto& c = cuts[d["thread_id"].cast<uint64_t>()];
    for (const auto& iv : d["overhead"].cast<py::list>()) {
      auto r = iv.cast<py::tuple>();
      c.emplace_back(r[0].cast<int64_t>(), r[1].cast<int64_t>());
    }
  }
  const int64_t overhead_ns = merge_stretches(cuts);
  const auto same_ns = [](int64_t t) { return t; };
  const auto inside = off_cpu_inside(cuts, thread_reads, same_ns);
  uint64_t captured = 0;
  for (size_t i = 0; i < lanes.size(); ++i) {
    auto d = lanes[i].cast<py::dict>();
    Lane lane;
    lane.thread_id = d["thread_id"].cast<uint64_t>();
    lane.native_tid = d["native_tid"].cast<uint64_t>();
    lane.thread_name = d["thread_name"].cast<std::string>();
    lane.task = d["task"].cast<uint32_t>();
    lane.parent_lane = d["parent_lane"].cast<int32_t>();
    lane.parent_call = d["parent_call"].cast<uint32_t>();
    lane.dropped = d["dropped"].cast<uint64_t>();
    lane.truncated = d["truncated"].cast<bool>();
    if (d.contains("trace_id")) {  // the session's trace context, when one was active
      lane.trace_id = d["trace_id"].cast<std::string>();
      lane.span_id = d["span_id"].cast<std::string>();
    }
    const TimePairs& cut = cuts[lane.thread_id];
    CutTimeline on_cut(cut);
    for (const auto& ev : d["events"].cast<py::list>()) {
      auto e = ev.cast<py::tuple>();
      Event out{};
      out.ts_ns = e[0].cast<int64_t>();
      out.kind = static_cast<EventKind>(e[1].cast<int>());
      uint32_t id = e[2].cast<uint32_t>();
      if (out.kind == EventKind::kCall)
        id = fmap.at(id);
      else if (out.kind == EventKind::kLabel || out.kind == EventKind::kMark) {
        id = p->functions.strings().intern(labels.at(id));
      }
      if (out.kind != EventKind::kLabel) out.ts_ns = on_cut(out.ts_ns);
      out.id = id;
      out.flags = e[3].cast<uint8_t>();
      lane.events.push_back(out);
    }
    if (d.contains("readings")) {  // (event index, ValueKind, counter)
      for (const auto& rec : d["readings"].cast<py::list>()) {
        auto r = rec.cast<py::tuple>();
        const int kind = r[1].cast<int>();
        if (kind < 0 || kind >= kValueKinds) throw py::value_error("a reading of an unknown kind");
        lane.readings.push_back(
            {r[0].cast<uint32_t>(), static_cast<ValueKind>(kind), r[2].cast<int64_t>()});
      }
    }
    if (lane_reads.count(i)) {
      add_off_cpu(lane_reads[i], cut, inside.at(lane.thread_id), same_ns, lane.off_cpu);
    }
    if (d.contains("io")) {
      for (const auto& rec : d["io"].cast<py::list>()) {
        auto r = rec.cast<py::tuple>();
        IORecord io{r[0].cast<uint32_t>(),
                    static_cast<IORole>(r[1].cast<int>()),
                    r[2].cast<std::string>(),
                    {}};
        std::string why;
        if (!summarize::from_python(r[3].ptr(), &io.summary, &why))
          throw py::type_error("an I/O record: " + why);
        lane.io.push_back(std::move(io));
      }
    }
    captured += lane.events.size();
    p->lanes.push_back(std::move(lane));
  }
  p->captured_depth = depth;
  p->start_ns = start_ns;
  p->end_ns = end_ns;
  p->stats.events_captured = captured;
  p->stats.events_skipped = skipped;
  p->meta = meta;
  // Reported once (the tree's footer, the report's header, statistics()).
  if (any_overhead) p->meta["profiler_overhead_ns"] = std::to_string(overhead_ns);
  drop_empty_lanes(*p);
  build_tree(*p);
  group_framework_spans(*p);
  return p;
}

// usdt_attached(): a plain METH_NOARGS function, not a pybind11 one, because
// autoprofile's unsampled predict calls it on every call (a few ns vs ~100).
PyObject* usdt_attached(PyObject*, PyObject*) {
  if (probes::session_traced()) Py_RETURN_TRUE;
  Py_RETURN_FALSE;
}
PyMethodDef g_usdt_attached_def = {
    "usdt_attached", usdt_attached, METH_NOARGS,
    "True while a tracer (mlprof-ebpf, bpftrace) is attached to the session_begin USDT probe\n"
    "of this process: autoprofile() then profiles every predict, sampled or not."};

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "mlflow_profiler's native part: capture hooks and the C++ core.";
  m.attr("__version__") = MLPROF_VERSION;  // pyproject.toml's, through CMake
  // This thread's exception state, while there is memory (exception_state.h);
  // other threads: native_tid().
  reach_exception_state();
  init_engine_module(m.ptr());
  capture::init();
  if (!add_span_types(m.ptr())) throw py::error_already_set();
  if (!loop_watch::add_loop_watch(m.ptr())) throw py::error_already_set();
  // Contracts defined once in the core (model/summary.h, model/tree.h), for Python.
  m.attr("IO_ARGUMENT") = static_cast<int>(IORole::kArgument);
  m.attr("IO_RETURN") = static_cast<int>(IORole::kReturn);
  m.attr("OFF_CPU_QUANTUM_NS") = kOffCpuQuantumNs;  // views/waiting.h, for the reference engine
  m.attr("OFF_CPU_MIN_NS") = kOffCpuMinNs;
  m.def("on_cpu_watched", &on_cpu::available,
        "Whether running vs waiting tells a thread that stayed on the CPU without a system "
        "call (glibc's rseq area, checked at import; pyext/on_cpu.h).");
  py::dict span_flags;
  for (const SpanFlagName& f : kSpanFlagNames) span_flags[f.name] = f.bit;
  m.attr("SPAN_FLAGS") = span_flags;

  m.def("set_library_prefixes", &set_library_prefixes, py::arg("prefixes"),
        "Paths of the standard library: code under them is not user code.");
  m.def(
      "add_transparent", [](py::object code) { add_transparent(code.ptr()); }, py::arg("code"),
      "Marks a code object, and any code equal to it, transparent: never a node, not counted "
      "toward depth.");
  m.def("format_duration", &format_duration, py::arg("ns"),
        "'48.12ms', '3.20us': the trees' way of writing a time.");
  m.def(
      "is_user_file", [](const std::string& file) { return is_user_file(file); }, py::arg("file"),
      "Whether code in this file is user code (not site-packages, the standard library or a "
      "pseudo-file).");
  m.def(
      "add_hidden", [](py::object code) { add_hidden(code.ptr()); }, py::arg("code"),
      "Marks a code object hidden: transparent, and so is everything it calls (its time is its "
      "caller's).");
  m.def(
      "add_labeller",
      [](py::object code, py::object labeller) { add_labeller(code.ptr(), labeller.ptr()); },
      py::arg("code"), py::arg("labeller"),
      "labeller(arg0, arg1) names each call of the code (a str), or keeps its name (None).");
  m.def("now_ns", &now_ns, "CLOCK_MONOTONIC in nanoseconds, the clock of every event.");
  m.def("hook_name", &capture::name, "The capture hook of this interpreter.");
  // The reference engine's alloc_bytes reads the native counter (one mechanism).
  m.def(
      "alloc_count_start",
      [] {
        std::string why;
        return alloc_count::start(&why) ? py::none() : py::object(py::str(why));
      },
      "Starts counting allocated bytes (alloc_bytes); None, or why it cannot.");
  m.def("alloc_count_stop", &alloc_count::stop, "Stops what one alloc_count_start() started.");
  m.def("alloc_thread_bytes", &alloc_count::thread_bytes,
        "Bytes this thread requested from Python's allocators while counting was on.");
  m.def("tool_id", &capture::tool_id, "The sys.monitoring tool id held now, -1 if none.");
  m.def("keep_capture_between_sessions", &capture::keep_between_sessions, py::arg("keep"),
        "Keeps the sys.monitoring tool id and its local events between sessions (autoprofile), or "
        "lets them go once no session runs (the default).");
  m.def(
      "capture_state",
      []() {
        const capture::State s = capture::state();
        py::dict d;
        d["tool_id"] = capture::tool_id();
        d["eval_installed"] = s.eval_installed;
        d["window_threads"] = s.window_threads;
        d["global_frames"] = s.global_frames;
        d["stepped_aside"] = s.stepped_aside;
        return d;
      },
      "How frames are being captured now: the sys.monitoring tool id held (-1: none), whether the "
      "frame evaluation function is installed and for how many threads, whether sys.monitoring "
      "reports every frame, and whether the C stack guard stepped aside.");
  m.def("hook_event_count", &capture::event_count,
        "Interpreter events delivered to the capture hook so far in this process (tests: frames "
        "below the ceiling deliver none on 3.11+).");
  m.def(
      "_reference_collecting", [](int delta) { g_reference_collecting += delta; },
      "Counts collecting reference sessions, so the C wrappers look for them.");
  m.def("_native_collecting", []() { return g_native_collecting; });
  m.def(
      "collecting", []() { return (g_native_collecting | g_reference_collecting) != 0; },
      "Whether a session of either engine is collecting in this process (a cheap check before work "
      "that only a session needs).");
  m.def("unwatch_loops", &loop_watch::unwatch,
        "Puts the selectors' own select back, unless a session collects (they stay wrapped "
        "after sessions otherwise: loop_watch.cpp).");
  m.def(
      "_untraced",
      [](const py::object& fn) {
        compat::Untraced untraced(compat::tstate());
        return fn();
      },
      py::arg("fn"),
      "fn() with no session, profiler or tracer seeing its frames (the profiler's own imports).");
  {
    PyObject* fn = PyCFunction_NewEx(&g_usdt_attached_def, nullptr, m.attr("__name__").ptr());
    if (!fn || PyModule_AddObject(m.ptr(), "usdt_attached", fn) < 0) {
      Py_XDECREF(fn);
      throw py::error_already_set();
    }
  }

  py::class_<Engine> engine_class(m, "Engine");
  def_engine_init<Engine>(engine_class)
      .def(
          "start",
          [](Engine& e, py::object session, int levels_above) {
            if (!start_engine(e, session.ptr(), levels_above)) throw py::error_already_set();
          },
          py::arg("session"), py::arg("levels_above") = 1)
      .def(
          "stop",
          [](Engine& e) {
            e.stop();
            return !e.failures().empty() || !e.notes().empty();
          },
          "Ends capture. True when there are failures or notes to log (reading them costs a call "
          "each).")
      .def(
          "_mark_autoprofile",
          [](Engine& e, const py::object& site) {
            probes::mark_autoprofile(e.serial());
            if (!site.is_none()) e.set_site(reinterpret_cast<uintptr_t>(site.ptr()));
          },
          py::arg("site") = py::none(),
          "Flags this session AUTOPROFILE in its session_begin probe and, given one, names its "
          "site by an object (the model's class: sessions of one site share their choice of "
          "mechanism) (call before start).")
      .def("pause", &Engine::pause,
           "Stops being the current session in this context; capture goes on.")
      .def("resume", &Engine::resume, "Becomes the current session in this context again.")
      .def_property_readonly("state",
                             [](const Engine& e) {
                               switch (e.state()) {
                                 case Engine::State::kIdle:
                                   return "idle";
                                 case Engine::State::kCollecting:
                                   return "collecting";
                                 default:
                                   return "finalized";
                               }
                             })
      .def_property_readonly("hook", &Engine::hook_name)
      .def_property_readonly("failures", &Engine::failures)
      .def_property_readonly("notes", &Engine::notes)
      .def_property_readonly("start_ns", &Engine::start_ns)
      .def_property_readonly("end_ns", &Engine::end_ns)
      .def("profile", &Engine::profile);
  bind_session(m);

  py::class_<Profile, std::shared_ptr<Profile>>(m, "Profile")
      .def(
          "render_text",
          [](const ProfilePtr& p, int depth, bool collapse, std::vector<std::string> user_modules,
             bool show_c_calls, bool show_io) {
            return render_text(
                *p, view_options(depth, collapse, std::move(user_modules), show_c_calls, show_io));
          },
          py::arg("depth") = -1, py::arg("collapse_frameworks") = false,
          py::arg("user_modules") = std::vector<std::string>{}, py::arg("show_c_calls") = false,
          py::arg("show_io") = false)
      .def(
          "to_json",
          [](const ProfilePtr& p, int depth) {
            ViewOptions o;
            o.depth = depth;
            o.show_c_calls = true;
            return to_json_document(*p, o);
          },
          py::arg("depth") = -1)
      .def(
          "to_flat",
          [](const ProfilePtr& p, int depth, bool collapse, std::vector<std::string> user_modules,
             bool show_c_calls) {
            return to_flat(p, view_options(depth, collapse, std::move(user_modules), show_c_calls));
          },
          py::arg("depth") = -1, py::arg("collapse_frameworks") = false,
          py::arg("user_modules") = std::vector<std::string>{}, py::arg("show_c_calls") = true)
      .def(
          "to_tree",
          [](const ProfilePtr& p, int depth, bool collapse, std::vector<std::string> user_modules,
             bool show_c_calls) {
            return to_tree(p, view_options(depth, collapse, std::move(user_modules), show_c_calls));
          },
          py::arg("depth") = -1, py::arg("collapse_frameworks") = false,
          py::arg("user_modules") = std::vector<std::string>{}, py::arg("show_c_calls") = true)
      .def("span_rows", &span_rows, "One dict per span: SpanRecord's fields by name, and io rows.")
      .def(
          "io_of", [](const ProfilePtr& p, int32_t span) { return span_io(*p, span); },
          py::arg("span"),
          "(role, name, IOSummary) rows of a span's I/O; role 0 argument, 1 return.")
      .def_property_readonly("captured_depth", [](const Profile& p) { return p.captured_depth; })
      .def_property_readonly("max_depth", &Profile::max_depth)
      .def_property_readonly("start_ns", [](const Profile& p) { return p.start_ns; })
      .def_property_readonly("end_ns", [](const Profile& p) { return p.end_ns; })
      .def_property_readonly("span_count", [](const Profile& p) { return p.spans.size(); })
      .def_property_readonly("meta", [](const Profile& p) { return p.meta; })
      .def_property_readonly("threads", &lanes_info)
      .def_property_readonly("traces", &traces_info)
      .def(
          "set_meta",
          [](Profile& p, const std::string& key, const std::string& value) { p.meta[key] = value; },
          py::arg("key"), py::arg("value"),
          "Sets one provenance entry (written to the document's meta).")
      .def_property_readonly("stats", [](const Profile& p) {
        py::dict d;
        d["events_captured"] = p.stats.events_captured;
        d["events_skipped"] = p.stats.events_skipped;
        d["unmatched_returns"] = p.stats.unmatched_returns;
        return d;
      });

  m.def("build_profile", &build_from_python, py::arg("lanes"), py::arg("functions"),
        py::arg("labels"), py::arg("depth"), py::arg("start_ns"), py::arg("end_ns"),
        py::arg("skipped"), py::arg("meta"),
        "Builds a Profile from events recorded by the pure-Python reference engine. A lane's\n"
        "optional `overhead` ((from_ns, to_ns) of the profiler's own work) is cut from its\n"
        "thread's events and off-CPU time; `cpu_reads` ((ns, thread CPU ns)) give the\n"
        "off-CPU time, as the native engine's build does.");

  bind_io(m);
  bind_files(m);
  bind_path_stats(m);
  bind_run_values(m);
  bind_edit(m);
  bind_store(m);
  bind_store_sql(m);
  bind_analysis(m);
  bind_trend(m);
  bind_function_stats(m);
}
