"""The app in a real browser: a `streamlit run app.py` server and Debian's Chromium, shared
by the browser test and `bench/app.py` (which times control changes the way a user sees them)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
CHART = "[data-testid='stPlotlyChart']"
# every chart drawn (Plotly has put its SVG in), nothing stale from the previous run, and the
# script no longer running
SETTLED_JS = """min => {
    const charts = Array.from(document.querySelectorAll("[data-testid='stPlotlyChart']"));
    return charts.length >= min
        && charts.every(c => c.querySelector('.main-svg'))
        && !document.querySelector("[data-stale='true']")
        && !document.querySelector("[data-testid='stStatusWidget']");
}"""


def missing() -> str | None:
    """Why the browser cannot run here, or None."""
    if not Path(CHROMIUM).exists():
        return f"Chromium not found at {CHROMIUM} (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed (pip install playwright)"
    return None


class ServerError(RuntimeError):
    pass


@contextmanager
def streamlit_server(health_timeout_s: float = 90, script: str = "app.py"):
    """`streamlit run app.py` on a free local port; yields its URL, stops it afterwards.
    `script` (relative to the repository) serves another entry point: bench/app.py serves
    app_pages/main.py itself to time a first load without app.py's warm start."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            str(ROOT / script),
            "--server.headless",
            "true",
            "--server.port",
            str(port),
            "--server.address",
            "127.0.0.1",
            "--browser.gatherUsageStats",
            "false",
            "--server.fileWatcherType",
            "none",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + health_timeout_s
        while True:
            try:
                if urllib.request.urlopen(url + "/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                if time.time() > deadline:
                    raise ServerError(
                        f"streamlit did not answer its health check within {health_timeout_s:g} s"
                    ) from None
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def wait_settled(page, min_charts: int, timeout_ms: int = 120_000) -> None:
    """Until the rerun a control change started has drawn its last chart."""
    page.wait_for_function(SETTLED_JS, arg=min_charts, timeout=timeout_ms)


def served_app():
    """A test module's `server` fixture: the URL of a `streamlit run app.py` started for the
    module; a server that does not start fails the tests that need it, saying why."""
    import pytest  # deferred: bench/app.py shares this module without pytest

    try:
        with streamlit_server() as url:
            yield url
    except ServerError as exc:
        pytest.fail(str(exc))
