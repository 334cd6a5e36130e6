"""hbmsim in the browser: `streamlit run app.py` (or `make app`).

A thin entry point: the shared sidebar (mirrored in the URL, so a view is a shareable link)
and the pages. Pages gather input and display; numbers come from cached hbmsim calls
(app_pages/data.py) and figures from hbmsim.figures and hbmsim.walkfig; the guided tour is
app_pages/tour.py.
"""

from __future__ import annotations

import streamlit as st

from app_pages.state import sidebar_ui

st.set_page_config(page_title="hbmsim", layout="wide")
st.session_state["settings"] = sidebar_ui()
page = st.navigation(
    [
        st.Page("app_pages/walkthrough.py", title="Walkthrough", default=True),
        st.Page("app_pages/sweep.py", title="Sweep"),
        st.Page("app_pages/roofline.py", title="Roofline"),
        st.Page("app_pages/validate.py", title="Validate"),
    ]
)
page.run()
