"""The HTML report on big profiles, measured in headless Chromium.

For each size (default 100k and 1M spans) it captures a real session of a
predict-like call tree (predict -> batch -> row -> feature, depth 3), saves
it as .html, opens it in Debian's chromium (Selenium + chromium-driver, as
the browser tests do) and reports:

- file size, and the time session.save() took to write it;
- time to first render: navigation start to the page drawn (chart, header,
  first tree rows), as the page measures it, and the wall time seen from
  the driver;
- search: a term that matches 90% of the spans and one that matches one;
- zoom: to a span (a batch) and back to the whole session, redraw included;
- redraw of the full range, expand-all of the tree;
- the page's JS memory once loaded (heap plus typed-array backing stores).

    python bench/bench_html.py                     # 100k and 1M
    python bench/bench_html.py --spans 100000 --json bench/out/html.json

Needs the package importable (PYTHONPATH from scripts/devpath.sh or an
install) and `apt-get install chromium chromium-driver; pip install selenium`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))

from _browser import browser_missing, start_chromium  # noqa: E402

from mlflow_profiler import profiling  # noqa: E402

ROWS = 100  # rows per batch
FEATURES = 9  # features per row: a batch is 1 + 100 + 900 = 1001 spans


def feature(x, k):
    return x + k


def row(x):
    for k in range(FEATURES):
        feature(x, k)


def batch(b):
    for r in range(ROWS):
        row(r)


def predict(batches):
    for b in range(batches):
        batch(b)


def capture(spans: int):
    batches = max(1, round((spans - 1) / (1 + ROWS + ROWS * FEATURES)))
    with profiling(depth=3, max_events=4 * spans + 1000) as session:
        predict(batches)
    return session


def median_ms(fn, repeats: int) -> float:
    return statistics.median(fn() for _ in range(repeats))


def measure(driver, spans: int, workdir: Path, repeats: int) -> dict:
    session = capture(spans)
    path = workdir / f"report_{spans}.html"
    t = time.perf_counter()
    session.save(path)
    save_ms = (time.perf_counter() - t) * 1e3
    del session

    t = time.perf_counter()
    driver.get(path.as_uri())
    while not driver.execute_script("return !!window.mlprofReport"):
        time.sleep(0.01)
    open_wall_ms = (time.perf_counter() - t) * 1e3
    api = "return window.mlprofReport"
    timings = driver.execute_script(api + ".timings")
    count = driver.execute_script(api + ".spans")
    result = {
        "spans": count,
        "file_mb": round(path.stat().st_size / 2**20, 1),
        "save_ms": round(save_ms),
        "first_render_ms": round(timings["ready_ms"]),
        "script_ms": round(timings["first_render_ms"]),
        "json_parse_ms": round(timings["parse_ms"]),
        "open_wall_ms": round(open_wall_ms),
        "search_90pct_ms": round(
            median_ms(lambda: driver.execute_script(api + ".search('feature')"), repeats), 1
        ),
        "search_count": driver.find_element("id", "search-count").text,
        "search_one_ms": round(
            median_ms(lambda: driver.execute_script(api + ".search('predict')"), repeats), 1
        ),
    }
    driver.execute_script(api + ".search('')")
    # A batch in the middle: span 1 + k * 1001 is the k-th batch.
    mid = 1 + (count // 1001 // 2) * 1001
    result["zoom_ms"] = round(
        median_ms(lambda: driver.execute_script(api + f".zoomToSpan({mid})"), repeats), 1
    )
    result["redraw_zoomed_ms"] = round(
        median_ms(lambda: driver.execute_script(api + ".redraw()"), repeats), 1
    )
    driver.find_element("id", "zoom-reset").click()
    result["redraw_full_ms"] = round(
        median_ms(lambda: driver.execute_script(api + ".redraw()"), repeats), 1
    )
    result["rects_drawn_full"] = driver.execute_script(api + ".lastDraw()")["drawn"]
    result["expand_all_ms"] = round(driver.execute_script(api + ".expandAll()"), 1)
    result["dom_rows"] = driver.execute_script(
        "return document.querySelectorAll('#tree .row').length"
    )
    # The DevTools protocol's figure: performance.memory is bucketed and stale.
    driver.execute_cdp_cmd("HeapProfiler.collectGarbage", {})
    # Typed arrays live outside the JS heap, in backing stores: count both.
    heap = driver.execute_cdp_cmd("Runtime.getHeapUsage", {})
    result["js_heap_mb"] = round((heap["usedSize"] + heap.get("backingStorageSize", 0)) / 2**20)
    errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    result["console_errors"] = errors
    path.unlink()
    return result


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--spans", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument(
        "--repeats", type=int, default=5, help="median of this many runs per interaction"
    )
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    why = browser_missing()
    if why:
        print(f"bench_html: {why}", file=sys.stderr)
        return 2
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        driver = start_chromium(1400, 1000)
        try:
            driver.set_script_timeout(120)
            driver.set_page_load_timeout(300)
            for spans in args.spans:
                r = measure(driver, spans, Path(tmp), args.repeats)
                print(json.dumps(r), flush=True)
                results.append(r)
        finally:
            driver.quit()
    version = driver.capabilities.get("browserVersion", "?") if results else "?"
    print(
        f"\nHTML report, headless Chromium {version}, {os.cpu_count()} cores; median of {args.repeats}\n"
    )
    keys = [
        "spans",
        "file_mb",
        "save_ms",
        "first_render_ms",
        "json_parse_ms",
        "search_90pct_ms",
        "search_one_ms",
        "zoom_ms",
        "redraw_zoomed_ms",
        "redraw_full_ms",
        "expand_all_ms",
        "dom_rows",
        "js_heap_mb",
    ]
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in results:
        print("| " + " | ".join(str(r.get(k)) for k in keys) + " |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))
    return 1 if any(r["console_errors"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
