"""The Streamlit app through AppTest: every page renders, reacts to its widgets, keeps its state
in the URL, and never shows a traceback (a seeded fuzz over every widget)."""

import dataclasses
import json
import random
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from hbmsim import Problem, get_hardware  # noqa: E402
from hbmsim.engine.timing import TIMINGS  # noqa: E402
from hbmsim.validation.gpu_runs import load_results  # noqa: E402
from hbmsim.validation.published import load_extra_checks  # noqa: E402

APP = str(Path(__file__).resolve().parent.parent / "app_pages" / "main.py")
PAGES = [
    "walkthrough.py",
    "sweep.py",
    "roofline.py",
    "validate.py",
]
SMALL = {"seq_q": "256", "seq_k": "256", "heads": "2", "kv_heads": "2"}


def make(query=None, page=None):
    at = AppTest.from_file(APP, default_timeout=180)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    at.run()
    if page:
        at.switch_page(page).run()
    return at


def widget(at, label_start):
    for kind in (at.number_input, at.selectbox, at.checkbox):
        for w in kind:
            if w.label.startswith(label_start):
                return w
    raise KeyError(label_start)


def texts(at) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption]
    parts += [str(m.value) for m in at.metric] + [e.value for e in at.error]
    return "\n".join(parts)


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_at_default_settings(page):
    at = make(page=page)
    assert not at.exception and not at.error
    assert at.title
    if "validate" in page:  # the committed GPU run's results, each file with its chart
        files, _ = load_results()
        assert files, "kernels/results/ holds the committed GPU run"
        assert {f"{f.gpu} ({f.date}) — {f.path.name}" for f in files} <= {
            s.value for s in at.subheader
        }
        extra, _ = load_extra_checks()
        assert extra, "kernels/results/extra/ holds the committed extra check"
        assert {path.name for path, _ in extra} <= {s.value for s in at.subheader}
        assert len(at.get("plotly_chart")) >= len(files) + len(extra)
    else:
        assert at.get("plotly_chart")


def walk_spec(at) -> dict:
    return json.loads(at.get("plotly_chart")[0].proto.spec)


def test_walkthrough_follows_the_sequence_length():
    at = make(SMALL)
    before = walk_spec(at)
    widget(at, "query length").set_value(128).run()
    assert not at.exception
    assert walk_spec(at) != before


def test_walkthrough_row_panel_matches_naive_softmax():
    at = make(SMALL)
    assert any("(equal)" in m.value for m in at.markdown)
    at.slider(key="follow_row").set_value(0).run()
    assert any("(equal)" in m.value for m in at.markdown)


def test_sweep_best_tiles_depend_on_the_gpu():
    at = make(SMALL, "sweep.py")
    before = texts(at)
    widget(at, "GPU preset").set_value("l4").run()
    assert not at.exception and texts(at) != before


def test_roofline_reacts_to_the_dtype():
    at = make(SMALL, "roofline.py")
    spec = at.get("plotly_chart")[0].proto.spec
    widget(at, "dtype").set_value("fp32").run()
    assert not at.exception and at.get("plotly_chart")[0].proto.spec != spec


def test_url_parameters_set_the_widgets_and_follow_changes():
    at = make({"seq_q": "384", "gpu": "a100-40gb", "causal": "true", "algo": "fa1"})
    assert widget(at, "query length").value == 384
    assert widget(at, "GPU preset").value == "a100-40gb"
    assert widget(at, "causal").value is True
    widget(at, "head dim").set_value(32).run()
    assert at.query_params["head_dim"] in ("32", ["32"])
    again = make({k: (v[0] if isinstance(v, list) else v) for k, v in at.query_params.items()})
    assert widget(again, "head dim").value == 32 and widget(again, "query length").value == 384


def test_url_aliases_set_their_fields_and_unknown_keys_are_named_in_one_line():
    """`pass` and `pass_` both set the pass, the CLI's `seq` both lengths and `kv-heads` the kv
    heads; a field's own key wins over an alias; keys the app does not know are named
    together in one line, and the app's own keys are not among them."""
    at = make({"pass_": "bwd", "seq": "384", "seq_k": "512", "kv-heads": "2", "heads": "4"})
    assert not at.exception and not at.error
    assert widget(at, "pass").value == "bwd"
    assert widget(at, "query length").value == 384 and widget(at, "key/value length").value == 512
    assert widget(at, "kv heads").value == 2
    assert make({"pass": "fwd+bwd"}).query_params["pass"] in ("fwd+bwd", ["fwd+bwd"])
    at = make({"colour": "red", "bogus": "1", "heads": "2", "kv_heads": "2"})
    (line,) = [w.value for w in at.warning if "URL keys ignored" in w.value]
    assert "colour" in line and "bogus" in line and "heads" not in line


def test_choices_that_cannot_work_are_not_offered_and_say_why():
    """split-kv runs the forward only: its pass control offers fwd alone, disabled, the help
    saying why; the flash-attn-3 mirror, which models its backward, offers every pass; on an
    A100 flash-attn-3 is not in the algorithm list, and the sidebar says so."""
    at = make({**SMALL, "algo": "split-kv"})
    p = widget(at, "pass")
    assert p.options == ["fwd"] and p.disabled and "forward only" in p.help
    p = widget(make({**SMALL, "algo": "flash-attn-3"}), "pass")
    assert p.options == ["fwd", "bwd", "fwd+bwd"] and not p.disabled
    at = make({**SMALL, "gpu": "a100-40gb"})
    algo = widget(at, "flash algorithm")
    assert "flash-attn-3" not in algo.options and "fa2" in algo.options
    assert "Hopper" in algo.help
    assert any("Not offered for these settings: flash-attn-3" in c.value for c in at.caption)


def test_a_number_out_of_its_fields_one_range_is_one_line_on_every_page():
    """Batch 0 is refused in the field's own words (not Streamlit's) and the field keeps its
    last good value; split-kv's splits have one range, the one its help gives (one split per
    K/V block: 4 at 256 tokens), said alike on every page."""
    at = make(SMALL)
    widget(at, "batch").set_value(0).run()
    assert not at.exception
    assert [e.value for e in at.error] == [
        "batch must be a whole number from 1 to 65,536 (got 0); kept 1"
    ]
    assert widget(at, "batch").value == 1
    at = make({**SMALL, "algo": "split-kv"})
    assert "from 0 (split-kv's default) to 4" in widget(at, "split-kv splits").help
    widget(at, "split-kv splits").set_value(100).run()
    line = "split-kv splits must be a whole number from 0 to 4 (got 100); kept 0"
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception
        assert [e.value for e in at.error] == [line], page


def test_a_bad_url_parameter_is_named_and_ignored():
    at = make({"seq_q": "lots", "heads": "2", "kv_heads": "2"})
    assert not at.exception
    assert any(
        "seq_q" in w.value
        and "query length must be plain ASCII digits" in w.value
        and "a whole number from 1 to" in w.value
        for w in at.warning
    )
    assert not any("invalid literal" in w.value for w in at.warning)
    assert widget(at, "query length").value == 1024


@pytest.mark.parametrize("page", PAGES[:3])
def test_an_invalid_combination_is_an_error_message_on_every_page(page):
    """Named by the sidebar's label, with the values allowed, and said once per page (not
    again by every part of the page that meets it)."""
    at = make({"heads": "6", "kv_heads": "4"}, page)
    assert not at.exception
    refusals = [e.value for e in at.error if "must divide heads" in e.value]
    assert len(refusals) == 1, refusals
    assert "kv heads: must divide heads (6): one of 1, 2, 3, 6; got 4" in refusals[0]
    assert "kv_heads" not in refusals[0]


@pytest.mark.parametrize("page", PAGES[:3])
def test_a_refusal_shared_by_both_algorithms_is_one_line(page):
    """fp8 on an A100: standard and fa2 are refused alike; the page says it once, names both
    where both were refused, and draws no empty chart or animation note under it."""
    at = make({"gpu": "a100-80gb", "dtype": "fp8", "heads": "2", "kv_heads": "2"}, page)
    assert not at.exception
    fp8 = [e.value for e in at.error if "fp8" in e.value]
    assert len(fp8) == 1, fp8
    assert not any(i.value.startswith("Animated:") for i in at.info)
    drawn = [c for c in at.get("plotly_chart")]
    for chart in drawn:
        spec = json.loads(chart.proto.spec)
        assert any(trace.get("x") or trace.get("z") for trace in spec["data"]), spec["layout"]


def test_tiles_that_do_not_fit_are_explained_and_the_rest_still_works():
    """The flash side's error is shown; standard attention and the row panel still are."""
    at = make({**SMALL, "bq": "512", "bk": "512"})
    assert not at.exception
    assert any("SRAM" in e.value for e in at.error)
    labels = [d["text"][0] for d in walk_spec(at)["data"] if d.get("mode") == "text"]
    assert any("standard" in t for t in labels)
    assert any("(equal)" in m.value for m in at.markdown)
    assert any("default tiles" in i.value for i in at.info)


def test_figures_stay_under_five_megabytes_at_the_largest_settings():
    at = make(
        {
            "seq_q": str(1 << 24),
            "seq_k": str(1 << 24),
            "heads": "1",
            "kv_heads": "1",
            "head_dim": "1024",
            "dtype": "fp32",
        }
    )
    assert not at.exception
    for chart in at.get("plotly_chart"):
        assert len(chart.proto.spec) < 5_000_000


def _random_value(rng, name, f, w):
    if f.choices:  # what the control offers (choices that cannot work are not offered)
        return rng.choice(list(w.options))
    if f.kind is bool:
        return rng.random() < 0.5
    if f.kind is float:
        return rng.choice([f.lo, f.hi, round(rng.uniform(f.lo, f.hi), 2)])
    extreme = rng.random() < 0.1
    if extreme:
        return int(rng.choice([f.lo, f.hi]))
    small = {
        "seq_q": (1, 700),
        "seq_k": (1, 700),
        "batch": (1, 3),
        "heads": (1, 8),
        "kv_heads": (1, 8),
        "head_dim": (1, 256),
        "bq": (0, 300),
        "bk": (0, 300),
        "sram_kib": (0, 512),
        "splits": (0, 40),
        "hbm_gbps": (0, 5000),
    }
    lo, hi = small.get(name, (f.lo, f.hi))
    return rng.randint(int(lo), int(hi))


def test_fuzz_every_widget_never_raises():
    """200 random settings (seed 2026), extremes included, each on a random page."""
    from app_pages.fields import FIELDS

    rng = random.Random(2026)
    at = make(SMALL)
    for i in range(200):
        page = rng.choice(PAGES)
        at.switch_page(page)
        for name in rng.sample(list(FIELDS), rng.randint(1, 4)):
            w = widget(at, FIELDS[name].label)
            if not w.disabled:  # as in a browser: a disabled widget cannot be changed
                w.set_value(_random_value(rng, name, FIELDS[name], w))
        at.run()
        settings = {n: widget(at, FIELDS[n].label).value for n in FIELDS}
        assert not at.exception, (i, page, settings, at.exception)
        assert at.title, (i, page, settings)
        assert at.get("plotly_chart") or at.error or at.info, (i, page, settings)


@pytest.mark.parametrize("page", PAGES[:3])
def test_every_page_offers_downloads_of_what_it_shows(page):
    at = make(SMALL, page)
    labels = [str(b.proto.label) for b in at.get("download_button")]
    assert labels, page
    assert all("Download" in label for label in labels)


def test_the_pass_selector_adds_the_backward_kernels():
    at = make(SMALL, "roofline.py")
    widget(at, "pass").set_value("fwd+bwd").run()
    assert not at.exception and not at.error
    kernels = {row for row in at.dataframe[0].value["kernel"]}
    assert {"qk", "dq", "fa2_fwd", "fa2_bwd"} <= kernels


def test_decode_mode_with_split_kv():
    at = make({**SMALL, "seq_k": "4096"})
    widget(at, "decode").check().run()
    widget(at, "flash algorithm").set_value("split-kv").run()
    assert not at.exception and not at.error
    assert widget(at, "query length").disabled
    assert any("one query row" in m.value for m in at.expander[0].markdown)
    at.switch_page("roofline.py").run()
    kernels = set(at.dataframe[0].value["kernel"])
    assert {"splitkv_fwd", "splitkv_combine"} <= kernels


def test_the_walkthrough_animates_a_training_step():
    """fwd+bwd: the backward's grids and FA2's atomic adds reach the animation and downloads."""
    at = make({**SMALL, "pass_": "fwd+bwd"})
    assert not at.exception and not at.error
    titles = {a["text"] for a in walk_spec(at)["layout"]["annotations"]}
    assert {"dQ", "dK", "dV", "dO"} <= titles


@pytest.mark.parametrize("algo", ["fa2", "fa1", "split-kv", "flash-attn-2", "flash-attn-3"])
@pytest.mark.parametrize("pass_", ["fwd", "bwd", "fwd+bwd"])
def test_every_page_renders_every_pass_and_algorithm(pass_, algo):
    """The combinations a random fuzz may miss, each on every page: no traceback, and a
    message only where the combination cannot run (split-kv is forward only): the sidebar's
    one line saying the pass was set to the one the algorithm runs, on every page, and nothing
    more."""
    at = make({**SMALL, "pass_": pass_, "algo": algo})
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception, (page, pass_, algo)
        invalid = algo == "split-kv" and pass_ != "fwd"
        said = [f"pass {pass_} was set to fwd: {algo} runs fwd only"] if invalid else []
        assert [e.value for e in at.error] == said, page


def test_flash_attn_3_in_the_walkthrough_draws_its_producer_and_warpgroups():
    """Choosing the FlashAttention-3 mirror (the H100 is the default GPU) animates it beside
    standard attention and adds the chart of one CTA's producer and consumer warpgroups, read
    off the engine's timeline: loads, MMAs and softmaxes, every bar of positive length."""
    at = make({**SMALL, "algo": "flash-attn-3"})
    assert not at.exception and not at.error
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    (roles,) = [s for s in specs if "warpgroups" in str(s["layout"].get("title", ""))]
    bars = {d["name"]: d for d in roles["data"]}
    assert set(bars) == {"TMA load", "MMA (tensor cores)", "softmax"}
    assert set(bars["softmax"]["y"]) == {
        "consumer warpgroup 0",
        "consumer warpgroup 1",
        "consumer warpgroup 2",
    }
    assert all(x > 0 for d in roles["data"] for x in d["x"])
    assert "flash-attn-3" in json.dumps(walk_spec(at))  # the animation's second side
    widget(at, "GPU").set_value("a100-40gb").run()
    assert not at.exception
    assert any("only supports Hopper" in e.value for e in at.error)


def test_the_sweep_says_which_cells_were_not_simulated():
    at = make({"seq_q": "4096", "seq_k": "4096", "heads": "2", "kv_heads": "2"}, PAGES[1])
    assert not at.exception and not at.error
    assert any("were not simulated" in i.value for i in at.info)
    time_map = json.loads(at.get("plotly_chart")[2].proto.spec)
    hover = [t for row in time_map["data"][0]["text"] for t in row]
    assert any(t.startswith("not simulated: more than") for t in hover)
    assert not any("time_s" in t for t in hover)


def test_the_validate_page_shows_the_recorded_published_comparison():
    """The published set's recorded predictions draw at once: a predicted-vs-measured chart
    with one trace per implementation, and the per-group table."""
    from hbmsim.validation.published import load_recorded

    recorded = load_recorded()
    at = make(page="validate.py")
    assert not at.exception
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    (chart,) = [c for c in charts if "Published" in json.dumps(c["layout"].get("title", ""))]
    extra = [c for c in charts if "h200-torch" in json.dumps(c["layout"].get("title", ""))]
    assert len(extra) == 1, "the committed extra check draws a chart of its own"
    assert {t["name"] for t in extra[0]["data"] if t.get("mode") == "markers"} == {
        "flash-attn-2",
        "torch-eager",
    }
    names = {t["name"] for t in chart["data"] if t.get("mode") == "markers"}
    assert names == {r["impl"] for r in recorded["points"] if r["predicted_time_s"]}
    drawn = sum(len(t["x"]) for t in chart["data"] if t.get("mode") == "markers")
    assert drawn == sum(1 for r in recorded["points"] if r["predicted_time_s"])
    assert any(f"recorded on {recorded['date']}" in c.value for c in at.caption)
    speedups = [d.value for d in at.dataframe if "over" in d.value.columns]
    published = speedups[0]  # the published set's, before the extra checks' own
    fa3 = [row for _, row in published.iterrows() if row["over"] == "flash-attn-2"]
    recorded_fa3 = [s for s in recorded["speedups"] if s.get("baseline") == "flash-attn-2"]
    assert fa3 and len(fa3) == len(recorded_fa3)  # FA3 over FA2, each Fig. 5a problem
    assert {row["implementation"] for row in fa3} == {"flash-attn-3"}


def test_the_sweep_reports_each_cell_and_redraws_a_setting_swept_before_from_its_cache():
    """The tile sweep tells its progress callback about every cell, by name, in order; a
    setting swept before (causal ticked, unticked, ticked again) redraws from the cache with
    no exception (a cached function that drew a progress bar made outside it would fail on
    its replay) and every chart."""
    from app_pages import data
    from app_pages.fields import default_settings

    at = make(page="sweep.py")
    charts = len(at.get("plotly_chart"))
    for ticked in (True, False, True):
        box = widget(at, "causal")
        (box.check if ticked else box.uncheck)().run()
        assert not at.exception and not at.error
        assert len(at.get("plotly_chart")) == charts
    calls = []
    defaults = default_settings()
    rows = data.tile_sweep(defaults, lambda *a: calls.append(a))
    cells = [(bq, bk) for bq in data.SWEEP_TILES for bk in data.SWEEP_TILES]
    assert [(r["bq"], r["bk"]) for r in rows if r["feasible"]] == [
        c for c, r in zip(cells, rows, strict=True) if r["feasible"]
    ]
    assert [c[:2] for c in calls] == [(i, len(cells)) for i in range(len(cells))]
    assert [c[2] for c in calls] == [f"{defaults.algo}, bq {bq} x bk {bk}" for bq, bk in cells]


def test_the_validate_page_leads_with_one_headline_per_comparison():
    """Before any detail: a card per comparison (the published set, each extra check, each
    GPU run of our kernels) with its median |error|, worst error and the points past the
    ±40% goal, computed here from the recorded files, and development set or never seen."""
    import statistics

    from hbmsim.validation.published import load_recorded

    def expect(errors):
        worst = max(errors, key=abs)
        past = sum(abs(e) > 0.40 for e in errors)
        return f"{100 * statistics.median(abs(e) for e in errors):.0f}%", (
            f"worst {100 * worst:+.0f}% · {past} of {len(errors)} past ±40%"
        )

    published = [r["error"] for r in load_recorded()["points"] if r["predicted_time_s"]]
    extra, _ = load_extra_checks()
    files, _ = load_results()
    wanted = [expect(published) + ("development set",)]
    for _, comparison in extra:
        errors = [r["error"] for r in comparison["points"] if r["predicted_time_s"]]
        wanted.append(expect(errors) + ("never seen",))
    for f in files:
        errors = [c["predicted_time_s"] / c["measured_time_s"] - 1 for c in f.configs]
        wanted.append(expect(errors) + ("development set",))
    at = make(page="validate.py")
    assert not at.exception
    medians = [m.value for m in at.metric if m.label == "median |error|"]
    captions = [c.value for c in at.caption if " past ±40%" in c.value]
    assert len(medians) == len(captions) == len(wanted)
    for (median, words, kind), shown, caption in zip(wanted, medians, captions, strict=True):
        assert shown == median and caption.startswith(words) and caption.endswith(kind)
    headers = [h.value for h in at.header]
    assert headers[0].startswith("Libraries vs published timings")  # the detail follows


def test_simulating_the_published_points_twice_draws_the_comparison_both_times(
    tmp_path, monkeypatch
):
    """The Validate page's button simulates the set with a progress bar; pressed again (the
    points cached by then, as for a second user of the server) it draws the same comparison
    with no exception. A two-point set keeps it short."""
    import streamlit as st

    from hbmsim.validation import published as published

    full = json.loads(published.DEFAULT_PATH.read_text())
    small = [p for p in full["points"] if p["seq_q"] == 128 and p["source"] == "FA1-appE"][:2]
    assert len(small) == 2
    path = tmp_path / "published.json"
    path.write_text(json.dumps({**full, "points": small}))
    monkeypatch.setattr(published, "DEFAULT_PATH", path)
    st.cache_data.clear()
    try:
        at = make(page="validate.py")
        drawn = []
        for _ in range(2):
            at.button(key="run_published").click().run()
            assert not at.exception
            charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
            (chart,) = [c for c in charts if "Published" in json.dumps(c["layout"]["title"])]
            drawn.append(
                sorted(x for t in chart["data"] if t.get("mode") == "markers" for x in t["x"])
            )
        assert len(drawn[0]) == 2 and drawn[0] == drawn[1]
    finally:
        st.cache_data.clear()  # the next test's pages read the packaged set


def test_the_sweep_uses_the_sidebars_splits_for_split_kv():
    """The tile sweep runs split-kv with the splits the user set: a count past every tile's
    K/V blocks is refused by name, never swept at the default instead."""
    base = {"algo": "split-kv", "decode": "true", "seq_k": "2048", "heads": "2", "kv_heads": "2"}
    at = make({**base, "splits": "4096"}, "sweep.py")
    assert not at.exception
    assert any(e.value.startswith("splits: must be from 1 to") for e in at.error)
    ok = make({**base, "splits": "4"}, "sweep.py")
    assert not ok.exception and not any("splits" in e.value for e in ok.error)


def test_a_sweep_nothing_fits_points_at_smaller_tiles_and_draws_no_empty_time_plot():
    """2 KiB of SRAM per SM: no tile of the sweep's grid fits (said once, with where smaller
    tiles run), and no scaling run is small enough to simulate here, so the time plot is a
    sentence, not empty axes."""
    at = make({"sram_kib": "2", "heads": "2", "kv_heads": "2"}, "sweep.py")
    assert not at.exception
    assert [e.value for e in at.error if e.value.startswith("tiles:")]
    infos = " ".join(i.value for i in at.info)
    assert "Smaller tiles may" in infos and "No predicted time to plot" in infos
    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]
    assert not any("predicted time" in t for t in titles), titles


def test_splits_the_animated_cut_problem_cannot_hold_are_said_not_refused():
    """The walkthrough animates at most 1,024 tokens: 20 splits of a 32k-token KV cache run
    on the Roofline page, and the cut animation, whose 1,024 keys hold 16 K/V blocks of 64,
    animates 16 splits and says so."""
    q = {"algo": "split-kv", "splits": "20", "decode": "true", "seq_k": "32768"}
    q |= {"heads": "2", "kv_heads": "2"}
    walk = make(q, "walkthrough.py")
    assert not walk.exception and not walk.error
    notes = [m.value for m in walk.expander[0].markdown]
    assert any(
        "1,024 keys hold 16 K/V blocks of bk 64, so it animates 16 splits; your 20 run" in n
        for n in notes
    ), notes
    roof = make(q, "roofline.py")
    assert not roof.exception and not any("splits" in e.value for e in roof.error)


def test_the_walkthrough_refuses_an_animation_too_long_to_replay_and_says_its_limit():
    """2 KiB of SRAM per SM: tiles of 8 and 1 rows make standard's head 549,888 loads and
    stores and fa2's 2.1 M; the page names the limit and the count for each side instead of
    replaying them (36 s before), and offers no download of a run it did not make."""
    from app_pages.data import WALK_MAX_TRIPS

    at = make({"sram_kib": "2"}, "walkthrough.py")
    assert not at.exception
    refusals = [e.value for e in at.error if f"at most {WALK_MAX_TRIPS:,} here" in e.value]
    assert [r.split(":")[0] for r in refusals] == ["standard", "fa2"]
    assert not at.get("download_button") or all(
        "trace" not in b.proto.label for b in at.get("download_button")
    )


def test_the_servers_warm_start_leaves_the_default_walkthrough_in_the_cache(monkeypatch):
    """app.py's lifespan runs warm_start before the server answers: afterwards the default
    Walkthrough (its figure, its row panel) come from the caches every session reads, so the first
    visitor does not simulate it. Shown by making the simulation fail once warm: the cached
    page still comes back. And the launcher is what `streamlit run app.py` finds."""
    import ast

    import streamlit as st

    from app_pages import data
    from app_pages.fields import FIRST_ROW, default_settings
    from app_pages.warm import warm_start

    st.cache_data.clear()
    st.cache_resource.clear()
    try:
        assert warm_start()["walkthrough"] is True

        def recomputed(*_args, **_kwargs):
            raise AssertionError("the default walkthrough was simulated again")

        monkeypatch.setattr(data, "walk_problem", recomputed)
        monkeypatch.setattr(data, "_walk_run", recomputed)
        s = default_settings()
        walk = data.walkthrough(s)
        assert [side["algo"] for side in walk["sides"]] == ["standard", s.algo]
        assert data.walk_chart(s).to_dict()["frames"]
        assert data.row_figure(s, FIRST_ROW)[1]["tiles"]  # the row panel, cached too
    finally:
        st.cache_data.clear()
        st.cache_resource.clear()
    launcher = ast.parse((Path(APP).parent.parent / "app.py").read_text())
    calls = [n.value for n in launcher.body if isinstance(n, ast.Assign)]
    assert [ast.unparse(c.func) for c in calls] == ["st.App"]
    assert ast.literal_eval(calls[0].args[0]) == "app_pages/main.py"


def test_a_failed_warm_start_is_logged_and_the_server_still_starts(monkeypatch, caplog):
    """A warm start that raises (here: the walkthrough cannot simulate) returns False and logs
    why; nothing propagates to the server's lifespan."""
    import streamlit as st

    from app_pages import data
    from app_pages.warm import warm_start

    def broken(_s):
        raise RuntimeError("no simulation today")

    st.cache_data.clear()
    monkeypatch.setattr(data, "walkthrough", broken)
    with caplog.at_level("ERROR", logger="hbmsim.app"):
        out = warm_start()
    assert out["walkthrough"] is False
    assert "warm start failed" in caplog.text and "no simulation today" in caplog.text


def test_the_page_script_runs_from_any_folder(tmp_path):
    """Streamlit puts the script's own folder (app_pages/) on sys.path, not the repository's:
    the script must import its pages however it is started. A fresh interpreter in another
    folder, whose sys.path holds neither, renders the default page without an exception."""
    import subprocess
    import sys

    code = (
        "import logging; logging.disable(logging.WARNING)\n"
        "from streamlit.testing.v1 import AppTest\n"
        f"at = AppTest.from_file({APP!r}, default_timeout=180)\n"
        "at.run()\n"
        "assert not at.exception, [e.value for e in at.exception]\n"
        "print(at.title[0].value)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "attention" in out.stdout


def test_a_model_preset_sets_the_shape_and_editing_the_shape_makes_it_custom():
    from hbmsim.problem.models import MODELS

    at = make(SMALL, "roofline.py")
    widget(at, "model").set_value("llama-3-8b").run()
    m = MODELS["llama-3-8b"]
    assert (widget(at, "heads").value, widget(at, "kv heads").value) == (m.heads, m.kv_heads)
    assert widget(at, "head dim").value == m.head_dim
    assert not at.exception and not at.error
    assert at.query_params["model"] in ("llama-3-8b", ["llama-3-8b"])
    widget(at, "heads").set_value(16).run()
    assert widget(at, "model").value == "custom" and widget(at, "heads").value == 16
    assert (widget(at, "kv heads").value, widget(at, "head dim").value) == (8, 128)


def test_a_model_in_the_url_sets_its_shape_and_names_a_value_it_overrides():
    from hbmsim.problem.models import MODELS

    at = make({"seq_q": "256", "seq_k": "256", "model": "gemma-2b", "heads": "4"}, "roofline.py")
    m = MODELS["gemma-2b"]
    assert widget(at, "model").value == "gemma-2b"
    assert (widget(at, "heads").value, widget(at, "kv heads").value) == (m.heads, m.kv_heads)
    assert widget(at, "head dim").value == m.head_dim
    warnings = [w.value for w in at.sidebar.warning]
    assert any("heads=4 ignored: model gemma-2b sets 8" in w for w in warnings), warnings
    assert not at.exception


def test_an_alternating_model_says_which_layer_kind_is_drawn():
    """gemma-2-9b alternates local and global layers: the page draws a global one (no window
    set on it) and the caption under the model gives the split and the local layers' mask."""
    at = make({"seq_q": "8192", "seq_k": "8192", "causal": "true"}, "roofline.py")
    widget(at, "model").set_value("gemma-2-9b").run()
    assert not at.exception and not at.error
    captions = " ".join(c.value for c in at.sidebar.caption)
    assert "Drawn: a global layer (21 of 42)" in captions, captions
    assert "the 21 local layers: causal, window 4,095 left" in captions, captions
    assert "soft-caps its attention logits at 50" in captions and "not counted" in captions


def test_the_timing_control_sets_which_time_the_headline_compares():
    """A library's small call is bound by its host: timed as the GPU alone (kernel) the
    headline's flash time is the engine's kernel time, in a loop it is the host's, and the
    caption says which timing it is."""
    from hbmsim import fmt
    from hbmsim.api import simulate

    q = {**SMALL, "algo": "flash-attn-2"}
    problem = Problem(seq_q=256, seq_k=256, heads=2, kv_heads=2)
    for mode in ("kernel", "loop"):
        at = make({**q, "timing": mode})
        assert not at.exception and not at.error
        assert widget(at, "timing").value == mode
        expected = simulate(problem, get_hardware("h100-sxm"), impl="flash-attn-2", timing=mode)
        (time,) = [m for m in at.metric if "time" in m.label.lower()]
        assert fmt.seconds(expected.extra["time_s"]) in time.help
        assert any(f"timing: {TIMINGS[mode]}" in c.value for c in at.caption)
    kernel = simulate(problem, get_hardware("h100-sxm"), impl="flash-attn-2", timing="kernel")
    loop = simulate(problem, get_hardware("h100-sxm"), impl="flash-attn-2", timing="loop")
    assert kernel.extra["time_s"] < loop.extra["time_s"]  # the control changes the answer


def test_a_model_with_a_sliding_window_applies_it_and_says_so_under_the_model():
    """mistral-7b attends over 4,096 keys: past that length the sidebar's problem carries its
    window (as `--model` does) and the model's caption says where it comes from; at or below
    it the window hides nothing, and the caption says that."""
    from app_pages.fields import default_settings

    s = dataclasses.replace(
        default_settings(), model="mistral-7b", heads=32, kv_heads=8, head_dim=128
    )
    long = dataclasses.replace(s, seq_q=6000, seq_k=6000)
    assert long.problem().window_left == 4096 and long.problem().causal
    assert dataclasses.replace(s, seq_q=2048, seq_k=2048).problem().window_left == -1
    at = make({"model": "mistral-7b", "seq_q": "6000", "seq_k": "6000", "causal": "true"})
    assert not at.exception
    assert any("sliding window of 4,096 keys" in c.value for c in at.caption)
    at = make({"model": "mistral-7b", "seq_q": "2048", "seq_k": "2048"})
    (line,) = [c.value for c in at.caption if "sliding window" in c.value]
    assert "fits in it, so no key is hidden" in line


def test_the_walkthrough_draws_the_causal_masks_edge_on_the_score_grids():
    """Causal: a dashed line on S and P of both sides marks where each query row's keys end
    (one key past the diagonal), so the grey tiles right of it read as never computed; the
    notes say what the line is. Without the mask, no line."""
    at = make({**SMALL, "causal": "true"})
    assert not at.exception and not at.error
    spec = walk_spec(at)
    edges = [t for t in spec["data"] if t.get("mode") == "lines" and t.get("name")]
    score_grids = [
        a for a in spec["layout"]["annotations"] if a["text"] in ("S = QKᵀ", "P = softmax(S)")
    ]
    assert score_grids and [t["name"] for t in edges] == ["causal edge"] * len(score_grids)
    for t in edges:
        cols = spec["layout"][t["xaxis"].replace("x", "xaxis")]["range"][1] + 0.5
        rows = spec["layout"][t["yaxis"].replace("y", "yaxis")]["range"][0] + 0.5
        row_block, col_block = 256 / rows, 256 / cols  # tokens per display tile
        assert t["x"] == pytest.approx([1 / col_block - 0.5, 257 / col_block - 0.5])
        assert t["y"] == pytest.approx([-0.5, 256 / row_block - 0.5])
    assert "dashed red lines on S and P are the edges of the causal mask" in "\n".join(
        m.value for m in at.markdown
    )
    plain = walk_spec(make(SMALL))
    assert not [t for t in plain["data"] if t.get("mode") == "lines" and t.get("name")]


def test_the_sweep_page_sweeps_split_kvs_splits_when_decoding():
    """Decoding (one query row): the Sweep page times split-kv at 1, 2, 4, ... K/V splits up to
    its K/V blocks, starring the fastest and ringing the count it picks itself; each point's
    time is what `simulate` gives split-kv with that many splits. Prefill with fa2: no such
    section."""
    at = make({"seq_q": "1", "seq_k": "4096", "heads": "2", "kv_heads": "2"}, "sweep.py")
    assert not at.exception and not at.error
    assert "Splits of the K/V sequence (split-kv)" in [h.value for h in at.subheader]
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    chart = next(c for c in charts if "K/V splits" in json.dumps(c["layout"].get("title")))
    line = chart["data"][0]
    picked = next(d["name"] for d in chart["data"] if d.get("name", "").startswith("split-kv's"))
    own = int(picked.rsplit(" ", 1)[1])  # split-kv's own count is swept too
    assert line["x"] == sorted({1, 2, 4, 8, 16, 32, 64, own})  # 64 K/V blocks of bk 64
    p = Problem(seq_q=1, seq_k=4096, heads=2, kv_heads=2)
    hw = get_hardware("h100-sxm")
    from hbmsim import simulate

    for n, t in zip(line["x"], line["y"], strict=True):
        assert t == pytest.approx(
            simulate(p, hw, algo="split-kv", splits=n).extra["engine"]["times_s"]["loop"]
        )
    names = [d.get("name", "") for d in chart["data"]]
    fastest = min(zip(line["y"], line["x"], strict=True))[1]
    assert f"fastest: {fastest}" in names
    assert any(n.startswith("split-kv's own choice: ") for n in names)
    prefill = make(SMALL, "sweep.py")
    assert "Splits of the K/V sequence (split-kv)" not in [h.value for h in prefill.subheader]


def test_an_mla_model_brings_its_latent_kv_and_says_its_absorbed_shape():
    """deepseek-v3: the sidebar's problem carries latent K/V (V is the latent row's first 512
    columns), the model's caption gives the absorbed shape, and the page runs it; a shape
    edited away from the model's is custom and plain again."""
    from app_pages.fields import default_settings

    s = dataclasses.replace(
        default_settings(), model="deepseek-v3", heads=128, kv_heads=1, head_dim=576, seq_q=1
    )
    p = s.problem()
    assert (p.head_dim, p.dv, p.latent_kv) == (576, 512, True)
    assert not dataclasses.replace(s, model="custom").problem().latent_kv
    at = make({"model": "deepseek-v3", "seq_q": "1", "seq_k": "256", "algo": "fa2"})
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert widget(at, "head dim").value == 576
    assert any("multi-head latent attention" in c.value for c in at.caption)
