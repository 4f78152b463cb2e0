"""speedscope, a real consumer, imports our Chrome trace, speedscope and
folded files: its own built page (npm package) opened from file:// in headless
Chromium, each file given to its file input as a person would, then its
Sandwich view (a DOM table) read back."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import _report_model as model
import pytest
from _browser import console_errors, require_browser, speedscope_index, start_chromium, wait_for
from _helpers import qn
from conftest import ENGINES

from mlflow_profiler import profiling

# Format -> (file name, how speedscope says it imported it).
FORMATS = {
    "speedscope": ("predict.speedscope.json", "Importing as speedscope json file"),
    "chrome_trace": ("predict.trace.json", "Importing as Trace Event Format profile"),
    "folded": ("predict.folded", "Importing as collapsed stack format"),
}


@pytest.fixture(scope="module", params=ENGINES)
def captured(request, tmp_path_factory):
    """The model program's session and its document."""
    df = model.frame()
    with profiling(depth=3, capture_io=True, all_threads=True, engine=request.param) as session:
        model.Model().predict(df)
    return SimpleNamespace(
        session=session,
        doc=json.loads(session.to_json()),
        dir=tmp_path_factory.mktemp(f"ss-{request.param}"),
    )


@pytest.fixture(scope="module")
def speedscope():
    require_browser()
    index = speedscope_index()
    driver = start_chromium(1400, 2400)  # tall: the Sandwich table shows every row
    yield SimpleNamespace(driver=driver, url=index.as_uri())
    driver.quit()


def lane_names(doc, lane: int):
    """Display names of the spans of one lane (thread), as the document has them."""
    strings, functions = doc["strings"], doc["functions"]
    return {strings[row[2] or functions[row[1]][0]] for row in doc["spans"] if row[3] == lane}


def duration_ns(doc, name: str) -> int:
    strings, functions = doc["strings"], doc["functions"]
    row = next(r for r in doc["spans"] if strings[r[2] or functions[r[1]][0]] == name)
    return row[7] - row[6]


def self_ns(doc, name: str) -> int:
    """A span's wall time less its children's in the same thread."""
    strings, functions, spans = doc["strings"], doc["functions"], doc["spans"]
    i = next(k for k, r in enumerate(spans) if strings[r[2] or functions[r[1]][0]] == name)
    children = [r for r in spans if r[0] == i and r[3] == spans[i][3]]
    return spans[i][7] - spans[i][6] - sum(r[7] - r[6] for r in children)


def sandwich_rows(driver):
    """The Sandwich view's table: [(total, self, symbol name)]."""
    return driver.execute_script(
        """
        const rows = [];
        for (const tr of document.querySelectorAll('table tr')) {
          const cells = [...tr.children].map((td) => td.innerText.trim());
          if (cells.length === 3 && /%\\)$/.test(cells[0])) rows.push(cells);
        }
        return rows;
        """
    )


def import_into_speedscope(driver, url, path):
    console_errors(driver)
    driver.get(url)
    wait_for(
        lambda: driver.find_elements("css selector", "input[type=file]"),
        what="speedscope's landing page",
    )
    driver.find_element("css selector", "input[type=file]").send_keys(str(path))
    wait_for(
        lambda: driver.title != "speedscope" and driver.title.endswith(" - speedscope"),
        what=f"speedscope to load {path.name}",
    )
    driver.find_element("xpath", "//*[normalize-space(text())='Sandwich']").click()
    return wait_for(lambda: sandwich_rows(driver), what="the Sandwich table")


def ms(text: str) -> float:
    """speedscope's "51.23ms (99%)" / "161.14µs (0.31%)" as milliseconds."""
    m = re.match(r"([\d.]+)(ms|µs|ns|s)\b", text)
    assert m, text
    return float(m.group(1)) * {"s": 1e3, "ms": 1.0, "µs": 1e-3, "ns": 1e-6}[m.group(2)]


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_speedscope_imports_the_export(speedscope, captured, fmt):
    driver = speedscope.driver
    name, importer = FORMATS[fmt]
    path = captured.dir / name
    captured.session.save(path)
    rows = import_into_speedscope(driver, speedscope.url, path)

    # It was recognised as what it claims to be, and nothing failed.
    log = driver.get_log("browser")
    assert any(importer in e["message"] for e in log), [e["message"] for e in log]
    assert [e["message"] for e in log if e["level"] == "SEVERE"] == []
    from selenium.common.exceptions import NoAlertPresentException

    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert.text  # speedscope alerts "Unrecognized format!"
    assert "Something went wrong" not in driver.find_element("tag name", "body").text

    # Profile name: the document's for speedscope's own format, else the file's.
    expected_title = json.loads(path.read_text())["name"] if fmt == "speedscope" else name
    assert driver.title == f"{expected_title} - speedscope"

    # Span names, as the Sandwich table lists them (Chrome trace names carry
    # their args after a space: "run_model {...}").
    symbols = {row[2].split(" {")[0] for row in rows}
    # speedscope opens the first profile of the file: lane 0 for its own
    # format; for a Chrome trace the thread with the lowest tid, which is the
    # worker when the pid counter has wrapped (as it had in CI).
    first = 0
    if fmt == "chrome_trace":
        first = min(
            range(len(captured.doc["lanes"])), key=lambda i: captured.doc["lanes"][i]["native_tid"]
        )
    main = lane_names(captured.doc, first)
    if fmt == "folded":
        # One profile for the whole file: every thread's spans.
        main |= lane_names(captured.doc, 1)
    assert main <= symbols, main - symbols
    if first != 0:
        return  # the worker's profile: the label and Model.predict are in the other one
    assert model.ATTACK in symbols  # user text went through intact
    predict = next(row for row in rows if row[2].split(" {")[0] == qn("Model.predict"))
    if fmt == "folded":
        # Weights are nanoseconds of self time.
        assert int(predict[1].split()[0].replace(",", "")) == self_ns(
            captured.doc, qn("Model.predict")
        )
    else:
        # Timed formats: the root's total is its wall time.
        assert ms(predict[0]) == pytest.approx(
            duration_ns(captured.doc, qn("Model.predict")) / 1e6, abs=0.011
        )


def test_speedscope_lists_one_profile_per_thread(speedscope, captured):
    # Both timeline formats keep threads apart: speedscope's profile list
    # (a DOM table) names the main thread and the worker.
    driver = speedscope.driver
    for fmt in ("speedscope", "chrome_trace"):
        path = captured.dir / FORMATS[fmt][0]
        captured.session.save(path)
        import_into_speedscope(driver, speedscope.url, path)
        profiles = driver.execute_script(
            "return [...document.querySelectorAll('table tr[title]')].map((tr) => tr.title)"
        )
        assert len(profiles) == 2, (fmt, profiles)
        # In the file's order for speedscope's format; by tid for a Chrome trace.
        assert sorted("MainThread" in p for p in profiles) == [False, True], (fmt, profiles)
        assert sorted("vocab-loader" in p for p in profiles) == [False, True], (fmt, profiles)
        if fmt == "speedscope":
            assert "MainThread" in profiles[0], profiles
        assert console_errors(driver) == []
