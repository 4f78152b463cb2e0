// The page of an analysis result (`mlprof top --html`, `mlprof diff --html`;
// docs/store.md). Reads the JSON block with id "mlprof-analysis", written by
// python/mlflow_profiler/analysis.py and wrapped by the core
// (export_html.cpp to_html_analysis):
//   {title, facts: [[name, value]], notes: [text], columns: [{name, help}],
//    rows: [{cells: [[text, sort key]], path: [names root first],
//            mark: "regression" | "improvement" | null, note}],
//    result: the result's JSON (--format json)}
// The cells' text is formatted in Python with the core's format_duration, so
// the page reads exactly like the text table. As in report.js: user text
// only goes through textContent, and nothing is fetched or stored.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);

  window.addEventListener("error", (ev) => {
    const box = $("error");
    box.hidden = false;
    box.textContent = "The page could not be shown: " + (ev.error ? ev.error.message : ev.message);
  });

  function el(tag, className, text) {
    const e = document.createElement(tag);
    if (className) e.className = className;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  const data = JSON.parse($("mlprof-analysis").textContent);
  const columns = data.columns || [];
  const rows = data.rows || [];

  document.title = data.title;
  $("title").textContent = data.title;
  for (const [name, value] of data.facts || []) {
    const d = el("div");
    d.append(el("dt", "", name), el("dd", "", value));
    $("facts").append(d);
  }
  for (const note of data.notes || []) $("warnings").append(el("li", "", note));

  // The header: one cell per column, then the path.
  const head = el("tr");
  const ths = [];
  columns.forEach((c, i) => {
    const th = el("th", "num", c.name);
    if (c.help) th.title = c.help;
    th.tabIndex = 0;
    th.addEventListener("click", () => sortBy(i));
    th.addEventListener("keydown", (ev) => { if (ev.key === "Enter") sortBy(i); });
    ths.push(th);
    head.append(th);
  });
  const pathTh = el("th", "path", "path");
  pathTh.tabIndex = 0;
  pathTh.addEventListener("click", () => sortBy(columns.length));
  pathTh.addEventListener("keydown", (ev) => { if (ev.key === "Enter") sortBy(columns.length); });
  ths.push(pathTh);
  head.append(pathTh);
  $("paths").tHead.append(head);

  // A path reads root to leaf as the text table writes it (a/b/c): the
  // ancestors muted, the step itself bold.
  function pathCell(row) {
    const td = el("td", "path");
    const names = row.path || [];
    td.title = names.join("/");
    if (row.mark) td.append(el("span", "badge " + row.mark, row.mark), " ");
    if (names.length > 1) td.append(el("span", "ancestors", names.slice(0, -1).join("/") + "/"));
    td.append(el("span", "leaf", names.length ? names[names.length - 1] : ""));
    if (row.note) td.append(el("span", "row-note", " " + row.note));
    return td;
  }

  const trs = rows.map((row, index) => {
    const tr = el("tr");
    if (row.mark) tr.classList.add(row.mark);
    tr.dataset.index = String(index);
    for (const [text] of row.cells) tr.append(el("td", "num", text));
    tr.append(pathCell(row));
    return tr;
  });
  const body = $("paths").tBodies[0];
  body.append(...trs);

  // Sorting: by the column's sort key (null last whichever way), then by the
  // original order, so equal keys keep the result's ranking.
  let sorted = { column: -1, descending: false };
  function key(index, column) {
    const row = rows[index];
    return column < columns.length ? row.cells[column][1] : (row.path || []).join("/");
  }
  function sortBy(column) {
    const descending = sorted.column === column ? !sorted.descending : column < columns.length;
    sorted = { column, descending };
    const order = rows.map((_, i) => i);
    order.sort((a, b) => {
      const ka = key(a, column), kb = key(b, column);
      if (ka === null || kb === null) return ka === kb ? a - b : (ka === null ? 1 : -1);
      if (ka < kb) return descending ? 1 : -1;
      if (ka > kb) return descending ? -1 : 1;
      return a - b;
    });
    body.append(...order.map((i) => trs[i]));
    ths.forEach((th, i) => {
      if (i === column) th.setAttribute("aria-sort", descending ? "descending" : "ascending");
      else th.removeAttribute("aria-sort");
    });
  }

  // The filter keeps the rows whose path contains the text (any case).
  const count = $("filter-count");
  function filter() {
    const needle = $("filter").value.trim().toLowerCase();
    let shown = 0;
    rows.forEach((row, i) => {
      const hit = !needle || (row.path || []).join("/").toLowerCase().includes(needle);
      trs[i].hidden = !hit;
      if (hit) shown += 1;
    });
    count.textContent = needle ? shown + " of " + rows.length + " paths" : rows.length + " paths";
  }
  $("filter").addEventListener("input", filter);
  filter();

  // Drawn: what tests (and a reader's console) can ask of the page.
  window.mlprofAnalysis = { kind: data.kind, rows: rows.length, sortBy };
})();
