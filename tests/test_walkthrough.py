"""The walkthrough as a user meets it (AppTest): the headline ratios of the whole problem, one
clock for both algorithms, the running kernel named, S and P apart, totals that grow and end on
the engine's numbers, the guided tour, and every limit said out loud."""

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

APP = str(Path(__file__).resolve().parent.parent / "app_pages" / "main.py")
ONE_HEAD = {"seq_q": "512", "seq_k": "512", "heads": "1", "kv_heads": "1"}


def make(query=None):
    at = AppTest.from_file(APP, default_timeout=180)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    at.run()
    return at


def spec(at) -> dict:
    return json.loads(at.get("plotly_chart")[0].proto.spec)


def side_labels(fig, frame: int) -> list[str]:
    """The per-algorithm label texts ('standard · t = ...') at one frame."""
    if frame == 0:
        texts = [d["text"][0] for d in fig["data"] if d.get("mode") == "text"]
    else:
        texts = [d["text"][0] for d in fig["frames"][frame]["data"] if "text" in d and "x" not in d]
    return [t for t in texts if " · t = " in t]


def clock(label: str) -> str:
    return re.search(r"t = ([^·]+) ·", label).group(1).strip()


@pytest.fixture(scope="module")
def walk():
    at = make(ONE_HEAD)
    assert not at.exception and not at.error
    return at, spec(at)


def test_one_play_control_and_one_slider_drive_both_algorithms(walk):
    at, fig = walk
    assert len(at.get("plotly_chart")) == 2  # the walk figure and the online-softmax panel
    assert len(fig["layout"]["updatemenus"]) == 1 and len(fig["layout"]["sliders"]) == 1
    steps = fig["layout"]["sliders"][0]["steps"]
    assert len(steps) == len(fig["frames"])
    for f in range(len(fig["frames"])):
        labels = side_labels(fig, f)
        assert len(labels) == 2
        assert clock(labels[0]) == clock(labels[1]) == steps[f]["label"], f


def test_flash_is_done_while_standard_still_runs(walk):
    _, fig = walk
    moments = [side_labels(fig, f) for f in range(len(fig["frames"]))]
    assert any("done" in fa and "kernel" in std and "done" not in std for std, fa in moments)
    assert "done" in moments[-1][0] and "done" in moments[-1][1]


def test_the_running_kernel_is_named_in_launch_order(walk):
    _, fig = walk
    named = []
    for f in range(len(fig["frames"])):
        m = re.search(r"<b>(\w+)</b> · SRAM", side_labels(fig, f)[0])
        if m and (not named or named[-1] != m.group(1)):
            named.append(m.group(1))
    assert named == ["qk", "softmax", "pv"]


def test_s_and_p_are_separate_grids(walk):
    _, fig = walk
    titles = [a["text"] for a in fig["layout"]["annotations"]]
    assert "S = QKᵀ" in titles and "P = softmax(S)" in titles


def test_every_frame_keeps_every_tile_and_tiles_change_state(walk):
    """The bug this pins: tiles vanished while playing. Every frame carries a colour for every
    tile of every grid, and the colours change over time."""
    _, fig = walk
    grids = [d for d in fig["data"] if d.get("mode") == "markers" and d.get("x") != [None]]
    sizes = [len(g["x"]) for g in grids]
    seen = set()
    for frame in fig["frames"]:
        colors = [d["marker"]["color"] for d in frame["data"] if "marker" in d]
        assert [len(c) for c in colors] == sizes
        seen.add(json.dumps(colors))
    assert len(seen) > len(fig["frames"]) // 4


def _frame_data(fig, frame):
    return fig["data"] if frame == 0 else fig["frames"][frame]["data"]


def _totals(fig, frame) -> list[str]:
    """Totals labels in drawing order: HBM accesses, DRAM bytes, L2 hits, trips, time; standard
    then flash."""
    return [d["text"][1] for d in _frame_data(fig, frame) if len(d.get("text", [])) == 2]


def test_totals_grow_and_end_on_the_engine_and_count_totals(walk):
    from hbmsim import Problem, fmt, get_hardware, make_plan, simulate
    from hbmsim.engine.simulation import run_engine

    _, fig = walk
    n = len(fig["frames"])
    bars = [i for i, d in enumerate(fig["frames"][0]["data"]) if "x" in d]
    assert len(bars) == 10  # five totals, two algorithms
    for i in bars:
        ends = [f["data"][i]["x"][1] for f in fig["frames"]]
        assert ends == sorted(ends) and ends[-1] > 0, i  # each total only grows
    last = _totals(fig, n - 1)
    p = Problem(batch=1, heads=1, kv_heads=1, seq_q=512, seq_k=512, head_dim=64, dtype="fp16")
    hw = get_hardware("h100-sxm")
    for k, algo in enumerate(("standard", "fa2")):
        timing = run_engine(make_plan(algo, p, hw), exact=True, timeline=True)
        counted = simulate(p, hw, algo, engine=False)
        assert last[0 + k] == fmt.bytes_(counted.hbm_read_bytes + counted.hbm_write_bytes)
        assert last[2 + k] == fmt.bytes_(timing.dram_read_bytes + timing.dram_write_bytes)
        assert last[4 + k] == fmt.bytes_(timing.l2_hit_bytes)
        assert last[6 + k] == f"{fmt.count(counted.trips)} trips"
        assert last[8 + k] == fmt.seconds(timing.time_s)


def test_the_headline_is_the_whole_problems_three_ratios_with_their_amounts():
    """Above the animation: time, DRAM bytes and trips of fa2 against standard on the whole
    problem (2 heads here, where the animation replays one), each ratio with both amounts."""
    from hbmsim import Problem, fmt, get_hardware, simulate

    at = make({**ONE_HEAD, "heads": "2", "kv_heads": "2"})
    assert not at.exception and not at.error
    p = Problem(batch=1, heads=2, kv_heads=2, seq_q=512, seq_k=512, head_dim=64, dtype="fp16")
    hw = get_hardware("h100-sxm")
    std, fa2 = (simulate(p, hw, algo) for algo in ("standard", "fa2"))

    def dram(r):
        return r.extra["dram_read_bytes"] + r.extra["dram_write_bytes"]

    want = [
        ("time", std.extra["time_s"] / fa2.extra["time_s"], "less"),
        ("DRAM bytes", dram(std) / dram(fa2), "fewer"),
        ("trips", std.trips / fa2.trips, "fewer"),
    ]
    shown = {m.label: m for m in at.metric}
    for label, ratio, word in want:
        assert shown[label].value == f"{ratio:.3g}x {word}", label
    assert shown["time"].proto.delta == (
        f"{fmt.seconds(std.extra['time_s'])} → {fmt.seconds(fa2.extra['time_s'])}"
    )
    assert shown["trips"].proto.delta == f"{fmt.count(std.trips)} → {fmt.count(fa2.trips)}"
    assert any("whole problem (1 x 2 heads" in c.value for c in at.caption)


def test_the_tour_sets_the_controls_and_every_step_renders():
    at = make()
    at.button(key="tour_start").click().run()
    seen = set()
    for step in range(5):
        assert not at.exception and not at.error, step
        assert any(f"step {step + 1}." in m.value for m in at.markdown), step
        assert any("Look at" in m.value for m in at.markdown), step
        seq = [w for w in at.number_input if w.label == "query length"][0].value
        algo = [w for w in at.selectbox if w.label.startswith("flash algorithm")][0].value
        seen.add(algo)
        assert seq == 512
        assert at.get("plotly_chart")
        if step < 4:
            at.button(key="tour_next").click().run()
    assert seen == {"fa1", "fa2"}
    at.button(key="tour_leave").click().run()  # free exploration, one click away
    assert not any("Guided tour" in m.value for m in at.markdown)
    assert [w for w in at.selectbox if w.label.startswith("flash algorithm")][0].value == "fa2"


def test_every_cut_is_said():
    at = make({"seq_q": "4096", "seq_k": "4096", "heads": "1", "kv_heads": "1"})
    assert any("4,096 was cut to 1,024" in m.value for m in at.expander[0].markdown)
    at = make({**ONE_HEAD, "algo": "fa1"})
    assert any("one CTA per (batch, head)" in m.value for m in at.expander[0].markdown)
    assert any("this panel is FA2" in c.value for c in at.caption)


def test_captions_print_units_not_python(walk):
    at, _ = walk
    words = [c.value for c in at.caption] + [m.value for m in at.markdown]
    assert words
    for w in words:
        assert "{'" not in w and "e+0" not in w, w


def _tile_px(fig) -> dict[str, set]:
    """Per algorithm, the (width, height) in pixels of the tiles of each grid drawn."""
    lay = fig["layout"]
    m = lay["margin"]
    plot_w, plot_h = lay["width"] - m["l"] - m["r"], lay["height"] - m["t"] - m["b"]
    out: dict[str, set] = {}
    for d in fig["data"]:
        if d.get("mode") != "markers" or d["x"] == [None]:
            continue
        rows, cols = max(d["y"]) + 1, max(d["x"]) + 1
        xd = lay["xaxis" + d["xaxis"][1:]]["domain"]
        yd = lay["yaxis" + d["yaxis"][1:]]["domain"]
        size = (
            round((xd[1] - xd[0]) * plot_w / cols, 3),
            round((yd[1] - yd[0]) * plot_h / rows, 3),
        )
        out.setdefault(d["hovertemplate"].split(":")[0], set()).add(size)
    return out


def test_decoding_draws_one_row_high_grids_with_square_tiles_everywhere():
    """A 1-row S used to be stretched to full height: within each algorithm every tile of
    every grid is one square size."""
    at = make({"decode": "true", "seq_k": "1024", "heads": "1", "kv_heads": "1"})
    assert not at.exception and not at.error
    fig = spec(at)
    s_rows = [max(d["y"]) + 1 for d in fig["data"] if "S tile" in d.get("hovertemplate", "")]
    assert s_rows == [1]
    sizes = _tile_px(fig)
    assert set(sizes) == {"standard", "fa2"}
    for algo, tiles in sizes.items():
        ((w, h),) = tiles
        assert w == pytest.approx(h, abs=0.01), algo
    assert any("1 query row x" in m.value for m in at.expander[0].markdown)


def test_fa2s_k_tiles_show_as_l2_hits_and_its_q_tiles_as_dram_fills(walk):
    """Tour step 5's claim: the 8 CTAs of one head ask for the same K tile together; one fills
    it from DRAM and seven hit in L2, so K shows L2 hits (it never did when a DRAM fill always
    painted over), while each CTA's own Q tile comes from DRAM."""
    from hbmsim.figures.walkthrough.animation import STATES

    _, fig = walk
    animated = fig["frames"][0]["traces"]

    def shown(grid):
        i = [
            i
            for i, d in enumerate(fig["data"])
            if d.get("hovertemplate", "").startswith(f"fa2: {grid} tile")
        ][0]
        return [c for f in fig["frames"] for c in f["data"][animated.index(i)]["marker"]["color"]]

    hit, dram = STATES.index("L2 hit"), STATES.index("moving to/from DRAM")
    assert shown("K").count(hit) > shown("K").count(dram)
    assert shown("Q").count(dram) > 0 and shown("Q").count(hit) == 0


def test_the_walkthrough_sends_what_plotlys_validation_would(walk):
    """The figure skips plotly's validation on its way to the browser (it costs a fifth of a
    second on a cold first load): the page sends exactly the dict a validated `go.Figure`
    would send, template included, and the validation accepts it without dropping anything."""
    import plotly.graph_objects as go
    import plotly.io as pio

    _, sent = walk
    plain = dict(sent)
    plain["layout"] = {k: v for k, v in sent["layout"].items() if k != "template"}
    validated = json.loads(pio.to_json(go.Figure(plain, skip_invalid=False), validate=False))
    assert sent == validated
    assert sent["layout"]["template"]["layout"]  # plotly's default look, as theme=None draws
