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
from contextlib import asynccontextmanager

import streamlit as st


@asynccontextmanager
async def warm_lifespan(_app):
    from app_pages.warm import warm_start

    await asyncio.to_thread(warm_start)  # off the event loop; the server answers after it
    yield


def _middleware():
    from starlette.middleware import Middleware

    from app_pages.preload import PreloadMiddleware

    return [Middleware(PreloadMiddleware)]


app = st.App("app_pages/main.py", lifespan=warm_lifespan, middleware=_middleware())
