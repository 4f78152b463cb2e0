// The call tree (T): virtualized rows (only those on screen exist), lane
// groups and I/O lines; the selection; and the detail panel of a span.
// Part of report.js's one function scope (see there).

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

  // print_tree's I/O lines: one argument bare (docs/design/capture.md, "The text tree"),
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
