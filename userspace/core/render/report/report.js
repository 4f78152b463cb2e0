// The mlflow-profiler HTML report. Reads the profile document embedded in
// the JSON block with id "mlprof-doc" (docs/format.md) and the
// text the C++ core formatted for it (id="mlprof-extras"), and draws a header,
// a flame chart (canvas), a call tree (virtualized rows) and a detail panel.
//
// Constraints (docs/report.md): it runs inside a sandboxed iframe with only
// "allow-scripts", so no network, no storage, no cookies; user text (names,
// reprs) only ever goes through textContent, never innerHTML; and it stays
// responsive on a million spans, so every per-span structure is a typed
// array, the tree only creates the rows on screen, and the chart skips spans
// narrower than a pixel by binary search instead of visiting them.
"use strict";

(function () {
  const ROW_H = 18;        // flame chart row height (CSS px)
  const TRACK_TITLE_H = 18;
  const AXIS_H = 22;
  const TREE_ROW_H = 20;   // keep in step with --row-h in report.css
  const TREE_OVERSCAN = 12;
  const SMALL_PROFILE = 2000;  // spans: expand the whole tree at first

  const KIND_NAMES = ["Python function", "C function", "profile_block region"];

  const timings = {};
  const t_start = performance.now();
  const $ = (id) => document.getElementById(id);

  // Span flags: [bit, name, words], written by the C++ core from its one
  // table (core/tree.h kSpanFlagNames; docs/format.md).
  const FLAGS = readJson("mlprof-extras").flags || [];
  const flagBit = (name) => { const f = FLAGS.find((x) => x[1] === name); return f ? f[0] : 0; };
  const F_EXCEPTION = flagBit("exception"), F_OPEN = flagBit("open_at_end"),
    F_SUSPENDED = flagBit("suspended_at_end"), F_C = flagBit("c_function"),
    F_GENERATOR = flagBit("generator"), F_CAUGHT = flagBit("caught"), F_GROUP = flagBit("group");
  const FLAG_NAMES = FLAGS.map(([bit, , words]) => [bit, words]);
  // I/O roles (core/io.h IORole), written by the core too.
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
  // format_bytes (core/io.cpp): "812B", "9.5MB", 1024-based.
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
    // A coalesced segment's pauses (core/resume.h): the "paused_ns" column.
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
    // Resources (core/resources.h) and idle gaps (core/bubbles.h), computed
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

  // ---- the view: C calls folded or not, depth limit ---------------------

  // Mirrors make_view (view.cpp): folded C spans are replaced by their
  // visible descendants, and depth counts in the view.
  const V = {
    showC: false, depthLimit: -1, showIO: true,
    visible: new Uint8Array(P.n),     // in the view at the current depth limit
    vParent: new Int32Array(P.n), vDepth: new Int32Array(P.n),
    childStart: null, childList: null, roots: [], maxDepth: 0,
    selfNs: new Float64Array(P.n), shown: new Float64Array(P.n), wait: new Float64Array(P.n),
  };

  function buildView() {
    const n = P.n;
    const folded = (i) => !V.showC && (P.flags[i] & F_C) !== 0;
    let maxDepth = 0;
    // Parents come before children in the document, so one pass suffices.
    for (let i = 0; i < n; i++) {
      let p = P.parent[i];
      if (p >= 0 && folded(p)) p = V.vParent[p];  // vParent of a folded span: its visible ancestor
      V.vParent[i] = p;
      if (folded(i)) { V.vDepth[i] = p >= 0 ? V.vDepth[p] : -1; V.visible[i] = 0; continue; }
      const d = p >= 0 ? V.vDepth[p] + 1 : 0;
      V.vDepth[i] = d;
      if (d > maxDepth) maxDepth = d;
    }
    V.maxDepth = maxDepth;
    const limit = V.depthLimit;
    const count = new Int32Array(n + 1);
    const roots = [];
    for (let i = 0; i < n; i++) {
      const vis = !folded(i) && (limit < 0 || V.vDepth[i] <= limit);
      V.visible[i] = vis ? 1 : 0;
      if (!vis) continue;
      if (V.vParent[i] >= 0) count[V.vParent[i]]++; else roots.push(i);
    }
    // Children in CSR form, in start order (a lane adopted under a span of
    // another lane comes later in the document but may start earlier).
    const childStart = new Int32Array(n + 1);
    for (let i = 0; i < n; i++) childStart[i + 1] = childStart[i] + count[i];
    const fill = childStart.slice(0, n);
    const childList = new Int32Array(childStart[n]);
    for (let i = 0; i < n; i++) {
      if (V.visible[i] && V.vParent[i] >= 0) childList[fill[V.vParent[i]]++] = i;
    }
    const byStart = (a, b) => (P.start[a] - P.start[b]) || (a - b);
    for (let p = 0; p < n; p++) {
      const a = childStart[p], b = childStart[p + 1];
      for (let k = a + 1; k < b; k++) {
        if (P.start[childList[k]] < P.start[childList[k - 1]]) {
          childList.subarray(a, b).sort(byStart);
          break;
        }
      }
    }
    roots.sort(byStart);
    V.childStart = childStart; V.childList = childList; V.roots = roots;
    // Over all siblings, shown or cut by the depth: self times need them all.
    const sets = new Map();
    for (let i = 0; i < n; i++) {
      if (folded(i)) continue;
      const set = sets.get(V.vParent[i]);
      if (set) set.push(i); else sets.set(V.vParent[i], [i]);
    }
    for (const set of sets.values()) shownTimes(set);
    // Self time: the span's running time (not waiting) less its children's
    // in the same lane (threads under it ran concurrently, not inside it).
    const own = (i) => V.shown[i] - V.wait[i];
    const selfNs = V.selfNs;
    for (let i = 0; i < n; i++) selfNs[i] = own(i);
    for (let i = 0; i < n; i++) {
      const p = V.vParent[i];
      if (folded(i) || p < 0 || P.lane[p] !== P.lane[i]) continue;
      selfNs[p] -= own(i);
    }
    for (let i = 0; i < n; i++) if (selfNs[i] < 0) selfNs[i] = 0;
  }

  // Whether suspended span i stands for its wall time under p (core/view.cpp
  // in_flight): on another lane, or awaited by p (p ran in none of its pauses).
  function inFlight(i, p) {
    if (P.lane[i] !== P.lane[p]) return true;
    if (!(P.flags[p] & F_GENERATOR)) return false;
    const first = P.segFirst[i], count = P.segCount[i];
    if (first < 0 || count === 0) return false;
    for (let k = first; k < first + count; k++) if (P.segResumes[k] > 0) return false;
    let q = P.segFirst[p];
    const qEnd = q < 0 ? q : q + P.segCount[p];
    for (let k = first; k + 1 < first + count; k++) {
      const a = P.segEnd[k], b = P.segStart[k + 1];  // a pause
      while (q < qEnd && P.segEnd[q] <= a) q++;
      if (q < qEnd && P.segStart[q] < b) return false;
    }
    return true;
  }

  // The time a node stands for, as print_tree shows it (core/view.h): a
  // span's wall time; a generator's running segments, less those that ran
  // inside a sibling (its wall time overlaps its consumer's other calls),
  // unless it was in flight. Then the waiting part of it.
  function shownTimes(sib) {
    const busy = [];
    const p = V.vParent[sib[0]];
    for (const i of sib) {
      V.shown[i] = P.end[i] - P.start[i];
      V.wait[i] = P.waiting[i];
      if (!(P.flags[i] & F_GENERATOR) && P.lane[i] === P.lane[sib[0]]) busy.push(i);
    }
    busy.sort((a, b) => P.start[a] - P.start[b]);
    for (const i of sib) {
      if (!(P.flags[i] & F_GENERATOR)) continue;
      if (p >= 0 && inFlight(i, p)) continue;
      const off = Math.max(0, P.waiting[i] - (P.end[i] - P.start[i] - P.active[i]));
      const first = P.segFirst[i], count = P.segCount[i];
      if (first < 0 || count === 0) { V.shown[i] = P.active[i]; V.wait[i] = Math.min(off, V.shown[i]); continue; }
      let total = 0;
      for (let k = first; k < first + count; k++) {
        const a = P.segStart[k], b = P.segEnd[k];
        let len = b - a - P.segPaused[k];  // a sibling holds a coalesced segment whole or not at all
        let lo = 0, hi = busy.length;  // the last busy sibling starting at or before a
        while (lo < hi) { const mid = (lo + hi) >> 1; if (P.start[busy[mid]] <= a) lo = mid + 1; else hi = mid; }
        for (let j = Math.max(0, lo - 1); j < busy.length && P.start[busy[j]] < b; j++) {
          len -= Math.max(0, Math.min(P.end[busy[j]], b) - Math.max(P.start[busy[j]], a));
        }
        total += Math.max(0, len);
      }
      V.shown[i] = total;
      V.wait[i] = Math.min(off, total);
    }
  }

  function childrenOf(i) { return V.childList.subarray(V.childStart[i], V.childStart[i + 1]); }
  function hasChildren(i) { return V.childStart[i + 1] > V.childStart[i]; }
  function viewParentDuration(i) {
    const p = V.vParent[i];
    return p >= 0 ? V.shown[p] : 0;
  }
  // Share of the parent's time: a generator counts its running time, not
  // the wall time it spent suspended across its consumer's other calls.
  function parentPct(i) {
    const pd = viewParentDuration(i);
    // A thread or task under a span ran beside it, not inside its time.
    if (!(pd > 0) || P.lane[V.vParent[i]] !== P.lane[i]) return "";
    return fmtPct(V.shown[i], pd);
  }

  // ---- search -------------------------------------------------------------

  const S = {
    query: "", match: new Uint8Array(P.n), list: new Int32Array(0), cursor: -1, hidden: 0,
  };

  // Names are interned strings: test each string once, then spans by id.
  function runSearch(query) {
    const t = performance.now();
    S.query = query;
    S.match.fill(0);
    S.cursor = -1;
    S.hidden = 0;
    if (!query) { S.list = new Int32Array(0); return performance.now() - t; }
    const q = query.toLowerCase();
    const strMatch = new Uint8Array(P.strings.length);
    for (let k = 0; k < P.strings.length; k++) {
      if (P.strings[k].toLowerCase().indexOf(q) >= 0) strMatch[k] = 1;
    }
    let count = 0;
    for (let i = 0; i < P.n; i++) {
      if (!strMatch[P.nameId[i]]) continue;
      if (V.visible[i]) { S.match[i] = 1; count++; } else if (!(P.flags[i] & F_C) || V.showC) S.hidden++;
    }
    const list = new Int32Array(count);
    for (let i = 0, k = 0; i < P.n; i++) if (S.match[i]) list[k++] = i;
    S.list = list;
    // Open the tree along every path to a match (each ancestor once).
    for (let k = 0; k < list.length; k++) {
      for (let p = V.vParent[list[k]]; p >= 0 && !T.expanded[p]; p = V.vParent[p]) T.expanded[p] = 1;
    }
    return performance.now() - t;
  }

  // ---- the call tree (virtualized) -----------------------------------------

  const ROW_NODE = 0, ROW_IO = 1, ROW_LANE = 2, ROW_NOTE = 3;
  const T = {
    expanded: new Uint8Array(P.n), kind: new Uint8Array(0), ref: new Int32Array(0), count: 0,
    selected: -1, el: $("tree"), spacer: $("tree-spacer"),
  };

  function laneGroups() {
    // Roots grouped by lane, lanes in order, as render_text does.
    const groups = new Map();
    for (const r of V.roots) {
      const l = P.lane[r];
      if (!groups.has(l)) groups.set(l, []);
      groups.get(l).push(r);
    }
    return [...groups.entries()].sort((a, b) => a[0] - b[0]);
  }

  // Flattens the expanded part of the tree into rows (kind, ref).
  function buildRows() {
    let kind = new Uint8Array(1024), ref = new Int32Array(1024), count = 0;
    const push = (k, r) => {
      if (count === kind.length) {
        const k2 = new Uint8Array(kind.length * 2); k2.set(kind); kind = k2;
        const r2 = new Int32Array(ref.length * 2); r2.set(ref); ref = r2;
      }
      kind[count] = k; ref[count] = r; count++;
    };
    const groups = laneGroups();
    const stack = [];
    for (const [lane, roots] of groups) {
      if (groups.length > 1) push(ROW_LANE, lane);
      for (let k = roots.length - 1; k >= 0; k--) stack.push(roots[k]);
      while (stack.length) {
        const i = stack.pop();
        push(ROW_NODE, i);
        if (V.showIO) for (let k = 0; k < P.ioCount[i]; k++) push(ROW_IO, P.ioFirst[i] + k);
        if (T.expanded[i]) {
          const ch = childrenOf(i);
          for (let k = ch.length - 1; k >= 0; k--) stack.push(ch[k]);
        }
      }
    }
    if (P.n === 0) push(ROW_NOTE, 0);
    T.kind = kind; T.ref = ref; T.count = count;
    T.spacer.style.height = count * TREE_ROW_H + "px";
    renderTreeRows(true);
  }

  // Text with the search query marked, built from text nodes only.
  function appendMarked(parent, text) {
    const q = S.query.toLowerCase();
    if (!q) { parent.appendChild(document.createTextNode(text)); return; }
    const low = text.toLowerCase();
    let from = 0;
    for (let at = low.indexOf(q); at >= 0; at = low.indexOf(q, from)) {
      if (at > from) parent.appendChild(document.createTextNode(text.slice(from, at)));
      const m = document.createElement("mark");
      m.textContent = text.slice(at, at + q.length);
      parent.appendChild(m);
      from = at + q.length;
    }
    if (from < text.length) parent.appendChild(document.createTextNode(text.slice(from)));
  }

  function span(cls, text) {
    const el = document.createElement("span");
    el.className = cls;
    el.textContent = text;
    return el;
  }

  // The annotations print_tree puts after a node's time.
  function nodeNotes(i) {
    const f = P.flags[i];
    let s = "";
    if ((f & F_EXCEPTION) && !(f & F_CAUGHT)) s += " [exception]";
    if (f & F_OPEN) s += " [open]";
    if (f & F_SUSPENDED) s += " [suspended]";
    if ((f & F_GENERATOR) && V.shown[i] !== P.end[i] - P.start[i]) {
      s += " (generator, " + P.resumes[i] + (P.resumes[i] === 1 ? " resume, " : " resumes, ") +
        fmtDur(P.end[i] - P.start[i]) + " wall)";
    }
    return s;
  }

  // print_tree's I/O lines: one argument bare (spec 000 section 4),
  // several named.
  function ioLine(k) {
    const row = P.io[k];
    const text = P.ioText[k] || "";
    if (row[1] === ROLE_RETURN) return "out: " + text;
    const s = row[0];
    let args = 0;
    for (let j = P.ioFirst[s], e = j + P.ioCount[s]; j < e; j++) if (P.io[j][1] === ROLE_ARGUMENT) args++;
    return "in:  " + (args > 1 ? row[2] + "=" : "") + text;
  }

  // Rows on screen, by row number. Scrolling keeps the ones still in range
  // (no flicker, no lost hover) and creates only the new ones; a rebuild of
  // the row list (force) recreates them all.
  const shown = new Map();
  let lastFirst = -1, lastLast = -1;
  function renderTreeRows(force) {
    const el = T.el;
    const first = Math.max(0, Math.floor(el.scrollTop / TREE_ROW_H) - TREE_OVERSCAN);
    const last = Math.min(T.count, Math.ceil((el.scrollTop + el.clientHeight) / TREE_ROW_H) + TREE_OVERSCAN);
    if (!force && first === lastFirst && last === lastLast) return;
    lastFirst = first; lastLast = last;
    for (const [r, row] of shown) {
      if (force || r < first || r >= last) { row.remove(); shown.delete(r); }
    }
    const frag = document.createDocumentFragment();
    for (let r = first; r < last; r++) {
      if (shown.has(r)) continue;
      const row = makeRow(r);
      shown.set(r, row);
      frag.appendChild(row);
    }
    el.appendChild(frag);
  }

  function makeRow(r) {
    const div = document.createElement("div");
    div.className = "row";
    div.style.top = r * TREE_ROW_H + "px";
    div.dataset.row = r;
    const kind = T.kind[r], ref = T.ref[r];
    if (kind === ROW_LANE) {
      div.className += " lane";
      div.textContent = laneTitle(ref);
      return div;
    }
    if (kind === ROW_NOTE) {
      div.textContent = "(no spans captured)";
      return div;
    }
    if (kind === ROW_IO) {
      const s = P.io[ref][0];
      div.className += " io";
      div.style.paddingLeft = (V.vDepth[s] * 1.4 + 2.8) + "em";
      div.textContent = ioLine(ref);
      div.dataset.span = s;
      return div;
    }
    const i = ref;
    div.setAttribute("role", "treeitem");
    div.setAttribute("aria-level", V.vDepth[i] + 1);
    div.dataset.span = i;
    div.style.paddingLeft = (V.vDepth[i] * 1.4) + "em";
    if (S.match[i]) div.className += " match";
    if (i === T.selected) div.className += " selected";
    const tog = span("toggle", hasChildren(i) ? (T.expanded[i] ? "\u25be" : "\u25b8") : "");
    if (hasChildren(i)) div.setAttribute("aria-expanded", T.expanded[i] ? "true" : "false");
    div.appendChild(tog);
    const nm = document.createElement("span");
    nm.className = "name";
    appendMarked(nm, name(i));
    div.appendChild(nm);
    // "name: 48.12ms" as print_tree writes it; the margins are CSS, the text
    // copies as it reads.
    div.appendChild(document.createTextNode(": "));
    div.appendChild(span("time", fmtDur(V.shown[i])));
    // ", waiting 243.12ms" past the clocks' jitter and 1% (render_text.cpp).
    if (V.wait[i] >= 1000 && V.wait[i] * 100 >= V.shown[i]) {
      div.appendChild(span("wait", ", waiting " + fmtDur(V.wait[i])));
    }
    const pct = parentPct(i);
    if (pct) div.appendChild(span("pct", " " + pct));
    const notes = nodeNotes(i);
    if (notes) div.appendChild(span("notes", notes));
    return div;
  }

  function toggleNode(i) {
    if (!hasChildren(i)) return;
    T.expanded[i] = T.expanded[i] ? 0 : 1;
    buildRows();
  }

  function rowOfSpan(i) {
    for (let r = 0; r < T.count; r++) if (T.kind[r] === ROW_NODE && T.ref[r] === i) return r;
    return -1;
  }

  // Selects a span: opens the tree down to it, scrolls it into view, shows
  // its details and outlines it in the chart.
  function selectSpan(i, scroll) {
    T.selected = i;
    if (i >= 0) {
      let opened = false;
      for (let p = V.vParent[i]; p >= 0; p = V.vParent[p]) if (!T.expanded[p]) { T.expanded[p] = 1; opened = true; }
      if (opened) buildRows();
      if (scroll) {
        const r = rowOfSpan(i);
        const el = T.el;
        if (r >= 0 && (r * TREE_ROW_H < el.scrollTop || (r + 1) * TREE_ROW_H > el.scrollTop + el.clientHeight)) {
          el.scrollTop = Math.max(0, r * TREE_ROW_H - el.clientHeight / 3);
        }
      }
      showDetail(i);
    }
    renderTreeRows(true);
    drawChart();
  }

  T.el.addEventListener("scroll", () => renderTreeRows(false), { passive: true });
  // The rows on screen depend on the tree's height too (window resized, or
  // laid out after the script ran, as in a frame).
  if (window.ResizeObserver) new ResizeObserver(() => renderTreeRows(false)).observe(T.el);
  else window.addEventListener("resize", () => renderTreeRows(false));
  T.el.addEventListener("click", (ev) => {
    const row = ev.target.closest(".row");
    if (!row || row.dataset.span === undefined) return;
    const i = Number(row.dataset.span);
    if (ev.target.classList.contains("toggle") && !row.classList.contains("io")) {
      toggleNode(i);
      return;
    }
    selectSpan(i, false);
  });
  T.el.addEventListener("dblclick", (ev) => {
    const row = ev.target.closest(".row");
    if (!row || row.dataset.span === undefined || ev.target.classList.contains("toggle")) return;
    zoomToSpan(Number(row.dataset.span));
  });
  T.el.addEventListener("keydown", (ev) => {
    const i = T.selected;
    if (i < 0) return;
    let r = rowOfSpan(i);
    const step = (d) => {
      for (r += d; r >= 0 && r < T.count; r += d) if (T.kind[r] === ROW_NODE) return T.ref[r];
      return -1;
    };
    let next = -1;
    if (ev.key === "ArrowDown") next = step(1);
    else if (ev.key === "ArrowUp") next = step(-1);
    else if (ev.key === "ArrowRight" && hasChildren(i) && !T.expanded[i]) { toggleNode(i); }
    else if (ev.key === "ArrowLeft") {
      if (T.expanded[i] && hasChildren(i)) toggleNode(i); else next = V.vParent[i];
    } else if (ev.key === "Enter") zoomToSpan(i);
    else return;
    ev.preventDefault();
    if (next >= 0) selectSpan(next, true);
  });
  $("expand-all").addEventListener("click", () => {
    for (let i = 0; i < P.n; i++) if (V.visible[i] && hasChildren(i)) T.expanded[i] = 1;
    buildRows();
  });
  $("collapse-all").addEventListener("click", () => {
    T.expanded.fill(0);
    buildRows();
  });

  // ---- the detail panel ---------------------------------------------------

  function showDetail(i) {
    const d = $("detail");
    d.textContent = "";
    const h = document.createElement("h2");
    h.textContent = name(i);
    d.appendChild(h);
    const path = [];
    for (let p = i; p >= 0; p = P.parent[p]) path.push(name(p));
    const pathEl = document.createElement("div");
    pathEl.className = "path";
    pathEl.textContent = path.reverse().join(" / ");
    d.appendChild(pathEl);
    const table = document.createElement("table");
    const add = (k, v) => {
      const tr = document.createElement("tr");
      const th = document.createElement("th");
      th.textContent = k;
      const td = document.createElement("td");
      td.textContent = v;
      tr.appendChild(th); tr.appendChild(td);
      table.appendChild(tr);
    };
    const pct = parentPct(i);
    add("Time", fmtDur(V.shown[i]) + (pct ? "  (" + pct + " of parent)" : ""));
    add("Running", fmtDur(V.shown[i] - V.wait[i]));
    add("Waiting", fmtDur(V.wait[i]) + (P.waiting[i] !== V.wait[i] ? "  (" + fmtDur(P.waiting[i]) + " of its wall time)" : ""));
    add("Self time", fmtDur(V.selfNs[i]) + " running");
    if (!isNaN(P.cpu[i])) add("CPU time", fmtDur(P.cpu[i]));
    if (!isNaN(P.alloc[i])) add("Allocated", fmtBytes(P.alloc[i]));
    if (P.flags[i] & F_GENERATOR) {
      add("Active", fmtDur(P.active[i]) + ", " + plural(P.resumes[i], "resume", "resumes") +
        ", " + plural(P.segCount[i], "segment", "segments"));
    }
    add("Start", "+" + fmtDur(P.start[i]) + " into the session");
    const f = P.func[i];
    if (f < P.fnName.length) {
      const mod = P.strings[P.fnModule[f]];
      if (mod) add("Module", mod);
      const file = P.strings[P.fnFile[f]];
      if (file) add("File", file + (P.fnLine[f] > 0 ? ":" + P.fnLine[f] : ""));
      add("Kind", (KIND_NAMES[P.fnKind[f]] || "?") + (P.fnUser[f] ? ", user code" : ", library"));
      if (P.nameId[i] !== P.fnName[f]) add("Function", P.strings[P.fnName[f]]);
    }
    add("Thread", laneTitle(P.lane[i]));
    add("Depth", String(P.depth[i]));
    const flags = FLAG_NAMES.filter(([bit]) => P.flags[i] & bit).map(([, n]) => n);
    if (flags.length) add("Flags", flags.join(", "));
    d.appendChild(table);
    if (P.ioCount[i] > 0) {
      const pre = document.createElement("pre");
      const lines = [];
      for (let k = 0; k < P.ioCount[i]; k++) lines.push(ioLine(P.ioFirst[i] + k));
      pre.textContent = lines.join("\n");
      d.appendChild(pre);
    }
    const actions = document.createElement("div");
    actions.className = "actions";
    const zb = document.createElement("button");
    zb.type = "button";
    zb.textContent = "Zoom chart to this span";
    zb.addEventListener("click", () => zoomToSpan(i));
    actions.appendChild(zb);
    d.appendChild(actions);
  }

  // ---- the flame chart --------------------------------------------------

  // One track per lane; per (track, row) the rectangles to draw, sorted by
  // start, with a running maximum of their ends for binary search.
  const C = {
    canvas: $("chart"), scroll: $("chart-scroll"), spacer: $("chart-spacer"),
    tracks: [], res: [], v0: 0, v1: 1, back: [], width: 0, height: 0, hover: -1,
  };
  const COUNTER_H = 30;  // a resource's "in flight"/"queued" step chart
  const BUBBLE_FILL = "rgba(40, 90, 160, 0.11)";  // idle gaps, over everything

  // Items arrive in document order; generator segments can interleave, so
  // a row is sorted by start if it is not already. Then the running maximum
  // of the ends, which binary search needs.
  function finishRowItems(row) {
    let sorted = true;
    for (let k = 1; k < row.n; k++) if (row.start[k] < row.start[k - 1]) { sorted = false; break; }
    if (!sorted) {
      const order = Array.from({ length: row.n }, (_, k) => k);
      order.sort((a, b) => row.start[a] - row.start[b] || a - b);
      const s = row.start.slice(), e = row.end.slice(), sp = row.span.slice();
      for (let k = 0; k < row.n; k++) { row.start[k] = s[order[k]]; row.end[k] = e[order[k]]; row.span[k] = sp[order[k]]; }
      if (row.call) { const c = row.call.slice(); for (let k = 0; k < row.n; k++) row.call[k] = c[order[k]]; }
    }
    let m = -Infinity;
    for (let k = 0; k < row.n; k++) { if (row.end[k] > m) m = row.end[k]; row.maxEnd[k] = m; }
  }

  // The rectangles of span i: its segments if it is a generator (its wall
  // time overlaps its consumer's other calls), else its whole time.
  function forEachRect(i, fn) {
    if ((P.flags[i] & F_GENERATOR) && P.segCount[i] > 0) {
      for (let k = P.segFirst[i], e = k + P.segCount[i]; k < e; k++) fn(P.segStart[k], P.segEnd[k]);
    } else {
      fn(P.start[i], P.end[i]);
    }
  }

  // Tracks and their rows for the spans in view (and in `filter`, if given:
  // the search's matches). Every row's items live in three flat arrays,
  // each row a window on them: two passes over the spans, no per-span
  // allocation or closure, since this runs again on every search.
  function buildTracks(filter) {
    const n = P.n, nLanes = P.lanes.length;
    const lane = P.lane, vDepth = V.vDepth, visible = V.visible, flags = P.flags, segCount = P.segCount;
    const base = new Int32Array(nLanes).fill(1 << 30);
    const top = new Int32Array(nLanes).fill(-1);
    for (let i = 0; i < n; i++) {
      if (!visible[i]) continue;
      const l = lane[i];
      if (vDepth[i] < base[l]) base[l] = vDepth[i];
      if (vDepth[i] > top[l]) top[l] = vDepth[i];
    }
    // Rows numbered across tracks: lane l's row r is firstRow[l] + r.
    const tracks = [];
    const firstRow = new Int32Array(nLanes);
    let rows = 0;
    for (let l = 0; l < nLanes; l++) {
      if (top[l] < 0) continue;
      firstRow[l] = rows - base[l];
      tracks.push({ lane: l, base: base[l], rows: [] });
      rows += top[l] - base[l] + 1;
    }
    const counts = new Int32Array(rows + 1);
    let items = 0;
    for (let i = 0; i < n; i++) {
      if (!visible[i] || (filter && !filter[i])) continue;
      const c = (flags[i] & F_GENERATOR) && segCount[i] > 0 ? segCount[i] : 1;
      counts[firstRow[lane[i]] + vDepth[i]] += c;
      items += c;
    }
    const start = new Float64Array(items), end = new Float64Array(items);
    const maxEnd = new Float64Array(items), spanOf = new Int32Array(items);
    const fill = new Int32Array(rows);
    for (let r = 0, at = 0; r < rows; r++) { fill[r] = at; at += counts[r]; }
    const rowObjects = [];
    for (let r = 0; r < rows; r++) {
      const a = fill[r], b = a + counts[r];
      rowObjects.push({ n: counts[r], start: start.subarray(a, b), end: end.subarray(a, b),
        maxEnd: maxEnd.subarray(a, b), span: spanOf.subarray(a, b) });
    }
    for (let i = 0; i < n; i++) {
      if (!visible[i] || (filter && !filter[i])) continue;
      const r = firstRow[lane[i]] + vDepth[i];
      if ((flags[i] & F_GENERATOR) && segCount[i] > 0) {
        for (let k = P.segFirst[i], e = k + segCount[i]; k < e; k++) {
          const at = fill[r]++;
          start[at] = P.segStart[k]; end[at] = P.segEnd[k]; spanOf[at] = i;
        }
      } else {
        const at = fill[r]++;
        start[at] = P.start[i]; end[at] = P.end[i]; spanOf[at] = i;
      }
    }
    let r = 0;
    for (const t of tracks) {
      for (let k = top[t.lane] - t.base; k >= 0; k--) {
        const row = rowObjects[r++];
        finishRowItems(row);
        t.rows.push(row);
      }
    }
    return tracks;
  }

  // Per resource a track below the lanes': one row per slot, each call a
  // bar on the slot the core gave it (rows like a lane's, so drawRow and the
  // hit test serve both), then its counters. `filter`: the search's matches.
  function buildResourceTracks(filter) {
    return P.resources.map((r, ri) => {
      const rows = [];
      for (let slot = 1; slot <= r.slots; slot++) {
        const ks = [];
        r.calls.forEach((c, k) => { if (c.slot === slot && (!filter || filter[c.span])) ks.push(k); });
        const row = { n: ks.length, start: new Float64Array(ks.length), end: new Float64Array(ks.length),
          maxEnd: new Float64Array(ks.length), span: new Int32Array(ks.length), call: new Int32Array(ks.length) };
        ks.forEach((k, j) => {
          const c = r.calls[k];
          row.start[j] = c.start; row.end[j] = c.end; row.span[j] = c.span; row.call[j] = k;
        });
        finishRowItems(row);
        rows.push(row);
      }
      // The peaks are the core's: in flight peaks at the slots used.
      const counters = [{ label: "in flight (peak " + r.slots + ")", values: r.inFlight, peak: r.slots, color: "#6f9bd1" }];
      if (r.peakQueued > 0) {
        counters.push({ label: "queued (peak " + r.peakQueued + ")", values: r.queued, peak: r.peakQueued, color: "#d99a4e" });
      }
      return { res: ri, rows, counters };
    });
  }

  function layoutTracks() {
    let y = AXIS_H;
    for (const t of C.tracks) {
      t.y = y;
      y += TRACK_TITLE_H + t.rows.length * ROW_H + 4;
    }
    for (const t of C.res) {
      t.y = y;
      y += TRACK_TITLE_H + t.rows.length * ROW_H + t.counters.length * COUNTER_H + 4;
    }
    C.height = y;
    C.spacer.style.height = y + "px";
  }

  // First index whose value is >= x in a non-decreasing array.
  function lowerBound(arr, n, x) {
    let lo = 0, hi = n;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (arr[mid] < x) lo = mid + 1; else hi = mid;
    }
    return lo;
  }

  const hueCache = new Map();
  function colorOf(i) {
    const f = P.func[i];
    const key = f < P.fnModule.length ? P.fnModule[f] * 7919 + P.nameId[i] : P.nameId[i];
    let c = hueCache.get(key);
    if (c === undefined) {
      let h = 2166136261;
      const s = name(i);
      for (let k = 0; k < s.length; k++) { h ^= s.charCodeAt(k); h = Math.imul(h, 16777619); }
      const user = f < P.fnUser.length && P.fnUser[f];
      // User code in warm hues, libraries in cool ones, C calls grey-blue.
      const hue = (P.flags[i] & F_C) ? 210 : user ? 10 + ((h >>> 0) % 50) : 170 + ((h >>> 0) % 80);
      const light = 62 + ((h >>> 8) % 12);
      c = "hsl(" + hue + ",60%," + light + "%)";
      hueCache.set(key, c);
    }
    return c;
  }

  // Draws one row between times v0 and v1. A run of spans narrower than a
  // pixel becomes one 1px mark, and the loop jumps past that pixel by binary
  // search, so a row costs O(pixels * log n) however many spans it holds.
  function drawRow(ctx, row, y, scale, fill, labels) {
    const v0 = C.v0, v1 = C.v1, W = C.width;
    let k = lowerBound(row.maxEnd, row.n, v0);
    let drawn = 0;
    while (k < row.n) {
      const s = row.start[k];
      if (s > v1) break;
      const e = row.end[k];
      const x0 = (s - v0) * scale, x1 = (e - v0) * scale;
      if (x1 - x0 < 1) {
        const px = Math.floor(x0);
        ctx.fillStyle = fill ? fill : colorOf(row.span[k]);
        ctx.fillRect(px, y, 1, ROW_H - 1);
        drawn++;
        // Past every item that ends inside this pixel (maxEnd is monotone;
        // an item that starts here but ends further on is still drawn).
        const next = lowerBound(row.maxEnd, row.n, v0 + (px + 1) / scale);
        k = next > k ? next : k + 1;
        continue;
      }
      // Whole pixels: a rectangle at a fractional x is blended into its
      // neighbours, and one under 2 px wide would get no pixel of its colour.
      const cx0 = Math.floor(Math.max(x0, -1)), cx1 = Math.floor(Math.min(x1, W + 1));
      const i = row.span[k];
      ctx.fillStyle = fill ? fill : colorOf(i);
      // A 1 px gap keeps neighbours apart once there is room for it.
      ctx.fillRect(cx0, y, cx1 - cx0 > 2 ? cx1 - cx0 - 1 : Math.max(1, cx1 - cx0), ROW_H - 1);
      drawn++;
      if (labels && cx1 - cx0 > 28) {
        ctx.fillStyle = "#1d2329";
        const text = name(i);
        const maxW = cx1 - cx0 - 6;
        ctx.save();
        ctx.beginPath();
        ctx.rect(cx0, y, cx1 - cx0, ROW_H);
        ctx.clip();
        ctx.fillText(text.length * 6 > maxW ? fitText(ctx, text, maxW) : text, cx0 + 3, y + ROW_H - 5);
        ctx.restore();
      }
      k++;
    }
    return drawn;
  }

  function fitText(ctx, text, maxW) {
    if (ctx.measureText(text).width <= maxW) return text;
    let lo = 0, hi = text.length;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (ctx.measureText(text.slice(0, mid) + "\u2026").width <= maxW) lo = mid; else hi = mid - 1;
    }
    return lo > 0 ? text.slice(0, lo) + "\u2026" : "";
  }

  function niceStep(range, px) {
    const target = range / Math.max(1, px / 110);
    const p = Math.pow(10, Math.floor(Math.log10(target)));
    for (const m of [1, 2, 5, 10]) if (m * p >= target) return m * p;
    return 10 * p;
  }
  function fmtTick(ns, step) {
    if (step >= 1e6) return (ns / 1e6).toFixed(Math.max(0, -Math.floor(Math.log10(step / 1e6)))) + "ms";
    if (step >= 1e3) return (ns / 1e3).toFixed(Math.max(0, -Math.floor(Math.log10(step / 1e3)))) + "us";
    return ns.toFixed(0) + "ns";
  }

  let drawQueued = false;
  function drawChart() {
    if (drawQueued) return;
    drawQueued = true;
    requestAnimationFrame(() => { drawQueued = false; drawNow(); });
  }

  function drawNow() {
    const t = performance.now();
    const canvas = C.canvas;
    const dpr = window.devicePixelRatio || 1;
    const W = C.scroll.clientWidth;
    const H = Math.min(C.height, Math.max(C.scroll.clientHeight, 60));
    if (W <= 0) return;
    C.width = W;
    if (canvas.width !== Math.round(W * dpr) || canvas.height !== Math.round(H * dpr)) {
      canvas.width = Math.round(W * dpr); canvas.height = Math.round(H * dpr);
      canvas.style.width = W + "px"; canvas.style.height = H + "px";
    }
    // The canvas covers the visible part of the scroll box and moves with it.
    const scrollY = C.scroll.scrollTop;
    canvas.style.top = scrollY + "px";
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, W, H);
    ctx.font = "11px system-ui, sans-serif";
    const scale = W / (C.v1 - C.v0);
    let drawn = 0;
    const searching = S.query !== "";
    for (let ti = 0; ti < C.tracks.length; ti++) {
      const tr = C.tracks[ti];
      const ty = tr.y - scrollY;
      if (ty > H || ty + TRACK_TITLE_H + tr.rows.length * ROW_H < 0) continue;
      ctx.fillStyle = "#eef1f4";
      ctx.fillRect(0, ty, W, TRACK_TITLE_H - 2);
      ctx.fillStyle = "#5f6b76";
      ctx.fillText(laneTitle(tr.lane), 4, ty + TRACK_TITLE_H - 6);
      for (let r = 0; r < tr.rows.length; r++) {
        const y = ty + TRACK_TITLE_H + r * ROW_H;
        if (y > H || y + ROW_H < 0) continue;
        drawn += drawRow(ctx, tr.rows[r], y, scale, searching ? "#d9dde1" : null, !searching);
        // Matches on top, in their own rows: a match inside a run of
        // sub-pixel spans still gets its pixel.
        if (searching && S.tracks) drawn += drawRow(ctx, S.tracks[ti].rows[r], y, scale, "#ffb000", true);
      }
    }
    drawn += drawResources(ctx, W, H, scale, scrollY, searching);
    drawBubbles(ctx, W, H, scale);
    outlineSpan(ctx, T.selected, "#0b57d0", scale, scrollY);
    if (C.hover >= 0 && C.hover !== T.selected) outlineSpan(ctx, C.hover, "#1d2329", scale, scrollY);
    drawAxis(ctx, W, scale);
    C.lastDraw = { ms: performance.now() - t, drawn };
    updateRangeLabel();
  }

  function drawResources(ctx, W, H, scale, scrollY, searching) {
    let drawn = 0;
    for (let ti = 0; ti < C.res.length; ti++) {
      const tr = C.res[ti], r = P.resources[tr.res];
      const ty = tr.y - scrollY;
      if (ty > H || ty + TRACK_TITLE_H + tr.rows.length * ROW_H + tr.counters.length * COUNTER_H < 0) continue;
      ctx.fillStyle = "#e6ecf3";
      ctx.fillRect(0, ty, W, TRACK_TITLE_H - 2);
      ctx.fillStyle = "#5f6b76";
      ctx.fillText("resource " + r.name, 4, ty + TRACK_TITLE_H - 6);
      // Its instants (a rate limit hit, a retry): a tick down the title bar.
      ctx.fillStyle = "#c5221f";
      for (const m of r.marks) {
        const x = (m.t - C.v0) * scale;
        if (x >= -2 && x <= W + 2) ctx.fillRect(Math.floor(x) - 1, ty, 3, TRACK_TITLE_H - 2);
      }
      for (let k = 0; k < tr.rows.length; k++) {
        const y = ty + TRACK_TITLE_H + k * ROW_H;
        if (y > H || y + ROW_H < 0) continue;
        drawn += drawRow(ctx, tr.rows[k], y, scale, searching ? "#d9dde1" : null, !searching);
        if (searching && S.res) drawn += drawRow(ctx, S.res[ti].rows[k], y, scale, "#ffb000", true);
        rowLabel(ctx, "slot " + (k + 1), y, ROW_H - 1);
      }
      for (let k = 0; k < tr.counters.length; k++) {
        const y = ty + TRACK_TITLE_H + tr.rows.length * ROW_H + k * COUNTER_H;
        if (y > H || y + COUNTER_H < 0) continue;
        drawCounter(ctx, r.ts, tr.counters[k], y, scale);
        rowLabel(ctx, tr.counters[k].label, y, 14);
      }
    }
    return drawn;
  }

  // A row's name at its left edge, on a light box so the bars under it
  // do not hide it (the hit test still finds those bars).
  function rowLabel(ctx, text, y, h) {
    ctx.fillStyle = "rgba(255,255,255,0.85)";
    ctx.fillRect(0, y, ctx.measureText(text).width + 8, h);
    ctx.fillStyle = "#5f6b76";
    ctx.fillText(text, 4, y + h - 4);
  }

  // A step chart: each sample holds until the next. Steps narrower than a
  // pixel share it at their largest value.
  function drawCounter(ctx, ts, cnt, y, scale) {
    const v0 = C.v0, v1 = C.v1, n = ts.length, base = y + COUNTER_H - 2;
    const h = (v) => Math.round((COUNTER_H - 4) * v / Math.max(1, cnt.peak));
    ctx.fillStyle = "#f6f8fa";
    ctx.fillRect(0, y, C.width, COUNTER_H - 1);
    ctx.fillStyle = cnt.color;
    let px = NaN, pmax = 0;
    const flush = () => { if (pmax > 0) ctx.fillRect(px, base - h(pmax), 1, h(pmax)); pmax = 0; };
    for (let k = Math.max(0, lowerBound(ts, n, v0) - 1); k < n && ts[k] <= v1; k++) {
      const v = cnt.values[k];
      const x0 = (ts[k] - v0) * scale, x1 = ((k + 1 < n ? ts[k + 1] : v1) - v0) * scale;
      if (x1 - x0 < 1) {
        const p = Math.floor(x0);
        if (p !== px) { flush(); px = p; }
        if (v > pmax) pmax = v;
        continue;
      }
      flush(); px = NaN;
      const a = Math.floor(Math.max(x0, -1)), b = Math.floor(Math.min(x1, C.width + 1));
      if (v > 0) ctx.fillRect(a, base - h(v), Math.max(1, b - a), h(v));
    }
    flush();
  }

  // Idle gaps (no thread or task running): shaded over the whole height.
  function drawBubbles(ctx, W, H, scale) {
    ctx.fillStyle = BUBBLE_FILL;
    for (const [s, e] of P.bubbles) {
      if (e < C.v0 || s > C.v1) continue;
      const x0 = Math.floor(Math.max(-1, (s - C.v0) * scale)), x1 = Math.ceil(Math.min(W + 1, (e - C.v0) * scale));
      ctx.fillRect(x0, AXIS_H, Math.max(1, x1 - x0), H - AXIS_H);
    }
  }

  function drawAxis(ctx, W, scale) {
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, W, AXIS_H);
    ctx.strokeStyle = "#d8dee4";
    ctx.beginPath(); ctx.moveTo(0, AXIS_H - 0.5); ctx.lineTo(W, AXIS_H - 0.5); ctx.stroke();
    const step = niceStep(C.v1 - C.v0, W);
    ctx.fillStyle = "#5f6b76";
    for (let v = Math.ceil(C.v0 / step) * step; v <= C.v1; v += step) {
      const x = Math.round((v - C.v0) * scale) + 0.5;
      ctx.beginPath(); ctx.moveTo(x, AXIS_H - 6); ctx.lineTo(x, AXIS_H); ctx.stroke();
      ctx.fillText(fmtTick(v, step), x + 3, AXIS_H - 8);
    }
  }

  function trackOfSpan(i) {
    for (const t of C.tracks) if (t.lane === P.lane[i]) return t;
    return null;
  }

  function outlineSpan(ctx, i, color, scale, scrollY) {
    if (i < 0) return;
    ctx.strokeStyle = color;
    ctx.lineWidth = 2;
    const outline = (s, e, y) => {
      const x0 = Math.max(-2, (s - C.v0) * scale), x1 = Math.min(C.width + 2, (e - C.v0) * scale);
      if (x1 < -2 || x0 > C.width + 2) return;
      // Around the bar, not on it: a sub-pixel span keeps its own pixel
      // (and its search highlight) visible inside the outline.
      const px0 = Math.floor(x0), px1 = Math.max(px0 + 1, Math.ceil(x1));
      ctx.strokeRect(px0 - 1.5, y + 0.5, px1 - px0 + 3, ROW_H - 2);
    };
    const t = V.visible[i] ? trackOfSpan(i) : null;
    if (t) {
      const y = t.y - scrollY + TRACK_TITLE_H + (V.vDepth[i] - t.base) * ROW_H;
      forEachRect(i, (s, e) => outline(s, e, y));
    }
    // Its call to a resource too, on its slot (shown whatever the depth).
    const rc = P.callOf.get(i);
    if (rc) {
      const c = P.resources[rc[0]].calls[rc[1]];
      outline(c.start, c.end, C.res[rc[0]].y - scrollY + TRACK_TITLE_H + (c.slot - 1) * ROW_H);
    }
    ctx.lineWidth = 1;
  }

  function updateRangeLabel() {
    $("range").textContent = fmtDur(C.v0) + " \u2013 " + fmtDur(C.v1) + " (" + fmtDur(C.v1 - C.v0) + " shown)";
    $("zoom-back").disabled = C.back.length === 0;
  }

  // What is under a point of the canvas: { span, call } where call is
  // [resource, call index] on a resource's slot row, else null; span -1: nothing.
  function hitAt(x, y) {
    const yy = y + C.scroll.scrollTop;
    const tracks = C.res.length ? C.tracks.concat(C.res) : C.tracks;
    for (const t of tracks) {
      const r = Math.floor((yy - t.y - TRACK_TITLE_H) / ROW_H);
      if (r < 0 || r >= t.rows.length) continue;
      const row = t.rows[r];
      const scale = C.width / (C.v1 - C.v0);
      const tt = C.v0 + x / scale, slack = 1 / scale;
      let best = -1, bestDist = Infinity;
      for (let k = lowerBound(row.maxEnd, row.n, tt - slack); k < row.n && row.start[k] <= tt + slack; k++) {
        if (row.end[k] < tt - slack) continue;
        const dist = tt < row.start[k] ? row.start[k] - tt : tt > row.end[k] ? tt - row.end[k] : 0;
        if (dist < bestDist) { best = k; bestDist = dist; if (dist === 0) break; }
      }
      if (best < 0) return { span: -1, call: null };
      return { span: row.span[best], call: row.call ? [t.res, row.call[best]] : null };
    }
    return { span: -1, call: null };
  }

  // The span under a point of the canvas, or -1.
  function hitTest(x, y) { return hitAt(x, y).span; }

  function fullRange() { return [0, Math.max(P.duration, P.span_end_max, 1)]; }

  function setRange(v0, v1, remember) {
    const [f0, f1] = fullRange();
    const minW = 100;  // ns
    if (v1 - v0 < minW) { const c = (v0 + v1) / 2; v0 = c - minW / 2; v1 = c + minW / 2; }
    const w = Math.min(v1 - v0, f1 - f0);
    if (v0 < f0) { v0 = f0; v1 = v0 + w; }
    if (v1 > f1) { v1 = f1; v0 = v1 - w; }
    if (remember) { C.back.push([C.v0, C.v1]); if (C.back.length > 100) C.back.shift(); }
    C.v0 = v0; C.v1 = v1;
    drawChart();
  }

  function zoomToSpan(i) {
    if (i < 0) return;
    const pad = (P.end[i] - P.start[i]) * 0.02;
    setRange(P.start[i] - pad, P.end[i] + pad, true);
  }

  function zoomBy(factor, atX) {
    const at = C.v0 + (atX / C.width) * (C.v1 - C.v0);
    setRange(at - (at - C.v0) * factor, at + (C.v1 - at) * factor, true);
  }

  const tooltip = $("tooltip");
  function showTooltip(i, x, y, call) {
    if (i < 0) { tooltip.hidden = true; return; }
    const dur = P.end[i] - P.start[i];
    let text = name(i) + "\n" + fmtDur(dur);
    const pct = parentPct(i);
    if (pct) text += "  " + pct + " of parent";
    text += "\nself " + fmtDur(V.selfNs[i]);
    if (P.flags[i] & F_GENERATOR) text += "\nactive " + fmtDur(P.active[i]) + ", " + plural(P.resumes[i], "resume", "resumes");
    const f = P.func[i];
    if (f < P.fnModule.length && P.strings[P.fnModule[f]]) text += "\n" + P.strings[P.fnModule[f]];
    for (let k = 0; k < P.ioCount[i]; k++) text += "\n" + ioLine(P.ioFirst[i] + k);
    if (call) {
      const r = P.resources[call[0]], c = r.calls[call[1]];
      text += "\nresource " + r.name + ", slot " + c.slot + "\nin flight " + fmtDur(c.end - c.start);
      if (c.queuedFrom < c.start) text += "\nqueued " + fmtDur(c.start - c.queuedFrom);
    }
    tooltip.textContent = text;
    tooltip.hidden = false;
    const box = C.scroll.getBoundingClientRect();
    const left = Math.min(x + 14, box.width - tooltip.offsetWidth - 4);
    tooltip.style.left = Math.max(0, left) + "px";
    tooltip.style.top = (y + 16) + "px";
  }

  let drag = null;
  C.canvas.addEventListener("mousedown", (ev) => {
    drag = { x: ev.clientX, v0: C.v0, v1: C.v1, moved: false };
  });
  window.addEventListener("mousemove", (ev) => {
    if (drag) {
      const dx = ev.clientX - drag.x;
      if (Math.abs(dx) > 3) drag.moved = true;
      if (drag.moved) {
        C.canvas.classList.add("panning");
        const dv = -dx / C.width * (drag.v1 - drag.v0);
        C.v0 = drag.v0 + dv; C.v1 = drag.v1 + dv;
        setRange(C.v0, C.v1, false);
        return;
      }
    }
  });
  window.addEventListener("mouseup", (ev) => {
    if (!drag) return;
    const wasDrag = drag.moved;
    const before = [drag.v0, drag.v1];
    drag = null;
    C.canvas.classList.remove("panning");
    if (wasDrag) { C.back.push(before); updateRangeLabel(); return; }
    if (ev.target !== C.canvas) return;
    const rect = C.canvas.getBoundingClientRect();
    const i = hitTest(ev.clientX - rect.left, ev.clientY - rect.top);
    if (i >= 0) { selectSpan(i, true); zoomToSpan(i); }
  });
  C.canvas.addEventListener("mousemove", (ev) => {
    if (drag && drag.moved) return;
    const rect = C.canvas.getBoundingClientRect();
    const x = ev.clientX - rect.left, y = ev.clientY - rect.top;
    const hit = hitAt(x, y), i = hit.span;
    if (i !== C.hover) { C.hover = i; drawChart(); if (i >= 0) showDetail(i); }
    const sec = $("chart-section").getBoundingClientRect();
    showTooltip(i, ev.clientX - sec.left, ev.clientY - sec.top, hit.call);
  });
  C.canvas.addEventListener("mouseleave", () => {
    C.hover = -1; tooltip.hidden = true; drawChart();
    if (T.selected >= 0) showDetail(T.selected);
  });
  C.canvas.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    const rect = C.canvas.getBoundingClientRect();
    if (ev.shiftKey || Math.abs(ev.deltaX) > Math.abs(ev.deltaY)) {
      const d = (ev.shiftKey ? ev.deltaY : ev.deltaX) / C.width * (C.v1 - C.v0);
      setRange(C.v0 + d, C.v1 + d, false);
      return;
    }
    zoomBy(Math.exp(ev.deltaY * 0.002), ev.clientX - rect.left);
  }, { passive: false });
  C.scroll.addEventListener("scroll", () => drawChart(), { passive: true });
  $("zoom-in").addEventListener("click", () => zoomBy(0.5, C.width / 2));
  $("zoom-out").addEventListener("click", () => zoomBy(2, C.width / 2));
  $("zoom-back").addEventListener("click", () => {
    const prev = C.back.pop();
    if (prev) setRange(prev[0], prev[1], false);
  });
  $("zoom-reset").addEventListener("click", () => {
    const [f0, f1] = fullRange();
    if (C.v0 !== f0 || C.v1 !== f1) setRange(f0, f1, true);
  });
  if (window.ResizeObserver) new ResizeObserver(() => drawChart()).observe(C.scroll);
  else window.addEventListener("resize", () => drawChart());

  // ---- header -------------------------------------------------------------

  function renderHeader() {
    const m = P.meta;
    // Named after the longest root: the predict() the session was about.
    let main = -1;
    for (const r of V.roots) if (main < 0 || P.end[r] - P.start[r] > P.end[main] - P.start[main]) main = r;
    const rootName = main >= 0 ? name(main) : "";
    // One root: its time is the total, as the tree shows it; the session's
    // wall time (its start and stop included) is given beside it.
    const total = V.roots.length === 1 ? P.end[main] - P.start[main] : P.duration;
    $("title").textContent = rootName ? rootName + " \u2014 mlflow-profiler" : "mlflow-profiler report";
    document.title = (rootName ? rootName + " " : "") + fmtDur(total) + " \u2014 mlflow-profiler";
    const facts = $("facts");
    const add = (k, v, id) => {
      if (v === undefined || v === null || v === "") return;
      const div = document.createElement("div");
      const dt = document.createElement("dt");
      dt.textContent = k;
      const dd = document.createElement("dd");
      dd.textContent = v;
      if (id) dd.id = id;
      div.appendChild(dt); div.appendChild(dd);
      facts.appendChild(div);
    };
    const threads = new Set(P.lanes.map((l) => l.thread_id));
    const tasks = P.lanes.filter((l) => l.task !== 0).length;
    add("Total", fmtDur(total), "fact-total");
    if (fmtDur(total) !== fmtDur(P.duration)) add("Session", fmtDur(P.duration), "fact-session");
    // The profiler's own work inside the session (I/O summaries, naming
    // calls, first sight of a function): left out of every span's time, so
    // it is said once, here.
    const overhead = Number(m.profiler_overhead_ns || 0);
    if (overhead > 0) add("Profiler", fmtDur(overhead) + " of its own work, not in the times", "fact-profiler");
    add("Captured depth", m.captured_depth < 0 ? "unlimited" : String(m.captured_depth), "fact-depth");
    add("Spans", P.n.toLocaleString("en-US"), "fact-spans");
    add("Threads", String(threads.size) + (tasks ? ", " + plural(tasks, "task", "tasks") : ""), "fact-threads");
    // Without waiting data no gap can be seen (core/bubbles.h): not 0 but unknown.
    let idle = 0;
    for (const [s, e] of P.bubbles) idle += e - s;
    add("Idle gaps", P.bubbleWaitData ? P.bubbles.length + (P.bubbles.length ? ", " + fmtDur(idle) : "")
      : "unknown (no waiting data)", "fact-bubbles");
    add("Engine", m.engine, "fact-engine");
    add("Python", m.python, "fact-python");
    add("Host", m.host, "fact-host");
    add("PID", m.pid, "fact-pid");
    const warnings = $("warnings");
    const warn = (text) => {
      const li = document.createElement("li");
      li.textContent = text;
      warnings.appendChild(li);
    };
    P.lanes.forEach((lane, l) => {
      if (lane.dropped > 0) {
        warn("(" + lane.dropped + " calls dropped in " + laneTitle(l) + ": the buffer of max_events was full)");
      }
      if (lane.truncated) warn("(recording stopped in " + laneTitle(l) + ": the hard cap of events was reached)");
    });
    if (P.stats.unmatched_returns > 0) warn("(" + plural(P.stats.unmatched_returns, "return", "returns") + " had no open span)");
    if (P.meta.start_ns > 9007199254740991) warn("(timestamps above 2^53 ns: times shown may be off by a few ns)");
    if (P.n === 0) warn("(no spans captured)");
  }

  // ---- controls -----------------------------------------------------------

  function fillDepthSelect() {
    const sel = $("depth");
    const keep = V.depthLimit;
    sel.textContent = "";
    const cap = P.meta.captured_depth;
    // print_tree(depth=k) filters only below the captured depth.
    const maxDepth = cap >= 0 ? Math.min(V.maxDepth, cap) : V.maxDepth;
    const all = document.createElement("option");
    all.value = "-1";
    all.textContent = "all (" + (cap < 0 ? "unlimited" : "captured " + cap) + ")";
    sel.appendChild(all);
    for (let k = 0; k < maxDepth; k++) {
      const o = document.createElement("option");
      o.value = String(k);
      o.textContent = String(k);
      sel.appendChild(o);
    }
    sel.value = String(keep < maxDepth ? keep : -1);
  }

  // Rebuilds everything that depends on the view (C calls, depth limit).
  function rebuild() {
    buildView();
    C.tracks = buildTracks(null);
    layoutTracks();
    applySearch(S.query, false);
    buildRows();
    drawChart();
  }

  function applySearch(query, jump) {
    const ms = runSearch(query);
    const t1 = performance.now();
    S.tracks = query ? buildTracks(S.match) : null;
    S.res = query && C.res.length ? buildResourceTracks(S.match) : null;
    const parts = { match_ms: ms, chart_ms: performance.now() - t1 };
    const count = $("search-count");
    if (!query) count.textContent = "";
    else {
      count.textContent = (S.list.length === 0 ? "no match" : plural(S.list.length, "match", "matches")) +
        (S.hidden > 0 ? " (" + S.hidden + " more below the depth shown)" : "");
    }
    if (jump) {
      const t2 = performance.now();
      buildRows();
      parts.tree_ms = performance.now() - t2;
      if (S.list.length) { S.cursor = 0; selectSpan(S.list[0], true); }
      drawChart();
    }
    timings.search_parts = parts;  // for bench/bench_html.py
  }

  function stepMatch(d) {
    if (!S.list.length) return;
    S.cursor = (S.cursor + d + S.list.length) % S.list.length;
    selectSpan(S.list[S.cursor], true);
  }

  let searchTimer = 0;
  const searchInput = $("search");
  searchInput.addEventListener("input", () => {
    clearTimeout(searchTimer);
    // Typing stays smooth: search runs once the typing pauses.
    searchTimer = setTimeout(() => {
      const t = performance.now();
      applySearch(searchInput.value.trim(), true);
      timings.search_ms = performance.now() - t;
    }, 120);
  });
  searchInput.addEventListener("keydown", (ev) => {
    if (ev.key !== "Enter") return;
    ev.preventDefault();
    const q = searchInput.value.trim();
    if (q !== S.query) {
      clearTimeout(searchTimer);
      const t = performance.now();
      applySearch(q, true);
      timings.search_ms = performance.now() - t;
    } else {
      stepMatch(ev.shiftKey ? -1 : 1);
    }
  });
  $("search-next").addEventListener("click", () => stepMatch(1));
  $("search-prev").addEventListener("click", () => stepMatch(-1));
  $("depth").addEventListener("change", (ev) => {
    V.depthLimit = Number(ev.target.value);
    rebuild();
  });
  if (P.hasC) {
    $("c-calls-box").hidden = false;
    $("c-calls").addEventListener("change", (ev) => {
      V.showC = ev.target.checked;
      rebuild();
      fillDepthSelect();
    });
  }
  if (P.io.length) {
    $("io-box").hidden = false;
    $("show-io").addEventListener("change", (ev) => { V.showIO = ev.target.checked; buildRows(); });
  }

  // ---- start ----------------------------------------------------------------

  buildView();
  if (P.n <= SMALL_PROFILE) {
    for (let i = 0; i < P.n; i++) T.expanded[i] = 1;
  } else {
    for (let i = 0; i < P.n; i++) if (V.vDepth[i] < 2) T.expanded[i] = 1;
  }
  // MLflow's own calls, grouped, start closed: one line with its time, as
  // print_tree shows it at the captured depth; a click opens it.
  for (let i = 0; i < P.n; i++) if (P.flags[i] & F_GROUP) T.expanded[i] = 0;
  fillDepthSelect();
  renderHeader();
  C.tracks = buildTracks(null);
  C.res = buildResourceTracks(null);  // the view does not change them
  layoutTracks();
  [C.v0, C.v1] = fullRange();
  buildRows();
  drawNow();
  timings.first_render_ms = performance.now() - t_start;
  // Since navigation began: includes reading and parsing the HTML itself.
  timings.ready_ms = performance.now();

  // For tests and bench/bench_html.py: figures and a few entry points.
  window.mlprofReport = {
    timings,
    spans: P.n,
    lastDraw: () => C.lastDraw,
    range: () => [C.v0, C.v1],
    chartWidth: () => C.width,
    setRange: (v0, v1) => { setRange(v0, v1, false); drawNow(); },
    trackTitles: () => C.tracks.map((t) => laneTitle(t.lane)),
    // Where each track is drawn: its top (CSS px from the chart's top), rows, lane.
    trackLayout: () => C.tracks.map((t) => ({ title: laneTitle(t.lane), lane: t.lane, y: t.y, rows: t.rows.length, base: t.base })),
    // The resources' tracks as drawn: title, top, slot rows' and counter rows' labels.
    resourceLayout: () => C.res.map((t) => ({
      title: "resource " + P.resources[t.res].name, y: t.y,
      rows: t.rows.map((_, k) => "slot " + (k + 1)), counters: t.counters.map((c) => c.label),
      rowH: ROW_H, counterH: COUNTER_H, titleH: TRACK_TITLE_H,
      // its instants: name and x (CSS px in the chart) at the current range
      marks: P.resources[t.res].marks.map((m) => ({ name: m.name, x: (m.t - C.v0) * C.width / (C.v1 - C.v0) })) })),
    search: (q) => { const t = performance.now(); searchInput.value = q; applySearch(q, true); return performance.now() - t; },
    redraw: () => { const t = performance.now(); drawNow(); return performance.now() - t; },
    zoomToSpan: (i) => { const t = performance.now(); zoomToSpan(i); drawNow(); return performance.now() - t; },
    expandAll: () => { const t = performance.now(); $("expand-all").click(); return performance.now() - t; },
  };
})();
