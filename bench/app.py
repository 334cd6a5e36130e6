"""App render time per page, next to the time of the hbmsim calls behind it (one run).

    python bench/app.py

Each page is rendered cold (Streamlit caches cleared) with AppTest at the app's default
settings, then warm (cached), and compared with calling the same cached data functions
directly with cold caches: the ratio is what Streamlit itself adds.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
logging.getLogger("streamlit").setLevel(logging.ERROR)

import streamlit as st  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from app_pages import data  # noqa: E402
from app_pages.state import FIELDS, Settings  # noqa: E402
from hbmsim.fmt import table  # noqa: E402

PAGES = {
    "Walkthrough": (
        "app_pages/walkthrough.py",
        lambda s: (data.walkthrough(s), data.row_figure(s, 100)),
    ),
    "Sweep": (
        "app_pages/sweep.py",
        lambda s: (data.tile_sweep(s), data.scaling_rows(s), data.sram_points(s)),
    ),
    "Roofline": (
        "app_pages/roofline.py",
        lambda s: [data.result(s, a) for a in ("standard", s.algo)],
    ),
    "Validate": ("app_pages/validate.py", lambda s: None),
}


def clear():
    st.cache_data.clear()
    st.cache_resource.clear()


def main() -> None:
    defaults = Settings(**{k: f.default for k, f in FIELDS.items()})
    for _, calls in PAGES.values():  # warm-up: imports and Plotly's validators, once
        calls(defaults)
    rows = []
    for name, (path, calls) in PAGES.items():
        clear()
        t = time.perf_counter()
        calls(defaults)
        t_calls = time.perf_counter() - t
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
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


def tour_steps() -> list[list[str]]:
    """Start the tour from a cold cache, then click next through every step."""
    from app_pages.tour import STEPS

    clear()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.run()
    out = []
    for k, step in enumerate(STEPS):
        button = at.button(key="tour_start" if k == 0 else "tour_next")
        t = time.perf_counter()
        button.click().run()
        out.append([step.title, f"{time.perf_counter() - t:.2f} s"])
        assert not at.exception and not at.error, (step.title, at.exception, at.error)
    return out


if __name__ == "__main__":
    main()
