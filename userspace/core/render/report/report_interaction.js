// What the pointer and the controls do: hit testing, zoom and pan, the
// tooltip, the header, and the toolbar (depth, C calls, I/O, search).
// Part of report.js's one function scope (see there).

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
    // Without waiting data no gap can be seen (analysis/bubbles.h): not 0 but unknown.
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
