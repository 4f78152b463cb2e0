// The report's constants, its text formatting (the same text as
// render_text.cpp) and the reading of the embedded profile document into
// typed arrays (P). Part of report.js's one function scope (see there).

  const ROW_H = 18;        // flame chart row height (CSS px)
  const TRACK_TITLE_H = 18;
  const AXIS_H = 22;
  const TREE_ROW_H = 20;   // keep in step with --row-h in report.css
  const TREE_OVERSCAN = 12;
  const SMALL_PROFILE = 2000;  // spans: expand the whole tree at first

  // ---- function kinds: THE ONE TABLE of them in the report ---------------
  // KIND_NAMES[k] names FunctionKind k (model/functions.h: kPython 0, kC 1,
  // kBlock 2), the document's function "kind" (docs/format.md). Keep it in
  // step with the core's kinds; a test compares this table with _core's.
  const KIND_NAMES = ["Python function", "C function", "profile_block region"];

  const timings = {};
  const t_start = performance.now();
  const $ = (id) => document.getElementById(id);

  // Span flags: [bit, name, words], written by the C++ core from its one
  // table (model/tree.h kSpanFlagNames; docs/format.md).
  const FLAGS = readJson("mlprof-extras").flags || [];
  const flagBit = (name) => { const f = FLAGS.find((x) => x[1] === name); return f ? f[0] : 0; };
  const F_EXCEPTION = flagBit("exception"), F_OPEN = flagBit("open_at_end"),
    F_SUSPENDED = flagBit("suspended_at_end"), F_C = flagBit("c_function"),
    F_GENERATOR = flagBit("generator"), F_CAUGHT = flagBit("caught"), F_GROUP = flagBit("group");
  const FLAG_NAMES = FLAGS.map(([bit, , words]) => [bit, words]);
  // I/O roles (model/summary.h IORole), written by the core too.
  const ROLES = readJson("mlprof-extras").io_roles || {};
  const ROLE_ARGUMENT = ROLES.argument, ROLE_RETURN = ROLES["return"];

  // A failure shows on the page as well as in the console.
  window.addEventListener("error", (ev) => {
    const box = $("error");
    box.hidden = false;
    box.textContent = "The report could not be shown: " + (ev.error ? ev.error.message : ev.message);
  });

  // ---- formatting (the same text as render_text.cpp) ----------------------

  // printf("%.2f") of x: toFixed agrees except on exact binary ties
  // (x = m/8, m odd), which printf rounds to even and toFixed away from zero.
  function fixed2(x) {
    const neg = x < 0;
    const a = Math.abs(x);
    const e8 = a * 8;  // exact: scaling by a power of two
    if (Number.isInteger(e8) && e8 % 2 === 1) {
      let n = Math.floor(a * 100);
      if (n % 2 === 1) n += 1;
      const s = Math.floor(n / 100) + "." + String(n % 100).padStart(2, "0");
      return neg ? "-" + s : s;
    }
    return x.toFixed(2);
  }
  // format_duration: "48.12ms", "4.20us".
  function fmtDur(ns) {
    if (ns >= 10000 || ns <= -10000) return fixed2(ns / 1e6) + "ms";
    return fixed2(ns / 1e3) + "us";
  }
  function fmtPct(part, whole) {
    if (!(whole > 0)) return "";
    return (100 * part / whole).toFixed(1) + "%";
  }
  function plural(n, one, many) { return n + " " + (n === 1 ? one : many); }
  // format_bytes (model/summary.cpp): "812B", "9.5MB", 1024-based.
  function fmtBytes(b) {
    if (b < 1024) return b + "B";
    const units = ["KB", "MB", "GB", "TB", "PB"];
    let v = b / 1024, u = 0;
    while (v >= 1024 && u + 1 < units.length) { v /= 1024; u++; }
    return v.toFixed(1) + units[u];
  }

  // ---- data ---------------------------------------------------------------

  function readJson(id) {
    const el = $(id);
    if (!el) throw new Error("the report has no #" + id + " block");
    return JSON.parse(el.textContent);
  }

  // The profile as typed arrays; the parsed document's row arrays are dropped
  // once copied (a million small arrays cost far more memory than columns).
  function loadProfile() {
    const doc = readJson("mlprof-doc");
    const extras = readJson("mlprof-extras");
    timings.parse_ms = performance.now() - t_start;
    const meta = doc.meta || {};
    if (meta.format !== "mlflow-profiler") throw new Error("not an mlflow-profiler document");
    if (!(meta.version >= 1 && meta.version <= 2)) {
      throw new Error("document version " + meta.version + " is newer than this report can show");
    }
    const t0 = meta.start_ns;
    const strings = doc.strings;
    const fnRows = doc.functions;
    const rows = doc.spans;
    const n = rows.length;
    const P = {
      meta, stats: doc.stats || {}, strings, lanes: doc.lanes || [], extras, n,
      fnName: new Int32Array(fnRows.length), fnModule: new Int32Array(fnRows.length),
      fnFile: new Int32Array(fnRows.length), fnLine: new Int32Array(fnRows.length),
      fnKind: new Uint8Array(fnRows.length), fnUser: new Uint8Array(fnRows.length),
      parent: new Int32Array(n), func: new Int32Array(n), nameId: new Int32Array(n),
      lane: new Int32Array(n), depth: new Int32Array(n), flags: new Int32Array(n),
      start: new Float64Array(n), end: new Float64Array(n), active: new Float64Array(n),
      resumes: new Int32Array(n),
      duration: meta.duration_ns || 0,
    };
    for (let f = 0; f < fnRows.length; f++) {
      const r = fnRows[f];
      P.fnName[f] = r[0]; P.fnModule[f] = r[1]; P.fnFile[f] = r[2]; P.fnLine[f] = r[3];
      P.fnKind[f] = r[4]; P.fnUser[f] = r[5];
    }
    let maxEnd = P.duration;
    for (let i = 0; i < n; i++) {
      const r = rows[i];
      P.parent[i] = r[0]; P.func[i] = r[1]; P.lane[i] = r[3]; P.depth[i] = r[4];
      P.flags[i] = r[5];
      // Relative to the session start: exact while CLOCK_MONOTONIC < 2^53 ns.
      P.start[i] = r[6] - t0; P.end[i] = r[7] - t0; P.active[i] = r[8]; P.resumes[i] = r[9];
      P.nameId[i] = r[2] !== 0 ? r[2] : (r[1] < fnRows.length ? P.fnName[r[1]] : 0);
      if (P.end[i] > maxEnd) maxEnd = P.end[i];
    }
    P.span_end_max = maxEnd;
    // Running vs waiting (docs/format.md, optional): of each span's wall time,
    // what it waited; a document written before it knows the suspended time.
    const waitCol = (doc.span_fields || []).indexOf("waiting_ns");
    P.waiting = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      P.waiting[i] = waitCol >= 0 ? rows[i][waitCol] : Math.max(0, P.end[i] - P.start[i] - P.active[i]);
    }
    doc.spans = null;
    // Values measured in process (cpu_time, alloc_bytes; docs/format.md): NaN when not taken.
    P.cpu = new Float64Array(n).fill(NaN);
    P.alloc = new Float64Array(n).fill(NaN);
    if (!doc.kernel) {
      for (const [span, type, , value] of doc.span_values || []) {
        if (span < 0 || span >= n) continue;
        if (type === "cpu") P.cpu[span] = value;
        else if (type === "alloc") P.alloc[span] = value;
      }
    }
    // Segments and I/O come sorted by span: per span, [first, first + count).
    const segs = doc.segments || [];
    P.segSpan = new Int32Array(segs.length);
    P.segStart = new Float64Array(segs.length);
    P.segEnd = new Float64Array(segs.length);
    // A coalesced segment's pauses (model/resume.h): the "paused_ns" column.
    const pausedCol = (doc.segment_fields || []).indexOf("paused_ns");
    P.segPaused = new Float64Array(segs.length);
    const resumesCol = (doc.segment_fields || []).indexOf("resumes");
    P.segResumes = new Int32Array(segs.length);
    P.segFirst = new Int32Array(n).fill(-1);
    P.segCount = new Int32Array(n);
    for (let k = 0; k < segs.length; k++) {
      const s = segs[k][0];
      P.segSpan[k] = s; P.segStart[k] = segs[k][1] - t0; P.segEnd[k] = segs[k][2] - t0;
      if (pausedCol >= 0) P.segPaused[k] = segs[k][pausedCol] || 0;
      if (resumesCol >= 0) P.segResumes[k] = segs[k][resumesCol] || 0;
      if (s >= 0 && s < n) { if (P.segFirst[s] < 0) P.segFirst[s] = k; P.segCount[s]++; }
    }
    P.io = doc.io || [];
    P.ioText = extras.io_text || [];
    P.ioFirst = new Int32Array(n).fill(-1);
    P.ioCount = new Int32Array(n);
    for (let k = 0; k < P.io.length; k++) {
      const s = P.io[k][0];
      if (s >= 0 && s < n) { if (P.ioFirst[s] < 0) P.ioFirst[s] = k; P.ioCount[s]++; }
    }
    P.hasC = false;
    for (let i = 0; i < n; i++) if (P.flags[i] & F_C) { P.hasC = true; break; }
    // Resources (model/resources.h) and idle gaps (analysis/bubbles.h), computed
    // by the core: the page only moves them to the chart's time.
    P.resources = (extras.resources || []).map((r) => ({
      name: r.name, slots: r.slots, peakQueued: r.peak_queued,
      calls: r.calls.map(([span, slot, s, e, q]) => ({ span, slot, start: s - t0, end: e - t0, queuedFrom: q - t0 })),
      ts: Float64Array.from(r.samples, (x) => x[0] - t0),
      inFlight: Int32Array.from(r.samples, (x) => x[1]),
      queued: Int32Array.from(r.samples, (x) => x[2]),
      marks: (r.marks || []).map(([ts, name]) => ({ t: ts - t0, name })),
    }));
    // Per span, its call to a resource (a span is at most one call): [resource, call].
    P.callOf = new Map();
    P.resources.forEach((r, ri) => r.calls.forEach((c, k) => P.callOf.set(c.span, [ri, k])));
    P.bubbles = (extras.bubbles || []).map(([s, e]) => [s - t0, e - t0]);
    P.bubbleWaitData = extras.bubble_wait_data !== false;
    return P;
  }

  const P = loadProfile();
  const name = (i) => P.strings[P.nameId[i]] || "?";
  const laneTitle = (l) => (P.extras.lane_titles && P.extras.lane_titles[l]) || ("lane " + l);
