"""App speed: render time per page next to the hbmsim calls behind it, then what a user
waits for in a real browser (one run).

    python bench/app.py

1. Each page is rendered cold (Streamlit caches cleared) with AppTest at the app's default
   settings, then warm (cached), and compared with calling the same cached data functions
   directly with cold caches: the ratio is what Streamlit itself adds.
2. The guided tour, step by step, with AppTest.
3. In Chromium, per page: its first load on a new server of app.py in a fresh browser
   context (the address typed, to the last chart drawn), then the same page at 32k tokens
   (seq_q = seq_k = 32,768) and a control change there: 'causal' ticked in the sidebar, or on
   Explore (whose rows do not follow the sidebar) the Pareto view coloured by another column.
   `--pages` runs only this part.
4. In Chromium against a fresh `streamlit run app.py` (Playwright): the first page load, on
   FIRST_LOADS new servers of app.py alternated with as many of app_pages/main.py itself
   (without app.py's warm start), each in a fresh browser context, medians and each server's
   start (launch to health check), then on one more server of app.py
   a control change on the Walkthrough and on the Sweep page, each timed from the click to the
   last chart drawn (every chart's SVG in place, nothing stale, the script done). AppTest
   hides the browser's share (sending the figures, Plotly drawing them); this does not.
   Skipped, with the reason, without Chromium or Playwright.
"""

from __future__ import annotations

import logging
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
logging.getLogger("streamlit").setLevel(logging.ERROR)

import streamlit as st  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))

from browser_support import ARGS, CHART, CHROMIUM, missing, streamlit_server, wait_settled  # noqa: E402

from app_pages import data  # noqa: E402
from app_pages.fields import default_settings  # noqa: E402
from hbmsim.fmt import table  # noqa: E402

PAGES = {
    "Walkthrough": (
        "walkthrough.py",
        lambda s: (data.walkthrough(s), data.row_figure(s, 100)),
    ),
    "Sweep": (
        "sweep.py",
        lambda s: (data.tile_sweep(s), data.scaling_rows(s), data.sram_points(s)),
    ),
    "Roofline": (
        "roofline.py",
        lambda s: [data.result(s, a) for a in ("standard", s.algo)],
    ),
    "Validate": ("validate.py", lambda s: None),
}


def clear():
    st.cache_data.clear()
    st.cache_resource.clear()


def main() -> None:
    if "--pages" in sys.argv[1:]:
        print(per_page_table())
        return
    defaults = default_settings()
    for _, calls in PAGES.values():  # warm-up: imports and Plotly's validators, once
        calls(defaults)
    rows = []
    for name, (path, calls) in PAGES.items():
        clear()
        t = time.perf_counter()
        calls(defaults)
        t_calls = time.perf_counter() - t
        at = AppTest.from_file(str(ROOT / "app_pages" / "main.py"), default_timeout=300)
        at.switch_page(path)
        clear()
        t = time.perf_counter()
        at.run()
        t_cold = time.perf_counter() - t
        t = time.perf_counter()
        at.run()
        t_warm = time.perf_counter() - t
        assert not at.exception, at.exception
        rows.append(
            [
                name,
                f"{t_calls:.2f} s",
                f"{t_cold:.2f} s",
                f"{t_warm:.2f} s",
                f"{t_cold / t_calls:.2f}x" if t_calls > 1e-3 else "-",
            ]
        )
    print("default settings (h100-sxm, batch 1, heads 8, seq 1024, d 64, fp16)")
    print(table(["page", "hbmsim calls", "render (cold)", "render (warm)", "cold / calls"], rows))
    print()
    print("guided tour: each step's rerun after its button is clicked, as a user meets it")
    print(table(["step", "render"], tour_steps()))
    print()
    print(per_page_table())
    print()
    print("in Chromium: from the click (or the address typed) to the last chart drawn")
    reason = missing()
    if reason:
        print(f"skipped: {reason}")
    else:
        print(table(["what the user does", "waits", "server start"], in_browser()))


# page: (path, charts it draws at the default settings, the control a change clicks)
PAGE_CHANGES = {
    "Walkthrough": ("/", 1, "causal"),
    "Sweep": ("/sweep", 3, "causal"),
    "Explore": ("/explore", 1, None),
    "Roofline": ("/roofline", 1, "causal"),
    "Validate": ("/validate", 3, "causal"),
}
LONG = "seq_q=32768&seq_k=32768"  # the 32k-token problem the control changes are timed at


def per_page_table() -> str:
    """Each page's first load and, at 32k tokens, its load and one control change, in
    Chromium: seconds to the last chart drawn (nothing stale, the script done)."""
    reason = missing()
    if reason:
        return f"per page in Chromium: skipped: {reason}"
    from playwright.sync_api import sync_playwright

    rows = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        for name, (path, charts, control) in PAGE_CHANGES.items():
            first, long, change = _page_times(browser, path, charts, control)
            rows.append(
                [name, f"{first:.2f} s", f"{long:.2f} s", f"{change:.2f} s", _what(control)]
            )
        browser.close()
    return (
        "per page in Chromium (a new server of app.py per page, a fresh browser context)\n"
        + table(
            ["page", "first load", "load at 32k tokens", "control change at 32k", "change"], rows
        )
    )


def _page_times(browser, path: str, charts: int, control: str | None) -> tuple[float, ...]:
    """(first load, load at 32k tokens, control change there) of one page, in seconds."""
    with streamlit_server() as url:
        context = browser.new_context(viewport={"width": 1600, "height": 1100})
        page = context.new_page()
        first = _timed(page, lambda: page.goto(url + path), charts)
        long = _timed(page, lambda: page.goto(f"{url}{path}?{LONG}"), charts)
        change = _timed(page, lambda: _change(page, control), charts)
        context.close()
    return first, long, change


def _timed(page, act, charts: int) -> float:
    t = time.perf_counter()
    act()
    page.wait_for_timeout(50)  # let a rerun start before asking if it is done
    wait_settled(page, charts)
    return time.perf_counter() - t


def _change(page, control: str | None) -> None:
    if control is not None:
        page.locator("[data-testid='stSidebar']").get_by_text(control, exact=True).click()
        return
    box = page.locator("[data-testid='stSelectbox']").filter(
        has=page.get_by_text("colour by", exact=True)
    )
    box.first.click()
    page.get_by_role("option", name="program").first.click()


def _what(control: str | None) -> str:
    return f"tick '{control}'" if control else "colour by program"


def tour_steps() -> list[list[str]]:
    """Start the tour from a cold cache, then click next through every step."""
    from app_pages.tour import STEPS

    clear()
    at = AppTest.from_file(str(ROOT / "app_pages" / "main.py"), default_timeout=300)
    at.run()
    out = []
    for k, step in enumerate(STEPS):
        button = at.button(key="tour_start" if k == 0 else "tour_next")
        t = time.perf_counter()
        button.click().run()
        out.append([step.title, f"{time.perf_counter() - t:.2f} s"])
        assert not at.exception and not at.error, (step.title, at.exception, at.error)
    return out


# (what, URL path or None to click, the control's label, charts the page draws)
BROWSER_STEPS = [
    ("first load: Walkthrough, new server (app.py), default settings", "/", None, 1),
    ("Walkthrough: tick 'causal'", None, "causal", 1),
    ("Walkthrough: untick 'causal'", None, "causal", 1),
    ("open the Sweep page", "/sweep", None, 3),
    ("Sweep: tick 'causal'", None, "causal", 3),
    ("Sweep: untick 'causal'", None, "causal", 3),
]


FIRST_LOADS = 6  # fresh servers of each kind, alternated: the machine drifts by +-0.5 s


def first_load(browser, script: str) -> tuple[float, float]:
    """(seconds from `page.goto` to the chart drawn, seconds from the server's launch to its
    health check) on a new server of `script` and a fresh browser context (no cached files)."""
    t = time.perf_counter()
    with streamlit_server(script=script) as url:
        started = time.perf_counter() - t
        context = browser.new_context(viewport={"width": 1600, "height": 1100})
        page = context.new_page()
        t = time.perf_counter()
        page.goto(url + "/")
        page.wait_for_selector(CHART, timeout=120_000)
        wait_settled(page, 1)
        loaded = time.perf_counter() - t
        context.close()
    return loaded, started


def in_browser() -> list[list[str]]:
    from playwright.sync_api import sync_playwright

    rows = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        loads: dict[str, list[tuple[float, float]]] = {"app_pages/main.py": [], "app.py": []}
        for _ in range(FIRST_LOADS):
            for script, runs in loads.items():
                runs.append(first_load(browser, script))
        for script, what in (
            ("app_pages/main.py", "first load, no warm start (serving app_pages/main.py)"),
            ("app.py", "first load, warm start (app.py)"),
        ):
            load = statistics.median(r[0] for r in loads[script])
            start = statistics.median(r[1] for r in loads[script])
            spread = ", ".join(f"{r[0]:.2f}" for r in loads[script])
            rows.append(
                [f"{what}, median of {FIRST_LOADS} ({spread})", f"{load:.2f} s", f"{start:.2f} s"]
            )
        ratio = statistics.median(r[0] for r in loads["app.py"]) / statistics.median(
            r[0] for r in loads["app_pages/main.py"]
        )
        t = time.perf_counter()
        with streamlit_server() as url:
            started = f"{time.perf_counter() - t:.2f} s"
            page = browser.new_page(viewport={"width": 1600, "height": 1100})
            for what, path, label, charts in BROWSER_STEPS:
                t = time.perf_counter()
                if path is not None:
                    page.goto(url + path)
                    page.wait_for_selector(CHART, timeout=120_000)
                else:
                    page.locator("[data-testid='stSidebar']").get_by_text(label, exact=True).click()
                    page.wait_for_timeout(50)  # let the rerun start before asking if it is done
                wait_settled(page, charts)
                rows.append([what, f"{time.perf_counter() - t:.2f} s", started])
                started = "-"
        browser.close()
    rows.append(["first load: warm start / none (medians)", f"{ratio:.2f}x", ""])
    return rows


if __name__ == "__main__":
    main()
