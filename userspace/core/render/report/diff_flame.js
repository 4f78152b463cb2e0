// The diff page's differential flame graph (`mlprof diff --html`;
// docs/store.md). Built from the diff's own JSON (Diff.to_json, embedded by
// analysis.py as the payload's "result"), per entry of "paths": "path"
// (names from the root), "a_ns"/"b_ns" (the median over a side's runs of
// the path's time per root call; null when the side lacks it),
// "change_pct", "ci_pct" ([lo, hi] or null), "gated" and "verdict".
//
// A frame's width is B's time per root call; a path only in A takes A's
// time and is hatched, so what B dropped stays visible. Its colour is the
// gate's verdict only: red regression, green improvement, grey for pass,
// inconclusive and ungated (a change the gate did not find significant is
// not coloured), hatched for a path on one side only. Children never take
// more than their parent's width (medians need not add up): when they
// would, they are scaled down together. Click zooms to a frame, its
// ancestors spanning the width, as the report's flame chart does; Back and
// Reset (Backspace, Escape) undo. As in report.js, user text only goes
// through textContent, and nothing is fetched.
"use strict";

(function () {
  const ROW_H = 18;  // the report's flame chart row height (report.js)
  const MIN_PX = 0.5;  // narrower frames (and what they hold) are not drawn
  const $ = (id) => document.getElementById(id);

  const data = JSON.parse($("mlprof-analysis").textContent);
  const result = data.result || {};
  if (data.kind !== "diff" || !Array.isArray(result.paths)) return;

  // ---- formatting: as the text table (core format_duration, "%+.1f%%") ----

  // printf("%.2f"): toFixed agrees except on exact binary ties (report.js).
  function fixed2(x) {
    const a = Math.abs(x), e8 = a * 8;
    if (Number.isInteger(e8) && e8 % 2 === 1) {
      let n = Math.floor(a * 100);
      if (n % 2 === 1) n += 1;
      const s = Math.floor(n / 100) + "." + String(n % 100).padStart(2, "0");
      return x < 0 ? "-" + s : s;
    }
    return x.toFixed(2);
  }
  function fmtDur(ns) {
    if (ns === null || ns === undefined) return "-";
    ns = Math.round(ns);
    if (ns >= 10000 || ns <= -10000) return fixed2(ns / 1e6) + "ms";
    return fixed2(ns / 1e3) + "us";
  }
  function fmtPct(pct) {
    return pct === null || pct === undefined ? "-" : (pct >= 0 ? "+" : "") + pct.toFixed(1) + "%";
  }
  const VERDICT_CLASS = { regression: "regression", improvement: "improvement", only_a: "only_a", only_b: "only_b" };
  function frameClass(entry) {
    return (entry && VERDICT_CLASS[entry.verdict]) || "neutral";
  }

  // ---- the tree of paths, laid out once in B's nanoseconds ----------------

  const top = { name: "", path: [], children: new Map(), entry: null, depth: -1, parent: null };
  for (const entry of result.paths) {
    if (!Array.isArray(entry.path) || entry.path.length === 0) continue;
    let node = top;
    for (const name of entry.path) {
      let child = node.children.get(name);
      if (!child) {
        child = { name: String(name), path: node.path.concat([String(name)]), children: new Map(), entry: null,
                  depth: node.depth + 1, parent: node };
        node.children.set(name, child);
      }
      node = child;
    }
    node.entry = entry;
  }
  const isNum = (v) => typeof v === "number" && isFinite(v);
  // B's time, or A's for a path only in A; a node no entry names: its children's.
  function value(node) {
    if (node.value !== undefined) return node.value;
    const e = node.entry;
    let v = 0;
    if (e) v = isNum(e.b_ns) ? e.b_ns : (e.verdict === "only_a" && isNum(e.a_ns) ? e.a_ns : 0);
    else for (const c of node.children.values()) v += value(c);
    node.value = Math.max(0, v);
    return node.value;
  }
  let maxDepth = 0;
  const ordered = (node) => [...node.children.values()].sort((p, q) => (p.name < q.name ? -1 : p.name > q.name ? 1 : 0));
  function layout(node, x, w) {
    node.x = x;
    node.w = w;
    if (node.depth > maxDepth) maxDepth = node.depth;
    const kids = ordered(node);
    const sum = kids.reduce((s, c) => s + value(c), 0);
    const scale = sum > w && sum > 0 ? w / sum : 1;
    let cx = x;
    for (const c of kids) {
      const cw = value(c) * scale;
      layout(c, cx, cw);
      cx += cw;
    }
    node.kids = kids;
  }
  const total = ordered(top).reduce((s, c) => s + value(c), 0);
  layout(top, 0, total);

  // ---- drawing (one absolutely placed element per visible frame) ----------

  const section = $("flame-section"), flame = $("flame"), tooltip = $("tooltip");
  section.hidden = false;
  flame.style.height = (maxDepth + 1) * ROW_H + "px";
  const view = { v0: 0, v1: total, focus: null, back: [] };
  const conf = isNum(result.confidence) ? Math.round(100 * result.confidence) + "% CI" : "CI";

  function draw() {
    flame.textContent = "";
    const W = flame.clientWidth;
    if (!(W > 0) || !(view.v1 > view.v0)) return;
    const scale = W / (view.v1 - view.v0);
    const stack = top.kids.slice().reverse();
    while (stack.length) {
      const node = stack.pop();
      let x0 = (node.x - view.v0) * scale, x1 = (node.x + node.w - view.v0) * scale;
      if (x1 <= 0 || x0 >= W) continue;
      x0 = Math.max(0, x0);
      x1 = Math.min(W, x1);
      if (x1 - x0 < MIN_PX) continue;
      const el = document.createElement("div");
      el.className = "frame " + frameClass(node.entry);
      el.style.left = x0 + "px";
      el.style.width = x1 - x0 + "px";
      el.style.top = node.depth * ROW_H + "px";
      el.dataset.path = JSON.stringify(node.path);
      if (x1 - x0 > 16) el.textContent = node.name;
      el.addEventListener("mousemove", (ev) => showTooltip(node, ev));
      el.addEventListener("mouseleave", () => { tooltip.hidden = true; });
      el.addEventListener("click", () => zoomTo(node));
      flame.append(el);
      for (let i = node.kids.length - 1; i >= 0; i--) stack.push(node.kids[i]);
    }
    $("flame-back").disabled = view.back.length === 0;
    $("flame-reset").disabled = view.focus === null;
    $("flame-focus").textContent = view.focus
      ? "zoomed to " + view.focus.path.join("/") + " (" + fmtDur(value(view.focus)) + ")"
      : "every root: " + fmtDur(total) + " of B per root call";
  }

  function tooltipText(node) {
    const e = node.entry;
    const lines = [node.path.join("/")];
    if (!e) return lines.concat(["no figures of its own"]).join("\n");
    if (e.verdict === "only_a") {
      lines.push("only in A: " + fmtDur(e.a_ns) + " per root call");
    } else if (e.verdict === "only_b") {
      lines.push("only in B: " + fmtDur(e.b_ns) + " per root call");
    } else {
      lines.push("A " + fmtDur(e.a_ns) + "   B " + fmtDur(e.b_ns) + "   per root call");
      const ci = Array.isArray(e.ci_pct) ? "[" + fmtPct(e.ci_pct[0]) + ", " + fmtPct(e.ci_pct[1]) + "]" : "-";
      lines.push("change " + fmtPct(e.change_pct) + "   " + conf + " " + ci);
    }
    let verdict = "verdict: " + String(e.verdict).replace("_", " ") + (e.gated ? " (gated" : " (not gated");
    if (isNum(e.p_holm)) verdict += ", p " + e.p_holm.toPrecision(2) + " Holm";
    lines.push(verdict + ")");
    if (isNum(e.runs_a) && isNum(e.runs_b)) lines.push("runs A/B " + e.runs_a + "/" + e.runs_b);
    return lines.join("\n");
  }

  function showTooltip(node, ev) {
    tooltip.textContent = tooltipText(node);
    tooltip.hidden = false;
    const box = section.getBoundingClientRect();
    const x = ev.clientX - box.left + 12, y = ev.clientY - box.top + 14;
    tooltip.style.left = Math.min(x, Math.max(0, box.width - tooltip.offsetWidth - 4)) + "px";
    tooltip.style.top = y + "px";
  }

  function setView(v0, v1, focus, remember) {
    if (remember) view.back.push([view.v0, view.v1, view.focus]);
    view.v0 = v0;
    view.v1 = v1;
    view.focus = focus;
    tooltip.hidden = true;
    draw();
  }
  function zoomTo(node) {
    if (!(node.w > 0) || node === view.focus) return;
    setView(node.x, node.x + node.w, node, true);
  }
  function reset() { if (view.focus !== null) setView(0, total, null, true); }
  function back() {
    const last = view.back.pop();
    if (last) setView(last[0], last[1], last[2], false);
  }
  function find(path) {
    let node = top;
    for (const name of path) {
      node = node.children.get(name);
      if (!node) return null;
    }
    return node;
  }

  $("flame-back").addEventListener("click", back);
  $("flame-reset").addEventListener("click", reset);
  document.addEventListener("keydown", (ev) => {
    if (ev.target && /^(INPUT|TEXTAREA|SELECT)$/.test(ev.target.tagName)) return;
    if (ev.key === "Escape") reset();
    else if (ev.key === "Backspace") { ev.preventDefault(); back(); }
  });
  window.addEventListener("resize", draw);

  // The legend: one swatch per look.
  const legend = $("flame-legend");
  for (const [cls, text] of [["regression", "regression"], ["improvement", "improvement"],
    ["neutral", "no significant change (pass, inconclusive, ungated)"], ["only_a", "only in A"],
    ["only_b", "only in B"]]) {
    const item = document.createElement("span");
    const swatch = document.createElement("span");
    swatch.className = "frame-swatch " + cls;
    item.append(swatch, " " + text);
    legend.append(item);
  }

  draw();

  // What tests (and a reader's console) can ask of the graph.
  window.mlprofFlame = {
    total,
    zoom: (path) => { const n = find(path); if (n) zoomTo(n); return !!n; },
    reset,
    back,
    tooltip: (path) => { const n = find(path); return n ? tooltipText(n) : null; },
  };
})();
