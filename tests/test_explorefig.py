"""The Explore page's views (hbmsim.figures.explore) on hand-made rows whose answers are known: the
Pareto frontier, the best configuration per model and context, and the rows a view leaves out
(and says so)."""

import itertools
import json
import random

import pytest

from hbmsim.explore import parse_spec, read_table, run_point
from hbmsim.explore.table import columns_for
from hbmsim.figures import explore as ef

COLUMNS = columns_for([])


def row(n: int, **values) -> dict:
    """A row of an explore table: every column, the given values over plain defaults."""
    base = {c: None for c in COLUMNS}
    base.update(
        point_id=f"p{n}",
        gpu="h100-sxm",
        sm_count=132,
        sram_bytes_per_sm=233472,
        l2_bytes=52428800,
        hbm_bytes_per_s=3.35e12,
        clock_hz=1.83e9,
        model="gpt2-medium",
        heads=16,
        kv_heads=16,
        head_dim=64,
        batch=1,
        context=1024,
        causal=True,
        dtype="fp16",
        program="fa2",
        seq_q=1024,
        seq_k=1024,
        status="ok",
        reason="",
        bq_used=128,
        bk_used=64,
        time_s=1e-5,
        tflops=100.0,
        engine_note="",
    )
    base["pass"] = "prefill"
    base.update(values)
    return base


def test_the_pareto_frontier_of_a_hand_made_set():
    """Lower is better on both axes: (3, 4) is beaten by (2, 3), (5, 5) by every point, and
    (1, 6) by (1, 5) at the same x; the two equal points (2, 3) are both kept."""
    points = [(1, 5), (2, 3), (3, 4), (4, 1), (2, 3), (5, 5), (1, 6)]
    assert ef.pareto_front(points) == [0, 1, 4, 3]
    assert ef.pareto_front([]) == []
    assert ef.pareto_front([(7, 7)]) == [0]


@pytest.mark.parametrize("seed", range(20))
def test_the_pareto_frontier_is_every_point_no_other_dominates(seed):
    rng = random.Random(seed)
    points = [(rng.randint(0, 6), rng.randint(0, 6)) for _ in range(rng.randint(1, 30))]

    def dominated(p):
        return any(q[0] <= p[0] and q[1] <= p[1] and q != p for q in points)

    front = ef.pareto_front(points)
    assert sorted(front) == [i for i, p in enumerate(points) if not dominated(p)]
    assert [points[i][0] for i in front] == sorted(points[i][0] for i in front)


def test_the_pareto_figure_draws_each_groups_frontier_in_the_axes_units():
    rows = [
        row(0, program="fa2", sram_bytes_per_sm=64 * 1024, time_s=30e-6),
        row(1, program="fa2", sram_bytes_per_sm=128 * 1024, time_s=20e-6),
        row(2, program="fa2", sram_bytes_per_sm=228 * 1024, time_s=25e-6),  # beaten by 1
        row(3, program="fa1", sram_bytes_per_sm=64 * 1024, time_s=40e-6),
        row(4, program="fa1", sram_bytes_per_sm=228 * 1024, time_s=35e-6),
        row(5, program="fa1", sram_bytes_per_sm=128 * 1024, status="infeasible", time_s=None),
    ]
    spec = json.loads(ef.pareto_figure(rows, "sram_bytes_per_sm", "time_s", "program").to_json())
    traces = {t["name"]: t for t in spec["data"]}
    assert set(traces) == {"fa1", "fa1 frontier", "fa2", "fa2 frontier"}
    assert sorted(traces["fa2"]["x"]) == [64, 128, 228]  # KiB
    assert traces["fa2 frontier"]["x"] == [64, 128]
    assert traces["fa2 frontier"]["y"] == pytest.approx([30, 20])  # µs
    assert traces["fa1 frontier"]["x"] == [64, 228]  # the infeasible row is not drawn
    assert traces["fa2"]["marker"]["color"] == "#1f77b4"  # fa2's colour in every chart
    assert spec["layout"]["xaxis"]["title"]["text"] == "SRAM per SM (KiB)"


def test_models_of_one_shape_are_one_trace_named_for_both_and_times_read_by_size():
    """llama-3-8b and mistral-7b share an attention shape, so their points coincide: drawn as
    two traces the later hid the earlier, though both were in the legend. They are one trace
    named for both; a model with other points keeps its own trace and marker shape. Times of
    milliseconds read in ms."""
    rows = [
        row(i, model=m, sram_bytes_per_sm=kib * 1024, time_s=t)
        for i, (m, kib, t) in enumerate(
            [
                ("llama-3-8b", 64, 3e-3),
                ("llama-3-8b", 128, 2e-3),
                ("mistral-7b", 64, 3e-3),
                ("mistral-7b", 128, 2e-3),
                ("qwen2-7b", 64, 4e-3),
                ("qwen2-7b", 128, 1e-3),
            ]
        )
    ]
    spec = json.loads(ef.pareto_figure(rows, "sram_bytes_per_sm", "time_s", "model").to_json())
    points = [t for t in spec["data"] if not t["name"].endswith("frontier")]
    assert [t["name"] for t in points] == [
        "llama-3-8b = mistral-7b (the same points)",
        "qwen2-7b",
    ]
    assert points[0]["marker"]["symbol"] != points[1]["marker"]["symbol"]
    assert sorted(points[1]["y"]) == pytest.approx([1.0, 4.0])  # ms
    assert spec["layout"]["yaxis"]["title"]["text"] == "time (ms)"
    shown = ef.display_rows(rows, ["model", "time_s", "rows_as_fast"])
    assert set(shown[0]) == {"model", "time (ms)", "tied for fastest"}


def test_rows_without_a_value_on_an_axis_are_left_out_and_counted_by_why():
    rows = [
        row(0),
        row(1, status="infeasible", time_s=None, tflops=None, bq_used=None, bk_used=None),
        row(2, status="infeasible", time_s=None),
        row(3, time_s=None, engine_note="skipped: more than 2,000,000 trips"),
        row(4, status="error", time_s=None),
    ]
    kept, left = ef.plotted(rows, "sram_bytes_per_sm", "time_s")
    assert [r["point_id"] for r in kept] == ["p0"]
    assert len(left) == 4
    note = ef.left_out_note(left, "sram_bytes_per_sm", "time_s")
    assert note.startswith("4 rows left out, without a value of sram_bytes_per_sm or time_s: ")
    assert "2 infeasible" in note and "1 not simulated" in note and "1 failed" in note
    assert ef.left_out_note([], "x", "y") == ""
    spec = json.loads(ef.pareto_figure(rows, "sram_bytes_per_sm", "time_s", "program").to_json())
    assert sum(len(t["x"]) for t in spec["data"] if t["mode"] == "markers") == 1


def test_times_no_simulation_gives_are_left_out_instead_of_failing():
    """A table handed in may hold NaN, infinite or zero times (Parquet takes any float): every
    view leaves those rows out and still draws the rest."""
    rows = [row(0), row(1, time_s=float("nan")), row(2, time_s=float("inf")), row(3, time_s=0.0)]
    rows += [row(4, hbm_bytes_per_s=float("nan"), time_s=2e-5)]
    kept, left = ef.plotted(rows, "sram_bytes_per_sm", "time_s")
    assert [r["point_id"] for r in left] == ["p1", "p2"]
    ef.pareto_figure(rows, "hbm_bytes_per_s", "time_s", "program")
    fig, note = ef.parcoords_figure(rows, COLUMNS)
    assert len(json.loads(fig.to_json())["data"][0]["dimensions"][-1]["values"]) == 2
    assert note == "3 rows without a simulated time are left out."
    best, untimed = ef.best_per_problem(rows, COLUMNS)
    assert [b["time_s"] for b in best] == [1e-5] and untimed == 3


def test_the_best_configuration_per_model_and_context_is_the_fastest_that_ran():
    rows = [
        row(0, model="a", context=512, program="fa2", time_s=3e-6),
        row(1, model="a", context=512, program="fa1", time_s=2e-6, bq_used=64),
        row(2, model="a", context=512, program="fa1", time_s=2e-6, bq_used=32),  # a tie: first
        row(3, model="a", context=512, status="infeasible", time_s=None),
        row(4, model="a", context=1024, program="fa2", time_s=9e-6, sram_bytes_per_sm=65536),
        row(5, model="a", context=1024, program="fa2", time_s=8e-6),
        row(6, model="a", context=1024, program="fa1", time_s=None),  # ran, not simulated
        row(7, model="b", context=512, program="fa2", time_s=1e-6),
        row(8, model="b", context=1024, status="error", time_s=None),
    ]
    best, untimed = ef.best_per_problem(rows, COLUMNS)
    assert untimed == 1
    assert [(b["model"], b["context"], b["program"], b["time_s"]) for b in best] == [
        ("a", 512, "fa1", 2e-6),
        ("a", 1024, "fa2", 8e-6),
        ("b", 512, "fa2", 1e-6),
    ]
    assert best[0]["bq_used"] == 64
    assert [b["rows_as_fast"] for b in best] == [2, 1, 1]  # rows 1 and 2 tie
    # the SRAM size varies in this table: it is part of the configuration shown
    assert ef.best_columns(rows, COLUMNS) == [
        "model",
        "context",
        "sram_bytes_per_sm",
        "program",
        "bq_used",
        "bk_used",
        "time_s",
        "tflops",
        "rows_as_fast",
    ]
    assert best[1]["sram_bytes_per_sm"] == 233472


def test_best_configurations_of_explicit_shapes_and_of_several_passes():
    """No model: per (heads, head_dim, context); a decode is no alternative to a prefill, so a
    table varying the pass picks a best per pass too."""
    rows = [
        row(n, model=None, heads=h, head_dim=d, time_s=t, **{"pass": p})
        for n, (h, d, p, t) in enumerate(
            [(8, 64, "prefill", 5e-6), (8, 64, "decode", 1e-6), (8, 128, "prefill", 7e-6)]
        )
    ]
    assert ef.best_keys(rows, COLUMNS) == ["heads", "head_dim", "context", "pass"]
    best, _ = ef.best_per_problem(rows, COLUMNS)
    assert [(b["head_dim"], b["pass"]) for b in best] == [
        (64, "decode"),
        (64, "prefill"),
        (128, "prefill"),
    ]


def test_the_pareto_views_problem_is_the_longest_context_of_the_first_pass():
    rows = [
        row(n, context=c, **{"pass": p})
        for n, (c, p) in enumerate(itertools.product([512, 2048, 1024], ["prefill", "decode"]))
    ]
    choices = ef.problem_choices(rows, COLUMNS)
    assert choices == {"context": [512, 1024, 2048], "pass": ["decode", "prefill"]}
    assert ef.default_problem(choices) == {"context": 2048, "pass": "decode"}
    assert ef.problem_choices(rows[:1], COLUMNS) == {}


def test_the_default_colour_is_the_program_or_else_the_model():
    two_programs = [row(0, program="fa2"), row(1, program="fa1", model="llama-3-8b")]
    one_program = [row(n, program="flash-attn-2", model=m) for n, m in enumerate("ab")]
    assert ef.default_color(two_programs, COLUMNS) == "program"
    assert ef.default_color(one_program, COLUMNS) == "model"
    assert ef.color_choices(one_program, COLUMNS)[0] == "model"  # varying columns first


def test_filters_keep_the_chosen_values_and_nothing_chosen_keeps_all():
    rows = [row(0, program="fa2"), row(1, program="fa1"), row(2, program="fa2", gpu="l4")]
    assert ef.apply_filters(rows, {"program": [], "gpu": []}) == rows
    kept = ef.apply_filters(rows, {"program": ["fa2"], "gpu": ["h100-sxm"]})
    assert [r["point_id"] for r in kept] == ["p0"]


def test_parallel_coordinates_span_the_varied_inputs_to_the_time():
    rows = [
        row(n, program=p, context=c, hbm_bytes_per_s=bw, time_s=t)
        for n, (p, c, bw, t) in enumerate(
            itertools.product(["fa2", "fa1"], [512, 1024], [2e12, 3e12], [1e-6])
        )
    ]
    rows[-1]["time_s"] = 5e-4  # 500x: the time axis is logarithmic
    rows.append(row(99, status="infeasible", time_s=None))
    fig, note = ef.parcoords_figure(rows, COLUMNS)
    dims = json.loads(fig.to_json())["data"][0]["dimensions"]
    assert [d["label"] for d in dims] == [
        "HBM bandwidth (TB/s)",
        "context",
        "program",
        "time (µs), log",
    ]
    assert dims[2]["ticktext"] == ["fa1", "fa2"]
    assert len(dims[0]["values"]) == 8
    assert note == "1 rows without a simulated time are left out."
    assert ef.parcoords_figure([rows[-1]], COLUMNS) == (None, "")


def test_a_downloaded_table_reads_back_as_it_was(tmp_path):
    """The whole table as CSV is what `hbmsim explore -o X.csv` writes: read_table takes it
    back, every value equal (Nones, bools and floats included)."""
    axes = {"heads": 1, "head_dim": 64, "context": [256], "bq": [64, 512], "bk": [512]}
    spec = parse_spec({"axes": axes}, "test")
    rows = [run_point(p) for p in spec.points()]
    assert {r["status"] for r in rows} == {"ok", "infeasible"}
    columns = columns_for(spec.hardware)
    path = tmp_path / "table.csv"
    path.write_text(ef.to_csv(rows, columns))
    back, back_columns = read_table(path)
    assert back_columns == columns
    assert back == [
        {c: r.get(c, "" if c in ("reason", "engine_note") else None) for c in columns} for r in rows
    ]
