"""examples/predict_demo.py, as scripts/demo.sh runs it: it profiles a real
scikit-learn model, prints its trees and writes its HTML report outside the
directory it runs in."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

DEMO = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "predict_demo.py")


def test_demo_prints_the_model_tree_and_writes_the_report_to_the_temporary_directory(tmp_path):
    pytest.importorskip("sklearn")
    pytest.importorskip("pandas")
    temp = tmp_path / "tmp"
    work = tmp_path / "work"
    temp.mkdir()
    work.mkdir()
    env = dict(os.environ, TMPDIR=str(temp))
    r = subprocess.run(
        [sys.executable, os.path.abspath(DEMO)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.splitlines()[1].startswith("ChurnModel.predict: ")  # the root, as in README
    assert os.listdir(work) == []  # nothing written where it ran
    report = temp / "predict-demo.html"
    assert f"HTML report (flame chart, tree, I/O): {report}" in r.stdout
    assert report.read_text().lstrip().lower().startswith("<!doctype html")
