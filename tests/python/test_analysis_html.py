"""The HTML pages of `mlprof top --html` and `mlprof diff --html` (issue 18,
docs/store.md), written by the CLI and opened in real headless Chromium: the
table has a row per path of the result, each row reads like the text
table's, the diff page marks the regressions of the --fail-on-regression
rule, a name that is HTML stays text, and the page logs no error and loads
nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from _browser import console_errors, require_browser, start_chromium, wait_for
from mlflow_profiler import _core, analysis, profile_span, profiling
from mlflow_profiler.store import open_store
from test_analysis import _release

HOSTILE = "</script><b>x"  # a name that would end the page's JSON block, or become markup


def _spin(n):
    t = 0
    for i in range(n):
        t += i
    return t


@profile_span(HOSTILE)
def _hostile(n):
    return _spin(n)


def _predict(n):
    return _spin(n), _hostile(n // 2)


def mlprof(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlflow_profiler._cli", *map(str, args)], capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """A store of captures (for top) and of two releases (for diff), the
    pages the CLI wrote for them, and the results and text the same
    commands give."""
    tmp = tmp_path_factory.mktemp("pages")
    db = tmp / "profiles.db"
    base, cand = _release(False), _release(True)
    with open_store(db) as store:
        for _ in range(3):
            with profiling(depth=-1) as session:
                _predict(5_000)
            store.add(session, labels={"model": "hostile"})
        for s in base:
            store.add(s, labels={"version": "1"})
        for s in cand:
            store.add(s, labels={"version": "2"})
    top_html, diff_html = tmp / "top.html", tmp / "diff.html"
    run = mlprof("top", db, "--where", "model=hostile", "--limit", "1000", "--html", top_html)
    assert run.returncode == 0, run.stderr
    assert f"{top_html}: HTML page of " in run.stderr
    top_text = run.stdout
    run = mlprof("diff", db, db, "--where-a", "version=1", "--where-b", "version=2", "--fail-on-regression", "50",
                 "--limit", "1000", "--html", diff_html)
    assert run.returncode == 1, run.stderr  # the gate fails, and the page is written all the same
    diff_text = run.stdout
    return SimpleNamespace(
        db=db, top_html=top_html, diff_html=diff_html, top_text=top_text, diff_text=diff_text,
        top=analysis.top([db], where={"model": "hostile"}),
        diff=analysis.diff([db], [db], where_a={"version": "1"}, where_b={"version": "2"}, threshold=50))


@pytest.fixture(scope="module")
def browser():
    require_browser()
    driver = start_chromium()
    yield driver
    driver.quit()


def open_page(driver, path: Path) -> dict:
    """Opens a page and returns what it shows: the title, facts, notes, and
    per table row its cell texts, path text, classes and badge."""
    console_errors(driver)  # drop what earlier pages left
    driver.get(path.as_uri())
    wait_for(lambda: driver.execute_script("return !!window.mlprofAnalysis"), what="the page to render")
    return driver.execute_script("""
        const rows = [...document.querySelectorAll('#paths tbody tr')].map((tr) => ({
          cells: [...tr.querySelectorAll('td.num')].map((td) => td.textContent),
          path: tr.querySelector('td.path .ancestors') ?
            tr.querySelector('td.path .ancestors').textContent + tr.querySelector('td.path .leaf').textContent :
            tr.querySelector('td.path .leaf').textContent,
          leaf: tr.querySelector('td.path .leaf').textContent,
          classes: [...tr.classList],
          badge: tr.querySelector('.badge') ? tr.querySelector('.badge').textContent : null,
          hidden: tr.hidden,
        }));
        return {
          title: document.title, h1: document.getElementById('title').textContent,
          facts: [...document.querySelectorAll('#facts div')].map((d) => [d.querySelector('dt').textContent,
                                                                         d.querySelector('dd').textContent]),
          notes: [...document.querySelectorAll('#warnings li')].map((li) => li.textContent),
          headers: [...document.querySelectorAll('#paths th')].map((th) => th.textContent),
          rows,
          markup: document.querySelectorAll('#paths b, #header b').length,
          error: document.getElementById('error').hidden ? '' : document.getElementById('error').textContent,
          resources: performance.getEntriesByType('resource').length,
        };
    """)


def text_rows(text: str) -> list:
    """The table rows of to_text, as words: the lines after the title and the
    column titles, up to the notes ("(N more paths", "regressions ...")."""
    rows = []
    for line in text.splitlines()[2:]:
        if line.startswith(("(", "regressions")):
            break
        rows.append(line.split())
    return rows


def test_top_page_has_a_row_per_path_reading_like_the_text(pages, browser):
    shown = open_page(browser, pages.top_html)
    assert console_errors(browser) == [] and shown["error"] == ""
    assert shown["resources"] == 0  # nothing fetched: one self-contained file
    result = pages.top
    assert len(shown["rows"]) == len(result.rows) > 3
    assert shown["title"] == shown["h1"] == pages.top_text.splitlines()[0]
    assert [r["path"] for r in shown["rows"]] == ["/".join(r.path) for r in result.rows]
    # Each row: the text table's row, cell for cell.
    assert [" ".join(r["cells"] + [r["path"]]).split() for r in shown["rows"]] == text_rows(pages.top_text)
    assert shown["headers"][:2] == ["share", "calls"] and shown["headers"][-1] == "path"
    assert ["inputs", str(pages.db)] in shown["facts"] and ["where", "model=hostile"] in shown["facts"]


def test_a_name_that_is_html_shows_as_text(pages, browser):
    html = pages.top_html.read_text()
    assert HOSTILE not in html and "\\u003c/script>\\u003cb>x" in html
    shown = open_page(browser, pages.top_html)
    assert console_errors(browser) == []
    leaves = [r["leaf"] for r in shown["rows"]]
    assert HOSTILE in leaves
    assert any(r["path"].endswith("/" + HOSTILE) for r in shown["rows"])
    assert shown["markup"] == 0  # no <b> element came from the name


def test_diff_page_marks_the_regressions_of_the_gate(pages, browser):
    shown = open_page(browser, pages.diff_html)
    assert console_errors(browser) == [] and shown["error"] == ""
    result = pages.diff
    assert len(shown["rows"]) == len(result.paths)
    assert [r["path"] for r in shown["rows"]] == [p.name for p in result.paths]
    # The table's cells are the text's (the text's header lines and the spelled-out verdicts aside).
    lines = pages.diff_text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:3] == ["A", "B", "change"]) + 1
    table = [line.split() for line in lines[start:] if not line.startswith(("(", "regression:", "inconclusive:"))]
    assert [" ".join(r["cells"] + [r["path"]]).split() for r in shown["rows"]] == table
    # The title says what was compared.
    db = str(pages.db)
    assert shown["title"] == f"diff: A {db} (version=1) vs B {db} (version=2)"
    assert ["A", f"{db} (version=1), 25 runs (25 root calls)"] in shown["facts"]
    bad = {p.name for p in result.regressions()}
    assert len(bad) == 2  # decode, and predict whose wall time holds it
    marked = {r["path"] for r in shown["rows"] if "regression" in r["classes"]}
    assert marked == bad
    assert all(r["badge"] == "regression" for r in shown["rows"] if r["path"] in bad)
    assert shown["notes"][0] == "verdict: regression in 2 paths (exit 1)"
    assert ["verdict", "regression"] in shown["facts"]
    # The unchanged step is not marked either way.
    encode = next(r for r in shown["rows"] if r["path"].endswith("/_encode"))
    assert encode["classes"] == [] and encode["badge"] is None


def test_sorting_and_filtering(pages, browser):
    open_page(browser, pages.top_html)
    order = lambda: browser.execute_script(  # noqa: E731
        "return [...document.querySelectorAll('#paths tbody tr')].map((tr) => tr.querySelector('td.path').title)")
    ranked = order()
    headers = browser.find_elements("css selector", "#paths th")
    headers[-1].click()  # path: alphabetical
    assert order() == sorted(ranked)
    assert headers[-1].get_attribute("aria-sort") == "ascending"
    headers[1].click()  # calls: most first
    calls = {"/".join(r.path): r.count for r in pages.top.rows}
    assert [calls[p] for p in order()] == sorted(calls.values(), reverse=True)
    assert headers[1].get_attribute("aria-sort") == "descending" and headers[-1].get_attribute("aria-sort") is None
    box = browser.find_element("id", "filter")
    box.send_keys("script>")
    visible = browser.execute_script(
        "return [...document.querySelectorAll('#paths tbody tr')].filter((tr) => !tr.hidden).length")
    assert visible == sum(1 for r in pages.top.rows if HOSTILE in "/".join(r.path)) >= 1
    assert browser.find_element("id", "filter-count").text == f"{visible} of {len(pages.top.rows)} paths"
    assert console_errors(browser) == []


def test_the_page_is_the_cores_template_around_a_json_object():
    page = _core.analysis_html('{"title": "t", "columns": [], "rows": []}')
    assert page.startswith("<!DOCTYPE html>") and 'id="mlprof-analysis"' in page
    assert "table.paths" in page  # report.css, inlined: the report's look
    with pytest.raises(ValueError, match="JSON object"):
        _core.analysis_html("[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        _core.analysis_html("{not json")
