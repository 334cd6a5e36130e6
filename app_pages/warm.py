"""The server's warm start: what a visitor's first page needs, done while the server starts.

Why: a new server's first session paid for importing pandas, the pages and hbmsim and for
simulating the default Walkthrough (about half a second of its three on the 2-core
development machine) before the browser could draw anything. app.py's lifespan runs
`warm_start` once before the server answers, so those imports are done and the default
settings' results sit in the same Streamlit caches the pages read (st.cache_data and
st.cache_resource are per process, shared by every session). Nothing here is specific to a
session, and a failure only costs the first visitor the time it would have saved: it is
logged, never raised, so the server still starts.
"""

from __future__ import annotations

import logging
import time

LOG = logging.getLogger("hbmsim.app")


def warm_start() -> dict:
    """Import what the pages import and compute the default Walkthrough (its animation, and
    the row panel at its first row) into the caches its page reads. Returns what it did:
    {"seconds": ..., "walkthrough": bool} (False, with the error logged, where something
    failed)."""
    t = time.perf_counter()
    quiet = logging.getLogger("streamlit")  # "missing ScriptRunContext" on every cache call
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        import pandas  # noqa: F401  (see main.py: the pages need it imported first)

        from app_pages import data
        from app_pages.fields import FIRST_ROW, default_settings

        s = default_settings()
        walk = data.walkthrough(s)
        if walk["sides"]:
            data.walk_chart(s)
        for algo in ("standard", s.algo):  # the headline above it: the whole problem
            data.result(s, algo)
        data.warpgroup_chart(s)
        # the row panel below it, at the row it shows first (0.1 s of a first load)
        data.row_figure(s, min(FIRST_ROW, max(data.walk_problem(s).seq_q - 1, 0)))
        done = True
    except Exception:  # a warm start that fails must not stop the server
        LOG.exception("warm start failed; the first visitor computes the default page")
        done = False
    finally:
        quiet.setLevel(level)
    return {"seconds": time.perf_counter() - t, "walkthrough": done}
