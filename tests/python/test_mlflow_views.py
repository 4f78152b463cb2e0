"""What a user sees in MLflow's own UI and in the report for a real model
(issue 17): a FraudScorer (pandas features, an sklearn pipeline) served by
autoprofile, its profile recorded as a trace and as metrics on a real
`mlflow server`, opened in headless Chromium. The screenshots go to the CI
artifacts (MLPROF_TEST_ARTIFACTS) as mlflow_trace_view_after.png,
mlflow_metrics_tab_after.png and report_fraud_model_after_pyXY.png, next to
the same views before issue 17 (docs/screenshots/before-issue17, copied as
*_before.png)."""

from __future__ import annotations

import pathlib
import re
import shutil
import struct
import sys
import time

import pytest
from _browser import artifact_dir, require_browser, start_chromium, wait_for
from _helpers import require_mlflow
from _mlflow_fixtures import mlflow_warning_filters, server_store, tracking_server  # noqa: F401

from mlflow_profiler.mlflow_sink import METRIC_STATS

mlflow = require_mlflow()

import _fraud_model  # noqa: E402

import mlflow_profiler  # noqa: E402
from mlflow_profiler import _autoprofile  # noqa: E402

pytestmark = mlflow_warning_filters() + [
    pytest.mark.filterwarnings("ignore:.*type hint:UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]


BEFORE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "screenshots" / "before-issue17"


@pytest.fixture(scope="module")
def fraud(tmp_path_factory):
    return _fraud_model.save_and_load(tmp_path_factory.mktemp("fraud"))


@pytest.fixture
def browser():
    require_browser()
    driver = start_chromium(1600, 1000)
    try:
        yield driver
    finally:
        driver.quit()


def _profile(model, df):
    mlflow_profiler.autoprofile(depth=2)
    try:
        model.predict(df)  # warm: the first call imports and fills caches
        model.predict(df)
        return mlflow_profiler.last_profile()
    finally:
        mlflow_profiler.autoprofile(disable=True)
        _autoprofile._last.set(None)


def _shot(driver, path, min_bytes=30_000):
    assert driver.save_screenshot(str(path))
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 800 and height >= 600
    assert len(data) > min_bytes, f"{path.name}: {len(data)} bytes, a blank page?"


def _wait_text(driver, text, what):
    wait_for(lambda: text in driver.find_element("tag name", "body").text, timeout=60, what=what)


def test_the_trace_view_and_the_metrics_tab(fraud, server_store, browser, tmp_path):
    model, df = fraud
    session = _profile(model, df)
    with mlflow.start_run() as run:
        trace_id = mlflow_profiler.log_profile_trace(session)
        metrics = mlflow_profiler.log_profile_metrics(session)
    mlflow.flush_trace_async_logging()
    trace = mlflow.get_trace(trace_id)
    spans = trace.data.spans
    root = next(s for s in spans if s.parent_id is None)
    children = sorted(
        (s for s in spans if s.parent_id == root.span_id), key=lambda s: s.start_time_ns
    )
    names = [s.name for s in children]
    # MLflow's work is one span, named for what it does, with its calls listed
    # (not 25 spans of 0.00 ms); then the model's steps.
    (group,) = [s for s in children if s.name.startswith("[mlflow")]
    assert [s for s in spans if s.parent_id == group.span_id] == []
    # Its calls, the longest first (which are longest varies: a first
    # inspect.signature can take milliseconds on a loaded machine).
    calls = group.attributes["mlflow_profiler.calls"]
    assert 1 <= len(calls) <= 9, calls
    assert all(re.fullmatch(r"\S+ \d+\.\d\dms", c) for c in calls[:8]), calls
    assert len(calls) < 9 or re.fullmatch(r"and \d+ more calls", calls[8]), calls
    assert [n for n in names if n.endswith("FraudScorer.featurize")], names
    assert "Pipeline.predict_proba" in names, names
    assert len(spans) < 60, len(spans)
    # Every span has a type: no "?" icon in the UI.
    assert all(s.span_type in ("CHAIN", "TOOL") for s in spans)
    # The metrics: the root and its depth-1 nodes, MLflow's group among them.
    # Short names that read as the tree does: no "_pyfunc ..._" debris.
    (root_name,) = [
        k[: -len("/wall_ms")]
        for k in metrics
        if k.startswith("profile/predict pyfunc ") and k.endswith("FraudScorer/wall_ms")
    ]
    assert f"{root_name}/mlflow input checks context/wall_ms" in metrics, sorted(metrics)
    assert len(metrics) <= len(METRIC_STATS) * (len(children) + 1), sorted(metrics)

    out = artifact_dir(tmp_path)
    uri = server_store.uri
    browser.get(
        f"{uri}/#/experiments/{run.info.experiment_id}/traces?selectedEvaluationId={trace_id}"
    )
    _wait_text(browser, "[mlflow: input checks", "the trace view with MLflow's group")
    time.sleep(1)  # the drawer's animation
    _shot(browser, out / "mlflow_trace_view_after.png")
    browser.get(
        f"{uri}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}/model-metrics"
    )
    _wait_text(browser, "wall_ms", "the run's metric charts")
    time.sleep(1)
    _shot(browser, out / "mlflow_metrics_tab_after.png")
    for before in BEFORE.glob("*_before.png"):
        shutil.copyfile(before, out / before.name)


def test_the_report_of_the_served_model(fraud, browser, tmp_path):
    model, df = fraud
    session = _profile(model, df)
    path = session.save(tmp_path / "fraud.html")
    browser.get(pathlib.Path(path).as_uri())
    wait_for(lambda: browser.execute_script("return !!window.mlprofReport"), what="the report")
    body = browser.find_element("tag name", "body").text
    # The tree's first rows (it draws the rows on screen only): the root, then
    # MLflow's group with its share of the root, closed: none of its calls
    # show until it is opened.
    assert "[mlflow: input checks, context]: " in body, body
    assert "_validate_prediction_input" not in body, body
    assert "FraudScorer.featurize" in body, body
    version = "%d%d" % sys.version_info[:2]
    _shot(browser, artifact_dir(tmp_path) / f"report_fraud_model_after_py{version}.png")
