"""The Walkthrough's first screen in a real browser (Playwright, Debian's Chromium, `streamlit
run`): what a newcomer sees before scrolling at a laptop's 1280x800 and a phone's 390x844, and
the guided tour's words checked against what each step draws.

Skips, with the reason, where Chromium or Playwright is missing (under CI=true it must run).
"""

import os
import re

import pytest
from browser_support import ARGS, CHART, CHROMIUM, ROOT, missing, served_app

REASON = missing()
if REASON and os.environ.get("CI") == "true":
    raise RuntimeError(f"the browser test must run in CI: {REASON}")
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")
_server = pytest.fixture(scope="module", name="server")(served_app)

# Each page's first screen goes to test-artifacts/screens/; HBMSIM_UPDATE_DOCS=1 writes it into
# docs/screens/ instead (the pictures the README links), so a test run leaves the tree as it was
SCREENS = (
    ROOT / "docs" if os.environ.get("HBMSIM_UPDATE_DOCS") == "1" else ROOT / "test-artifacts"
) / "screens"
PAGES = {"walkthrough": "/", "sweep": "/sweep", "explore": "/explore", "roofline": "/roofline"}
PAGES["validate"] = "/validate"
LAPTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
TRAINING = "/?pass_=fwd%2Bbwd&seq_q=512&seq_k=512&heads=1&kv_heads=1"

# boxes as [left, top, right, bottom] in CSS pixels of the viewport
FIRST_SCREEN_JS = """() => {
    const box = e => {
        const b = e.getBoundingClientRect();
        return [b.left, b.top, b.right, b.bottom];
    };
    const chart = document.querySelector("[data-testid='stPlotlyChart']");
    const idea = Array.from(document.querySelectorAll('strong'))
        .find(s => s.textContent.includes('the math is cheap'));
    return {
        idea: idea ? box(idea.closest('[data-testid="stMarkdownContainer"]')) : null,
        metrics: Array.from(document.querySelectorAll("[data-testid='stMetric']")).map(m => ({
            label: m.querySelector("[data-testid='stMetricLabel']").textContent.trim(),
            value: m.querySelector("[data-testid='stMetricValue']").textContent.trim(),
            box: box(m),
        })),
        tiles: Array.from(chart.querySelectorAll('.cartesianlayer path.point')).map(box),
        titles: Array.from(chart.querySelectorAll('.annotation-text')).map(t => ({
            text: t.textContent, box: box(t)})),
        legend: Array.from(chart.querySelectorAll('.legend .traces')).map(box),
        buttons: Array.from(chart.querySelectorAll('.updatemenu-button')).map(box),
        labels: Array.from(chart.querySelectorAll('.textpoint text'))
            .filter(t => t.textContent.includes(' · t = ')).map(t => box(t)),
        page_width: document.documentElement.scrollWidth,
    };
}"""


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def _open(browser, server, viewport, path="/"):
    page = browser.new_page(viewport=viewport)
    page.set_default_timeout(120_000)
    page.goto(server + path)
    page.wait_for_selector(CHART)
    _settle(page)
    return page


# the script done, nothing stale, and the animation built for the column it is in: before the
# width probe has reported, the page draws for a laptop's column and the browser squeezes it
SETTLED_JS = """() => {
    const svg = document.querySelector("[data-testid='stPlotlyChart'] .main-svg");
    const block = document.querySelector("[data-testid='stMainBlockContainer']");
    const style = getComputedStyle(block);
    const inner = block.clientWidth - parseFloat(style.paddingLeft)
        - parseFloat(style.paddingRight);
    return !document.querySelector("[data-testid='stStatusWidget']")
        && !document.querySelector("[data-stale='true']")
        && svg && parseFloat(svg.getAttribute('width')) <= inner;
}"""


def _settle(page):
    """Until the script is done, nothing is stale and the figure fits its column."""
    for _ in range(2):
        page.wait_for_timeout(600)
        page.wait_for_function(SETTLED_JS)


def _overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_a_laptops_first_screen_holds_the_idea_the_ratios_and_both_animations(browser, server):
    """At 1280x800, before any scrolling: the idea sentence, the three headline ratios
    (time, DRAM bytes, trips, each "Nx less/fewer"), and every tile of both algorithms'
    grids with the play control."""
    page = _open(browser, server, LAPTOP)
    seen = page.evaluate(FIRST_SCREEN_JS)
    fold = LAPTOP["height"]
    assert seen["idea"] is not None and seen["idea"][3] <= fold, seen["idea"]
    assert [m["label"] for m in seen["metrics"]] == ["time", "DRAM bytes", "trips"]
    for m in seen["metrics"]:
        assert re.fullmatch(r"[\d.]+x (less|fewer|more)", m["value"]), m
        assert m["box"][3] <= fold, m
    assert len(seen["tiles"]) > 0
    assert max(t[3] for t in seen["tiles"]) <= fold, "a tile is below the fold"
    assert seen["buttons"] and max(b[3] for b in seen["buttons"]) <= fold
    assert len(seen["labels"]) == 2  # both algorithms' labels: standard and fa2 both drawn
    assert page.get_by_text(re.compile(r"^Notes on this animation")).count() == 1
    page.close()


def test_a_phone_stacks_the_grids_and_nothing_overlaps(browser, server):
    """At 390x844 with a training pass (twelve grids for standard): the grids wrap onto more
    than one line, every grid title is inside the screen's width and clear of every other,
    the legend is clear of the play controls, and the page does not scroll sideways."""
    page = _open(browser, server, PHONE, TRAINING)
    seen = page.evaluate(FIRST_SCREEN_JS)
    width = PHONE["width"]
    assert seen["page_width"] <= width
    titles = [t for t in seen["titles"] if t["text"].strip()]
    assert len(titles) >= 12
    for t in titles:
        assert t["box"][0] >= 0 and t["box"][2] <= width, t
    for i, a in enumerate(titles):
        for b in titles[i + 1 :]:
            assert not _overlap(a["box"], b["box"]), (a, b)
    fa2_top = max(label[1] for label in seen["labels"])  # fa2's label, under standard's grids
    standard_lines = {round(t["box"][1]) for t in titles if t["box"][1] < fa2_top}
    assert len(standard_lines) >= 2, standard_lines
    assert max(t[2] for t in seen["tiles"]) <= width
    for legend in seen["legend"]:
        for button in seen["buttons"]:
            assert not _overlap(legend, button), (legend, button)
    page.close()


def _bold_terms(text: str) -> list[str]:
    return re.findall(r"\*\*(.+?)\*\*", text)


ON_SCREEN_JS = """() => {
    const texts = [];
    document.querySelectorAll("[data-testid='stPlotlyChart'] svg text").forEach(
        t => texts.push(t.textContent.trim()));
    document.querySelectorAll("h1, h2, h3, button").forEach(e => texts.push(e.innerText.trim()));
    return texts.filter(t => t);
}"""


def test_every_term_the_tour_points_at_is_drawn_at_its_step(browser, server):
    """Each word in bold in a step's text is read where the screen shows it: a grid title, a
    legend entry, a label, a totals panel, a heading or a button, spelled alike (a term of
    one or two letters, a grid's name, must be a whole title)."""
    from app_pages.tour import STEPS

    page = _open(browser, server, {"width": 1600, "height": 1100})
    button = page.get_by_role("button", name="Take the guided tour")
    for k, step in enumerate(STEPS, start=1):
        button.first.click()
        page.wait_for_function(
            "n => document.body.innerText.includes('step ' + n + '.')", arg=k, timeout=120_000
        )
        _settle(page)
        shown = page.evaluate(ON_SCREEN_JS)
        terms = _bold_terms(step.text) + _bold_terms(step.look)
        assert terms, step.title
        for term in terms:
            found = any(t == term for t in shown) or (
                len(term) > 2 and any(term in t for t in shown)
            )
            assert found, (step.title, term)
        button = page.get_by_role("button", name="next ▶")
    page.close()


@pytest.mark.parametrize("viewport", [LAPTOP, PHONE], ids=["1280x800", "390x844"])
@pytest.mark.parametrize("name", list(PAGES))
def test_each_pages_first_screen_draws_without_an_error(browser, server, name, viewport):
    """Every page at the default settings, as a new visitor opens it at both sizes: a chart
    drawn on it, no exception and no error, and nothing wider than the screen; its first
    screen is kept as a picture."""
    page = _open(browser, server, viewport, PAGES[name])
    assert page.locator("[data-testid='stException']").count() == 0
    assert page.locator("[data-testid='stAlertContentError']").count() == 0
    assert page.evaluate("() => document.documentElement.scrollWidth") <= viewport["width"]
    SCREENS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENS / f"{name}-{viewport['width']}x{viewport['height']}.png"))
    page.close()


def test_validate_opens_on_its_headline_cards(browser, server):
    """At 1280x800 the Validate page's first screen holds a card per comparison, each a median
    |error| and its words (worst, points past the goal, development set or never seen),
    before any table or chart."""
    page = _open(browser, server, LAPTOP, "/validate")
    cards = page.evaluate(
        """() => Array.from(document.querySelectorAll("[data-testid='stMetric']")).map(m => ({
            label: m.querySelector("[data-testid='stMetricLabel']").textContent.trim(),
            value: m.querySelector("[data-testid='stMetricValue']").textContent.trim(),
            bottom: m.getBoundingClientRect().bottom}))"""
    )
    cards = [c for c in cards if c["label"] == "median |error|"]  # later sections have more
    assert len(cards) >= 3, cards
    for card in cards:
        assert re.fullmatch(r"\d+%", card["value"]), card
        assert card["bottom"] <= LAPTOP["height"], card
    words = page.get_by_text(re.compile(r"worst [+-]\d+% · \d+ of \d+ past ±40%"))
    assert words.count() == len(cards)
    assert page.get_by_text(re.compile(r"· never seen$")).count() >= 1
    first_chart = page.locator(CHART).first.bounding_box()
    assert first_chart["y"] > max(card["bottom"] for card in cards)
    page.close()


STARS_JS = """() => Array.from(document.querySelectorAll("[data-testid='stPlotlyChart']"))
    .map(chart => {
        const star = Array.from(chart.querySelectorAll('.textpoint text'))
            .find(t => t.textContent === 'fastest');
        const plot = chart.querySelector('.nsewdrag');
        if (!star || !plot) return null;
        const s = star.getBoundingClientRect(), p = plot.getBoundingClientRect();
        return [((s.left + s.right) / 2 - p.left) / p.width, (s.bottom - p.top) / p.height];
    }).filter(x => x)"""


def test_the_sweep_stars_one_cell_the_same_on_every_map_and_hovers_carry_units(browser, server):
    """The three heatmaps (HBM traffic, trips, predicted time) each star one cell, "fastest",
    at the same place; hovering a cell of each shows its value with a unit."""
    page = _open(browser, server, {"width": 1600, "height": 1100}, "/sweep")
    stars = page.evaluate(STARS_JS)
    assert len(stars) == 3, stars
    for star in stars[1:]:  # where in its plot, as a fraction: the maps' widths differ
        assert star == pytest.approx(stars[0], abs=0.01), stars
    units = []
    for k in range(3):
        plot = page.locator(CHART).nth(k).locator(".nsewdrag").first.bounding_box()
        page.mouse.move(plot["x"] + plot["width"] * 0.3, plot["y"] + plot["height"] * 0.5)
        hover = page.locator(CHART).nth(k).locator(".hoverlayer .hovertext")
        hover.first.wait_for(timeout=10_000)
        units.append(hover.first.text_content())
    assert re.search(r"\d ?(B|kB|MB|GB)\b", units[0]), units
    assert re.search(r"\d trips\b", units[1]), units
    assert re.search(r"\d ?(ns|µs|ms|s)\b", units[2]), units
    page.close()
