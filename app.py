"""hbmsim in the browser: `streamlit run app.py` (or `make app`).

The launcher: Streamlit serves app_pages/main.py (the shared sidebar and the pages) to every
browser session. This file exists so the server can do the first page's work before anyone
asks for it: Streamlit finds `app` below and runs its lifespan before the server answers,
and app_pages/warm.py imports the pages and simulates the default Walkthrough into the
caches every session shares (a new server's first load: about 3.0 s -> 2.6 s on the 2-core
development machine, `python bench/app.py`).
"""

from __future__ import annotations

import asyncio
import gc
from contextlib import asynccontextmanager

import streamlit as st


@asynccontextmanager
async def warm_lifespan(_app):
    from app_pages.warm import warm_start

    await asyncio.to_thread(warm_start)  # off the event loop; the server answers after it
    # The ~200,000 objects the imports and caches above hold live as long as the server. Left
    # in the collector's generations, every full collection walks them all, and a replay with
    # a timeline (the Walkthrough) allocates enough to trigger many: ticking causal on the
    # Walkthrough computed in 0.48 s, 0.27 s with them frozen (medians of six, alternated, on
    # the 2-core development machine; in Chromium, click to redrawn, 1.80 s against 1.88 s,
    # five servers each, the browser's drawing being most of it). Frozen objects are still
    # freed by reference counting;
    # only a cycle among them would outlive its use, and these are modules and caches.
    gc.freeze()
    yield


def _middleware():
    from starlette.middleware import Middleware

    from app_pages.preload import PreloadMiddleware

    return [Middleware(PreloadMiddleware)]


app = st.App("app_pages/main.py", lifespan=warm_lifespan, middleware=_middleware())
