// The flame chart (C) on a canvas: a track per lane (and per resource),
// rows of rectangles searched by binary search, colors, the axis, the idle
// gaps and the outlines. Part of report.js's one function scope (see there).

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
