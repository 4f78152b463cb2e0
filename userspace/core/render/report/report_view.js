// The view (V): which spans show, with C calls folded or not and a depth
// limit, their shown times and children; and the search (S) over it.
// Part of report.js's one function scope (see there).

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

  // Whether suspended span i stands for its wall time under p (views/view.cpp
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

  // The time a node stands for, as print_tree shows it (views/view.h): a
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
