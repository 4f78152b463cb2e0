"""The HTML pages of `mlprof top --html` and `mlprof diff --html` (issue 18,
docs/store.md), written by the CLI and opened in real headless Chromium: the
table has a row per path of the result, each row reads like the text
table's, the diff page marks the regressions of the --fail-on-regression
rule, a name that is HTML stays text, and the page logs no error and loads
nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from _browser import console_errors, require_browser, start_chromium, wait_for
from test_analysis import _release

from mlflow_profiler import _core, analysis, profile_span, profiling
from mlflow_profiler.store import open_store

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
    return subprocess.run(
        [sys.executable, "-m", "mlflow_profiler._cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )


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
    run = mlprof(
        "diff",
        db,
        db,
        "--where-a",
        "version=1",
        "--where-b",
        "version=2",
        "--fail-on-regression",
        "50",
        "--limit",
        "1000",
        "--html",
        diff_html,
    )
    assert run.returncode == 1, run.stderr  # the gate fails, and the page is written all the same
    diff_text = run.stdout
    return SimpleNamespace(
        db=db,
        top_html=top_html,
        diff_html=diff_html,
        top_text=top_text,
        diff_text=diff_text,
        top=analysis.top([db], where={"model": "hostile"}),
        diff=analysis.diff(
            [db], [db], where_a={"version": "1"}, where_b={"version": "2"}, threshold=50
        ),
    )


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
    wait_for(
        lambda: driver.execute_script("return !!window.mlprofAnalysis"), what="the page to render"
    )
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
    column titles, up to the notes ("(N more paths", "regressions ...", the
    legends of the columns)."""
    rows = []
    for line in text.splitlines()[2:]:
        if line.startswith(("(", "regressions", "self: ", "off-CPU: ", "on-CPU, ")):
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
    assert [" ".join(r["cells"] + [r["path"]]).split() for r in shown["rows"]] == text_rows(
        pages.top_text
    )
    assert shown["headers"][:2] == ["share", "calls"] and shown["headers"][-1] == "path"
    assert ["inputs", str(pages.db)] in shown["facts"] and ["where", "model=hostile"] in shown[
        "facts"
    ]


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
    table = [
        line.split()
        for line in lines[start:]
        if not line.startswith(("(", "regression:", "inconclusive:"))
    ]
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
        "return [...document.querySelectorAll('#paths tbody tr')].map((tr) => tr.querySelector('td.path').title)"
    )
    ranked = order()
    headers = browser.find_elements("css selector", "#paths th")
    headers[-1].click()  # path: alphabetical
    assert order() == sorted(ranked)
    assert headers[-1].get_attribute("aria-sort") == "ascending"
    headers[1].click()  # calls: most first
    calls = {"/".join(r.path): r.count for r in pages.top.rows}
    assert [calls[p] for p in order()] == sorted(calls.values(), reverse=True)
    assert (
        headers[1].get_attribute("aria-sort") == "descending"
        and headers[-1].get_attribute("aria-sort") is None
    )
    box = browser.find_element("id", "filter")
    box.send_keys("script>")
    visible = browser.execute_script(
        "return [...document.querySelectorAll('#paths tbody tr')].filter((tr) => !tr.hidden).length"
    )
    assert visible == sum(1 for r in pages.top.rows if HOSTILE in "/".join(r.path)) >= 1
    assert (
        browser.find_element("id", "filter-count").text
        == f"{visible} of {len(pages.top.rows)} paths"
    )
    assert console_errors(browser) == []


def test_the_page_is_the_cores_template_around_a_json_object():
    page = _core.analysis_html('{"title": "t", "columns": [], "rows": []}')
    assert page.startswith("<!DOCTYPE html>") and 'id="mlprof-analysis"' in page
    assert "table.paths" in page  # report.css, inlined: the report's look
    with pytest.raises(ValueError, match="JSON object"):
        _core.analysis_html("[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        _core.analysis_html("{not json")


# --- the diff page's differential flame graph (userspace/core/render/report/diff_flame.js) ---

RED, GREEN, GREY = "rgb(224, 84, 76)", "rgb(63, 157, 90)", "rgb(207, 213, 219)"  # report.css


def flame_frames(driver) -> dict:
    """What the flame graph shows: per frame (by its path joined with '/')
    its left edge and width in px from the graph's left edge, its row, its
    fill colour, its background image (hatching) and its text."""
    return driver.execute_script("""
        const box = document.getElementById('flame').getBoundingClientRect();
        const out = {};
        for (const e of document.querySelectorAll('#flame .frame')) {
          const r = e.getBoundingClientRect(), s = getComputedStyle(e);
          out[JSON.parse(e.dataset.path).join('/')] = {x: r.left - box.left, width: r.width,
            row: Math.round((r.top - box.top) / 18), bg: s.backgroundColor, image: s.backgroundImage,
            text: e.textContent};
        }
        return {width: box.width, frames: out};
    """)


def test_diff_page_flame_graph_is_b_wide_and_coloured_by_the_verdicts(pages, browser):
    """The CLI's page for the two releases: the root spans the graph, each
    step's width is its share of B's time per root call, the regressions
    (decode and the root holding it) are red, the unchanged encode grey."""
    open_page(browser, pages.diff_html)
    assert console_errors(browser) == []
    shown = flame_frames(browser)
    paths = {p.name: p for p in pages.diff.paths}
    root = next(p for p in pages.diff.paths if len(p.path) == 1)
    assert set(shown["frames"]) == set(paths)
    W = shown["width"]
    for name, f in shown["frames"].items():
        p = paths[name]
        assert f["row"] == len(p.path) - 1, name
        assert f["width"] == pytest.approx(W * p.b_ns / root.b_ns, abs=1.0), name
        assert f["bg"] == {"regression": RED, "improvement": GREEN}.get(p.verdict, GREY), (
            name,
            p.verdict,
        )
    decode = next(n for n in paths if n.endswith("/_rel_decode"))
    encode = next(n for n in paths if n.endswith("/_encode"))
    assert paths[decode].verdict == "regression" and shown["frames"][decode]["bg"] == RED
    assert paths[encode].verdict == "pass" and shown["frames"][encode]["bg"] == GREY
    assert shown["frames"][root.name]["width"] == pytest.approx(W, abs=0.5)


def _hand_made_diff() -> dict:
    """A diff JSON of the shape Diff.to_json gives, with every verdict: ms per root call."""

    def entry(path, a, b, verdict, change=None, ci=None, gated=True):
        ms = lambda v: None if v is None else v * 1e6  # noqa: E731
        return {
            "path": path,
            "a_ns": ms(a),
            "b_ns": ms(b),
            "change_pct": change,
            "ci_pct": ci,
            "gated": gated,
            "verdict": verdict,
            "p_holm": 0.0004 if verdict == "regression" else None,
            "runs_a": 8,
            "runs_b": 8,
        }

    return {
        "confidence": 0.95,
        "verdict": "regression",
        "paths": [
            entry(["predict"], 8, 10, "regression", 25.0, [10.0, 40.0]),
            entry(["predict", "load"], 2, 2, "pass", 0.4, [-3.0, 4.1]),
            entry(["predict", "score"], 2.6, 4, "regression", 53.8, [30.2, 80.0]),
            entry(["predict", "score", "forward"], 1.5, 3, "regression", 100.0, [70.0, 130.0]),
            entry(
                ["predict", "score", "forward", "relu"],
                1,
                1,
                "ungated",
                0.0,
                [-1.0, 1.0],
                gated=False,
            ),
            entry(["predict", "post"], 1.5, 1, "improvement", -33.3, [-40.0, -25.0]),
            entry(["predict", "cache"], 1, None, "only_a"),
            entry(["predict", "warm"], None, 0.5, "only_b"),
            entry(["predict", "fetch"], 0.9, 1, "inconclusive", 11.0, [-2.0, 30.0]),
            entry(["predict", "log"], 0.1, 0.2, "ungated", 100.0, [50.0, 150.0], gated=False),
        ],
    }


def test_flame_graph_of_every_verdict_with_tooltip_and_zoom(browser, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains

    result = _hand_made_diff()
    payload = {
        "kind": "diff",
        "title": "diff: hand-made",
        "facts": [],
        "notes": [],
        "columns": [],
        "rows": [],
        "result": result,
    }
    page = tmp_path / "hand.html"
    page.write_text(_core.analysis_html(json.dumps(payload)))
    open_page(browser, page)
    assert console_errors(browser) == []
    shown = flame_frames(browser)
    frames, W = shown["frames"], shown["width"]
    assert len(frames) == len(result["paths"])
    # Width: B's time over the root's B (10 ms); a path only in A: A's time.
    widths = {
        "predict": 10,
        "predict/load": 2,
        "predict/score": 4,
        "predict/score/forward": 3,
        "predict/score/forward/relu": 1,
        "predict/post": 1,
        "predict/cache": 1,
        "predict/warm": 0.5,
        "predict/fetch": 1,
        "predict/log": 0.2,
    }
    for name, ms in widths.items():
        assert frames[name]["width"] == pytest.approx(W * ms / 10, abs=1.0), name
    # Children side by side inside their parent, by name.
    kids = sorted((n for n in frames if n.count("/") == 1), key=lambda n: frames[n]["x"])
    assert [n.split("/")[1] for n in kids] == [
        "cache",
        "fetch",
        "load",
        "log",
        "post",
        "score",
        "warm",
    ]
    # Colour: the verdict only; a one-sided path hatched, each side its own way.
    assert (
        frames["predict"]["bg"]
        == frames["predict/score"]["bg"]
        == frames["predict/score/forward"]["bg"]
        == RED
    )
    assert frames["predict/post"]["bg"] == GREEN
    for name in ("predict/load", "predict/fetch", "predict/log", "predict/score/forward/relu"):
        assert (
            frames[name]["bg"] == GREY and frames[name]["image"] == "none"
        ), name  # +100% ungated: still grey
    for name in ("predict/cache", "predict/warm"):
        assert frames[name]["image"].startswith("repeating-linear-gradient"), name
    assert frames["predict/cache"]["image"] != frames["predict/warm"]["image"]
    # The tooltip: A, B, the change and its interval, the verdict.
    score = browser.find_element("css selector", '#flame .frame[data-path=\'["predict","score"]\']')
    ActionChains(browser).move_to_element(score).perform()
    tip = browser.find_element("id", "tooltip")
    assert tip.is_displayed()
    lines = lambda: [" ".join(line.split()) for line in tip.text.splitlines()]  # noqa: E731
    assert lines() == [
        "predict/score",
        "A 2.60ms B 4.00ms per root call",
        "change +53.8% 95% CI [+30.2%, +80.0%]",
        "verdict: regression (gated, p 0.00040 Holm)",
        "runs A/B 8/8",
    ]
    cache = browser.find_element("css selector", '#flame .frame[data-path=\'["predict","cache"]\']')
    ActionChains(browser).move_to_element(cache).perform()
    assert lines()[1] == "only in A: 1.00ms per root call"
    # Click zooms: the frame and its ancestors span the graph, its children
    # scale with it, the other steps leave; Escape and Back undo.
    score.click()
    zoomed = flame_frames(browser)["frames"]
    assert set(zoomed) == {
        "predict",
        "predict/score",
        "predict/score/forward",
        "predict/score/forward/relu",
    }
    assert zoomed["predict"]["width"] == pytest.approx(W, abs=0.5)
    assert zoomed["predict/score"]["width"] == pytest.approx(W, abs=0.5)
    assert zoomed["predict/score/forward"]["width"] == pytest.approx(W * 3 / 4, abs=1.0)
    assert browser.find_element("id", "flame-focus").text.startswith(
        "zoomed to predict/score (4.00ms)"
    )
    browser.find_element("css selector", "body").send_keys("\ue00c")  # Escape
    assert len(flame_frames(browser)["frames"]) == len(result["paths"])
    browser.find_element("id", "flame-back").click()
    assert set(flame_frames(browser)["frames"]) == set(zoomed)
    assert console_errors(browser) == []


def test_children_wider_than_their_parent_are_squeezed_into_it(browser, tmp_path):
    """Medians need not add up: children whose B times sum past their
    parent's share its width in proportion; a table page has no graph."""
    result = {
        "confidence": 0.95,
        "paths": [
            {
                "path": ["p"],
                "a_ns": 1e6,
                "b_ns": 1e6,
                "change_pct": 0.0,
                "ci_pct": [-1, 1],
                "gated": True,
                "verdict": "pass",
            },
            {
                "path": ["p", "a"],
                "a_ns": 9e5,
                "b_ns": 9e5,
                "change_pct": 0.0,
                "ci_pct": None,
                "gated": True,
                "verdict": "pass",
            },
            {
                "path": ["p", "b"],
                "a_ns": 3e5,
                "b_ns": 3e5,
                "change_pct": 0.0,
                "ci_pct": None,
                "gated": True,
                "verdict": "pass",
            },
        ],
    }
    page = tmp_path / "squeeze.html"
    page.write_text(
        _core.analysis_html(
            json.dumps(
                {
                    "kind": "diff",
                    "title": "t",
                    "facts": [],
                    "notes": [],
                    "columns": [],
                    "rows": [],
                    "result": result,
                }
            )
        )
    )
    open_page(browser, page)
    shown = flame_frames(browser)
    W = shown["width"]
    assert shown["frames"]["p/a"]["width"] == pytest.approx(W * 0.75, abs=1.0)
    assert shown["frames"]["p/b"]["width"] == pytest.approx(W * 0.25, abs=1.0)
    open_page(browser, _top_page(tmp_path))
    assert browser.execute_script("return document.getElementById('flame-section').hidden") is True
    assert console_errors(browser) == []


def _top_page(tmp_path):
    page = tmp_path / "t.html"
    page.write_text(
        _core.analysis_html(
            json.dumps(
                {
                    "kind": "top",
                    "title": "t",
                    "facts": [],
                    "notes": [],
                    "columns": [],
                    "rows": [],
                    "result": {},
                }
            )
        )
    )
    return page


def test_top_by_function_page_reads_like_its_text(pages, browser, tmp_path):
    """`top --by function`'s page: pprof's columns, a row per function,
    each reading like the text table's."""
    result = analysis.top([pages.db], where={"model": "hostile"}, by="function")
    page = result.write_html(tmp_path / "functions.html", inputs=[str(pages.db)])
    shown = open_page(browser, Path(page))
    assert console_errors(browser) == [] and shown["error"] == ""
    assert shown["headers"] == ["flat", "flat%", "sum%", "cum", "cum%", "calls", "waiting", "path"]
    assert shown["title"] == result.to_text().splitlines()[0]
    text = [
        line.split() for line in result.to_text(limit=None).splitlines()[2:-1]
    ]  # the legend aside
    assert [" ".join(r["cells"] + [r["path"]]).split() for r in shown["rows"]] == text
    assert any(r["path"].startswith(HOSTILE + " (") for r in shown["rows"]) and shown["markup"] == 0
