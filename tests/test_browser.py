"""The app in a real browser: Playwright drives Debian's Chromium against `streamlit run`.

Outside CI the test skips, with the reason, when Chromium or Playwright is missing; under
CI=true it must run (.ci/run installs Chromium). Screenshots go to test-artifacts/.
"""

import os
import re
import time

import pytest
from browser_support import (
    ARGS,
    CHART,
    CHROMIUM,
    ROOT,
    missing,
    served_app,
    wait_settled,
)

ARTIFACTS = ROOT / "test-artifacts"
# The tour's screenshots go to test-artifacts/; HBMSIM_UPDATE_DOCS=1 writes them into docs/
# instead (how the README's pictures are made), so a test run leaves the tree as it was.
SHOTS = ROOT / "docs" if os.environ.get("HBMSIM_UPDATE_DOCS") == "1" else ARTIFACTS

REASON = missing()
if REASON and os.environ.get("CI") == "true":
    raise RuntimeError(f"the browser test must run in CI: {REASON}")
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")


_server = pytest.fixture(scope="module", name="server")(served_app)


@pytest.fixture(scope="module")
def page(server):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        pg = browser.new_page(viewport={"width": 1600, "height": 1100})
        pg.set_default_timeout(60_000)
        yield pg
        browser.close()


def _wait_chart(page, what: str) -> None:
    """Until a chart is drawn; on a timeout, the page as it was goes to test-artifacts/ and its
    text into the failure message."""
    try:
        page.wait_for_selector(CHART)
    except Exception as exc:  # noqa: BLE001 - re-raised with what the page showed
        page.screenshot(path=str(ARTIFACTS / f"timeout-{what}.png"), full_page=True)
        text = page.evaluate("() => document.body.innerText.slice(0, 600)")
        raise AssertionError(f"no chart on {page.url} ({what}); the page said: {text}") from exc


def _wait_idle(page):
    """Until Streamlit has finished rerunning the script."""
    page.wait_for_timeout(300)
    page.wait_for_selector("[data-testid='stStatusWidget']", state="detached", timeout=60_000)


def _slider_label(page) -> str:
    return page.locator(f"{CHART} .slider-group > .slider-label").first.text_content()


def _state_fills() -> list[str]:
    from hbmsim.figures.walkthrough.animation import STATE_COLORS

    return [f"rgb({int(c[1:3], 16)}, {int(c[3:5], 16)}, {int(c[5:7], 16)})" for c in STATE_COLORS]


TILES_JS = """fills => {
    const chart = document.querySelector("[data-testid='stPlotlyChart']");
    const out = {};
    chart.querySelectorAll('.cartesianlayer path.point').forEach(p => {
        const f = p.style.fill;
        if (fills.includes(f)) out[f] = (out[f] || 0) + 1;
    });
    return out;
}"""
# the step's text is there and no element is left over (stale) from the previous run
RENDERED_JS = """n => document.body.innerText.includes('step ' + n + '.')
    && !document.querySelector("[data-stale='true']")
    && !document.querySelector("[data-testid='stStatusWidget']")"""
LABELS_JS = """() => Array.from(document.querySelectorAll(
    "[data-testid='stPlotlyChart'] .textpoint text")).map(t => t.textContent)
    .filter(t => t.includes(' · t = '))"""


def test_walkthrough_plays_both_algorithms_on_one_clock_with_every_tile_drawn(page, server):
    """While playing, every tile of every grid stays drawn (they used to vanish), colours
    change, and the two algorithms' labels show the slider's one simulated time."""
    page.goto(server + "/?seq_q=512&seq_k=512&heads=1&kv_heads=1")
    page.wait_for_selector(CHART)
    _wait_idle(page)
    fills = _state_fills()
    before = page.evaluate(TILES_JS, fills)
    tiles = sum(before.values())
    assert tiles > 0 and set(before) == {fills[0]}, before  # all in HBM at t = 0
    play = page.locator(f"{CHART} .updatemenu-button").filter(has_text="play")
    assert play.count() == 1, "one play control for both algorithms"
    play.first.click()
    seen: set[str] = set()
    for _ in range(8):
        page.wait_for_timeout(350)
        during = page.evaluate(TILES_JS, fills)
        assert sum(during.values()) == tiles, f"tiles missing while playing: {during}"
        seen |= set(during)
    assert len(seen) >= 3, f"the tiles did not change state while playing: {seen}"
    page.locator(f"{CHART} .updatemenu-button").filter(has_text="pause").first.click()
    page.wait_for_timeout(800)
    paused_at = _slider_label(page)
    page.wait_for_timeout(800)
    assert _slider_label(page) == paused_at, "pause did not stop the animation"
    labels = page.evaluate(LABELS_JS)
    assert len(labels) == 2, labels
    now = paused_at.replace("simulated time", "").strip()
    assert all(f"t = {now} ·" in label for label in labels), (now, labels)
    page.screenshot(path=str(ARTIFACTS / "walkthrough.png"), full_page=True)
    caption = page.get_by_text("one displayed tile").first.text_content()
    box = page.get_by_label("query length")
    box.fill("256")
    box.press("Enter")
    _wait_idle(page)
    page.wait_for_function("() => document.location.search.includes('seq_q=256')", timeout=60_000)
    page.wait_for_function(  # the notes are in a closed expander: textContent, not innerText
        "c => !document.body.textContent.includes(c)", arg=caption, timeout=60_000
    )
    assert "seq_q=256" in page.url


BARS_JS = """() => {
    const charts = Array.from(document.querySelectorAll("[data-testid='stPlotlyChart']"));
    const chart = charts.find(c => (c.textContent || '').includes('warpgroups on SM 0'));
    if (!chart) return null;
    const out = {};
    chart.querySelectorAll('.barlayer .trace').forEach(t => {
        const drawn = Array.from(t.querySelectorAll('path')).filter(p => {
            const b = p.getBBox();
            return b.width > 0 && b.height > 0;
        }).length;
        const fill = (t.querySelector('path') || {style: {}}).style.fill || '';
        out[fill] = (out[fill] || 0) + drawn;
    });
    const rows = Array.from(chart.querySelectorAll('.ytick text')).map(t => t.textContent);
    return {bars: out, rows: rows};
}"""


EDGES_JS = """() => Array.from(document.querySelector("[data-testid='stPlotlyChart']")
    .querySelectorAll(".scatterlayer path.js-line"))
    .filter(p => p.style.stroke === 'rgb(178, 24, 43)' && p.style.strokeDasharray)
    .map(p => { const b = p.getBoundingClientRect(); return [b.width, b.height]; })
    .filter(([w, h]) => w > 0 && h > 0)"""


def test_the_causal_masks_edge_is_drawn_on_the_score_grids_and_stays_while_playing(page, server):
    """Causal: the dashed red edge of the mask is drawn on standard attention's S and P (a
    diagonal: as wide as it is tall, up to the tiles' aspect), and playing keeps it."""
    page.goto(server + "/?seq_q=512&seq_k=512&heads=1&kv_heads=1&causal=true")
    _wait_chart(page, "causal walkthrough")
    _wait_idle(page)
    edges = page.evaluate(EDGES_JS)
    assert len(edges) == 2, edges  # S and P
    assert all(w > 20 and h > 20 for w, h in edges), edges
    page.screenshot(path=str(ARTIFACTS / "walkthrough-causal.png"))
    page.locator(f"{CHART} .updatemenu-button").filter(has_text="play").first.click()
    page.wait_for_timeout(1200)
    assert len(page.evaluate(EDGES_JS)) == 2, "the edges vanished while playing"
    page.locator(f"{CHART} .updatemenu-button").filter(has_text="pause").first.click()


def test_flash_attn_3s_warpgroups_are_drawn_as_bars_of_each_kind(page, server):
    """With the FlashAttention-3 mirror chosen, the browser draws the chart of one CTA's
    producer and three consumer warpgroups: bars of positive size in the three colours
    (TMA loads, MMA, softmax) on the four rows."""
    from hbmsim.figures.warpgroups import PHASE_COLORS

    page.goto(server + "/?seq_q=512&seq_k=512&heads=1&kv_heads=1&algo=flash-attn-3")
    page.wait_for_selector(CHART)
    _wait_idle(page)
    page.wait_for_function(f"({BARS_JS})() !== null", timeout=60_000)
    drawn = page.evaluate(BARS_JS)
    fills = [
        f"rgb({int(c[1:3], 16)}, {int(c[3:5], 16)}, {int(c[5:7], 16)})"
        for c in PHASE_COLORS.values()
    ]
    assert all(drawn["bars"].get(f, 0) > 0 for f in fills), drawn
    assert set(drawn["rows"]) == {"producer (TMA)"} | {
        f"consumer warpgroup {w}" for w in range(3)
    }, drawn["rows"]
    page.screenshot(path=str(ARTIFACTS / "warpgroups.png"), full_page=True)


def test_the_guided_tour_runs_start_to_finish(page, server):
    """Every step renders with no exception and, a moment into its animation, is screenshotted
    (into docs/ with HBMSIM_UPDATE_DOCS=1); the time from the click to the rendered step is
    recorded in test-artifacts/tour-times.json (measured, not asserted: timings belong in
    bench/)."""
    import json

    page.set_viewport_size({"width": 1600, "height": 2300})  # the whole step in one picture
    page.goto(server + "/")
    page.wait_for_selector(CHART)
    _wait_idle(page)
    times = []
    button = page.get_by_role("button", name="Take the guided tour")
    for step in range(1, 6):
        start = time.perf_counter()
        button.first.click()
        page.wait_for_function(RENDERED_JS, arg=step, timeout=60_000)
        page.evaluate(
            "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"
        )
        times.append(round(time.perf_counter() - start, 2))
        assert page.locator("[data-testid='stException']").count() == 0, step
        assert page.get_by_text("Look at:").count() >= 1
        page.locator(f"{CHART} .updatemenu-button").filter(has_text="play").first.click()
        page.wait_for_timeout(2500)  # a moment into the story, tiles moving
        page.locator(f"{CHART} .updatemenu-button").filter(has_text="pause").first.click()
        page.wait_for_timeout(300)
        page.screenshot(path=str(SHOTS / f"tour-{step}.png"), full_page=True)
        button = page.get_by_role("button", name="next ▶")
    assert button.first.is_disabled(), "the last step offers no next"
    page.get_by_role("button", name="Explore freely").first.click()
    _wait_idle(page)
    assert page.get_by_role("button", name="Take the guided tour").count() == 1
    (ARTIFACTS / "tour-times.json").write_text(json.dumps({"seconds_per_step": times}))
    page.set_viewport_size({"width": 1600, "height": 1100})


@pytest.mark.parametrize("name,expect", [("Sweep", 3), ("Roofline", 1), ("Validate", 0)])
def test_each_page_renders(page, server, name, expect):
    page.goto(server + "/?seq_q=512&seq_k=512&heads=2&kv_heads=2")
    _wait_chart(page, f"walkthrough-before-{name}")
    page.locator("[data-testid='stSidebarNav'] a").filter(has_text=name).first.click()
    page.get_by_role(
        "heading", name=name if name != "Validate" else "Validate: how accurate is it?"
    ).first.wait_for()
    _wait_idle(page)
    if expect:  # every chart drawn (a loaded machine draws the Sweep's three one by one)
        wait_settled(page, expect)
        assert page.locator(CHART).count() >= expect
    else:  # the committed GPU results, the published set and the extra check, drawn
        page.get_by_text("NVIDIA H200 (2026-11-30)").first.wait_for()
        page.wait_for_selector(CHART)
        assert page.locator(CHART).count() >= 3  # results, published set, extra check
        assert page.locator(f"{CHART} .scatterlayer .point").count() > 100
    assert page.locator("[data-testid='stException']").count() == 0
    page.screenshot(path=str(ARTIFACTS / f"{name.lower()}.png"), full_page=True)


def test_sweep_changes_with_the_gpu(page, server):
    page.goto(server + "/sweep?seq_q=512&seq_k=512&heads=2&kv_heads=2&gpu=l4")
    page.wait_for_selector(CHART)
    _wait_idle(page)
    best_l4 = page.locator("[data-testid='stMetricValue']").first.text_content()
    page.goto(server + "/sweep?seq_q=512&seq_k=512&heads=2&kv_heads=2&gpu=h100-sxm")
    page.wait_for_selector(CHART)
    _wait_idle(page)
    best_h100 = page.locator("[data-testid='stCaptionContainer']").nth(1).text_content()
    page.goto(server + "/sweep?seq_q=512&seq_k=512&heads=2&kv_heads=2&gpu=l4")
    page.wait_for_selector(CHART)
    _wait_idle(page)
    assert page.locator("[data-testid='stCaptionContainer']").nth(1).text_content() != best_h100
    assert best_l4


def test_a_long_sweep_shows_its_progress_and_leaves_no_bar(page, server):
    """A tile sweep that runs past a quarter second (causal, 2k tokens: seconds) shows a
    progress bar naming the cell it simulates; once every chart is drawn no bar is left."""
    page.goto(server + "/sweep?seq_q=2048&seq_k=2048&heads=8&kv_heads=8&causal=true")
    bar = page.locator("[data-testid='stProgress']")
    bar.first.wait_for(timeout=120_000)
    text = bar.first.inner_text()
    assert re.fullmatch(r"Sweeping tile sizes: fa2, bq \d+ x bk \d+ \(\d+ of 25\)", text), text
    page.wait_for_selector(CHART)
    _wait_idle(page)
    assert page.locator(CHART).count() >= 3
    assert bar.count() == 0
    assert page.locator("[data-testid='stException']").count() == 0


PARETO_JS = """() => {
    const chart = document.querySelector("[data-testid='stPlotlyChart']");
    return Array.from(chart.querySelectorAll('.scatterlayer .trace')).map(t => ({
        frontier: !!t.querySelector('path.js-line'),
        drawn: Array.from(t.querySelectorAll('path.point')).filter(p => {
            const b = p.getBBox();
            return b.width > 0 && b.height > 0;
        }).length,
    }));
}"""


def test_explore_runs_its_spec_and_draws_every_point_that_ran(page, server):
    """The Explore page's prefilled spec, run on the page's own Dask cluster under a real
    server: the Pareto scatter of the longest context draws one SVG marker per row of it that
    ran with a time (as many as the same spec gives when simulated here), and a frontier line
    per program, through ringed points."""
    import tomllib

    from hbmsim.explore import parse_spec, run_point

    page.goto(server + "/explore")
    page.get_by_role("heading", name="Explore").first.wait_for()
    _wait_idle(page)
    page.get_by_text("a small spec run here").first.click()
    spec = page.locator("textarea").first
    spec.wait_for()
    text = spec.input_value()
    page.get_by_role("button", name="Run the spec").first.click()
    rows = [run_point(p) for p in parse_spec(tomllib.loads(text), "test").points()]
    longest = max(r["context"] for r in rows)  # the Pareto view's problem at first
    timed = [
        r
        for r in rows
        if r["status"] == "ok" and r["time_s"] is not None and r["context"] == longest
    ]
    _wait_chart(page, "explore")
    _wait_idle(page)
    traces = page.evaluate(PARETO_JS)
    assert sum(t["drawn"] for t in traces if not t["frontier"]) == len(timed) > 0, traces
    frontiers = [t["drawn"] for t in traces if t["frontier"]]
    assert len(frontiers) == len({r["program"] for r in timed}) and min(frontiers) >= 1, traces
    assert page.get_by_text(f"Loaded: the spec run here, {len(rows)} rows").count() == 1
    assert page.locator("[data-testid='stException']").count() == 0
    page.screenshot(path=str(ARTIFACTS / "explore.png"), full_page=True)
