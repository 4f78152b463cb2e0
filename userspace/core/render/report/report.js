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
//
// The code is split by job into the files named by the @include lines
// below (data, view, tree, chart, interaction); report/embed.cmake puts
// each in place of its line, so the page runs one script, as one function
// scope, in this order.
"use strict";

(function () {
  // @include report_data.js
  // @include report_view.js
  // @include report_tree.js
  // @include report_chart.js
  // @include report_interaction.js

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
