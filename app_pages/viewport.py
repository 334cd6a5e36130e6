"""The page's width, measured in the browser, for figures drawn in pixels.

Why: the Walkthrough's tiles are markers sized in pixels, and Streamlit squeezes a figure
wider than its column (tall, thin tiles; grid titles over each other on a phone). The figure
is built for the column's width instead. A tiny component (st.components.v2: JavaScript, no
build step) reports the width of the block it sits in when it loads and after each resize;
the value is kept in the session, so another page and back reuses it. Before it has reported
(the first run of a session, AppTest), the page uses the width of a 1,280-pixel window with
the sidebar open.
"""

from __future__ import annotations

import streamlit as st

KEY = "page_width_px"  # the session's last reported width
PROBE = "page_width_probe"  # the component's own state
JS = """
export default function (component) {
    const { setStateValue, parentElement } = component;
    const host = parentElement.host || parentElement;
    const block = host.closest('[data-testid="stMainBlockContainer"]') || host.parentElement;
    let last = null, timer = null;
    const report = () => {
        const style = getComputedStyle(block);
        const width = Math.floor(block.clientWidth - parseFloat(style.paddingLeft)
            - parseFloat(style.paddingRight));
        if (width > 0 && width !== last) { last = width; setStateValue('width', width); }
    };
    const observer = new ResizeObserver(() => {
        clearTimeout(timer);
        timer = setTimeout(report, 200);
    });
    observer.observe(block);
    report();
    return () => { observer.disconnect(); clearTimeout(timer); };
}
"""
_probe = st.components.v2.component("hbmsim_page_width", js=JS, html="<span></span>")


def _reported() -> None:
    """The probe's callback: runs before the rerun its report starts, so the page's figure of
    that rerun is built for the new width."""
    width = getattr(st.session_state.get(PROBE), "width", None)
    if width:
        st.session_state[KEY] = int(width)


def page_width() -> int | None:
    """The main column's width in pixels as last reported by this session's browser, or None
    before it has reported. Mounts the probe (it takes no room worth noting: put it last)."""
    _probe(key=PROBE, default={"width": None}, height=0, on_width_change=_reported)
    return st.session_state.get(KEY)
