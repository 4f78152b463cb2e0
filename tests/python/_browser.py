"""Real headless Chromium for the tests that check what a person sees.

Debian's ``chromium`` and ``chromium-driver`` (one apt version, so the driver
always matches the browser) driven by Selenium. No browser is downloaded:
the driver path is given, so Selenium Manager never runs.

Locally a missing browser skips with the reason; with
``MLPROF_REQUIRE_BROWSER=1`` (CI) it fails instead.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Callable, List, Optional

import pytest

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser")
DRIVER_CANDIDATES = ("chromedriver", "/usr/lib/chromium/chromedriver")
INSTALL_HINT = "apt-get install chromium chromium-driver; pip install selenium"


def _find(candidates) -> Optional[str]:
    for name in candidates:
        path = shutil.which(name) or (
            name if os.path.isabs(name) and os.access(name, os.X_OK) else None
        )
        if path:
            return path
    return None


def browser_missing() -> Optional[str]:
    """Why no browser test can run here, or None when one can."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return f"selenium is not installed ({INSTALL_HINT})"
    if _find(CHROMIUM_CANDIDATES) is None:
        return f"chromium is not installed ({INSTALL_HINT})"
    if _find(DRIVER_CANDIDATES) is None:
        return f"chromedriver is not installed ({INSTALL_HINT})"
    return None


def require_browser() -> None:
    """Skips the calling test (or fixture) when there is no browser, unless
    MLPROF_REQUIRE_BROWSER=1, where a missing browser is a failure."""
    why = browser_missing()
    if why is None:
        return
    if os.environ.get("MLPROF_REQUIRE_BROWSER") == "1":
        pytest.fail(f"MLPROF_REQUIRE_BROWSER=1 but {why}", pytrace=False)
    pytest.skip(why)


def start_chromium(width: int = 1400, height: int = 1100, downloads: Optional[Path] = None):
    """A headless Chromium driven by Selenium, logging the console."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = _find(CHROMIUM_CANDIDATES)
    options.add_argument("--headless=new")
    options.add_argument(f"--window-size={width},{height}")
    options.add_argument("--disable-gpu")
    options.add_argument("--disable-dev-shm-usage")  # small /dev/shm in containers
    options.add_argument("--no-first-run")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        options.add_argument("--no-sandbox")  # Chromium refuses to run as root otherwise (CI)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=_find(DRIVER_CANDIDATES))
    return webdriver.Chrome(service=service, options=options)


def console_errors(driver) -> List[str]:
    """Console errors and uncaught exceptions since the last call."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def wait_for(predicate: Callable[[], object], timeout: float = 10.0, what: str = "condition"):
    """Polls `predicate` until it returns something truthy; returns that."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def artifact_dir(tmp_path: Path) -> Path:
    """Where screenshots go: $MLPROF_TEST_ARTIFACTS (CI keeps it), else tmp_path."""
    d = os.environ.get("MLPROF_TEST_ARTIFACTS")
    path = Path(d) if d else tmp_path
    path.mkdir(parents=True, exist_ok=True)
    return path


SPEEDSCOPE_VERSION = "1.25.0"
SPEEDSCOPE_CACHE = (
    Path(os.environ.get("MLPROF_TEST_CACHE", Path.home() / ".cache" / "mlflow-profiler-tests"))
    / "speedscope"
)
SPEEDSCOPE_INSTALL = f"npm install --prefix {SPEEDSCOPE_CACHE} --no-save --no-audit --no-fund speedscope@{SPEEDSCOPE_VERSION}"


def speedscope_index() -> Path:
    """speedscope's built index.html (from its npm package), for file:// use.

    $MLPROF_SPEEDSCOPE_DIR may point at the package (or its dist/release);
    otherwise the package is looked for in the test cache that
    SPEEDSCOPE_INSTALL fills. Skips (fails under MLPROF_REQUIRE_BROWSER=1)
    when it is not there."""
    roots = [Path(p) for p in [os.environ.get("MLPROF_SPEEDSCOPE_DIR")] if p]
    roots.append(SPEEDSCOPE_CACHE / "node_modules" / "speedscope")
    for root in roots:
        for index in (root / "index.html", root / "dist" / "release" / "index.html"):
            if index.is_file():
                return index
    why = f"speedscope is not installed (run: {SPEEDSCOPE_INSTALL})"
    if os.environ.get("MLPROF_REQUIRE_BROWSER") == "1":
        pytest.fail(f"MLPROF_REQUIRE_BROWSER=1 but {why}", pytrace=False)
    pytest.skip(why)
