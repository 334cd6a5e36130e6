"""The script every browser session runs (`streamlit run app.py` serves it; app.py is the
server's launcher, which warms this script's first page while the server starts).

A thin entry point: the shared sidebar (mirrored in the URL, so a view is a shareable link)
and the pages. Pages gather input and display; numbers come from cached hbmsim calls
(app_pages/data.py, app_pages/explore_data.py) and figures from hbmsim.figures,
hbmsim.figures.walkthrough and hbmsim.figures.explore; the guided tour is app_pages/tour.py.
"""

from __future__ import annotations

# pandas is imported here, before any page runs. Streamlit runs each browser session's script
# in its own thread, and Plotly's validators look pandas up in sys.modules without importing
# it, so a session drawing a figure while another session's first st.dataframe was still
# importing pandas failed with "partially initialized module 'pandas' has no attribute
# 'Series'". An import statement waits for a module another thread is importing, and every
# session passes through this one before its page.
import sys
from pathlib import Path

import pandas  # noqa: F401
import streamlit as st

# Streamlit puts the main script's folder on sys.path, which is app_pages/ itself: the
# repository's root goes there too, so that `app_pages.*` imports whoever runs this script
# (app.py's server, AppTest, a `streamlit run app_pages/main.py`) and from any folder.
ROOT = str(Path(__file__).resolve().parent.parent)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from app_pages.state import sidebar_ui  # noqa: E402

st.set_page_config(page_title="hbmsim", layout="wide")
# The first screen is the answer: less room above the title and a smaller title, and on a
# phone metrics small enough for three to share a row (a style-only st.html takes no room).
st.html(
    """<style>
    .stMainBlockContainer { padding-top: 3.5rem; }
    .stMainBlockContainer h1 { font-size: 2.1rem; padding: 0.25rem 0 0.5rem 0; }
    [data-testid="stMetricValue"] { font-size: 1.9rem; }
    @media (max-width: 640px) {
        .stMainBlockContainer h1 { font-size: 1.6rem; }
        [data-testid="stMetricValue"] { font-size: 1.2rem; }
        [data-testid="stMetricDelta"] { display: none; }
    }
    </style>"""
)
st.session_state["settings"] = sidebar_ui()
page = st.navigation(
    [
        st.Page("walkthrough.py", title="Walkthrough", default=True),
        st.Page("sweep.py", title="Sweep"),
        st.Page("explore.py", title="Explore"),
        st.Page("roofline.py", title="Roofline"),
        st.Page("validate.py", title="Validate"),
    ]
)
page.run()
