"""The published set: read with every field checked, predicted per point, summarised per group."""

import json

import pytest

from hbmsim import Problem, get_hardware, make_plan, simulate
from hbmsim.cli.commands import main
from hbmsim.engine.limits import MAX_ENGINE_STEPS, engine_steps
from hbmsim.errors import HbmsimError
from hbmsim.interpret.counts import count_plan
from hbmsim.libraries.registry import IMPLS, make_impl_plan
from hbmsim.validation.published import (
    DEFAULT_PATH,
    PUBLISHED_ENGINE_MAX_STEPS,
    load_extra_checks,
    load_published,
    speedups,
    summarize,
)

DECODE_PATH = DEFAULT_PATH.parent.parent.parent / "kernels/results/raw/published-decode.json"


def _point(**changes):
    p = {
        "id": 0,
        "source": "paper",
        "citation": "A. Author, A paper, Table 1",
        "label": "x",
        "preset": "a100-80gb",
        "impl": "torch-eager",
        "batch": 1,
        "heads": 2,
        "kv_heads": 2,
        "seq_q": 256,
        "seq_k": 256,
        "head_dim": 64,
        "dtype": "fp16",
        "causal": False,
        "dropout": 0.0,
        "pass": "fwd",
        "measured_time_s": 1e-4,
        "table": "T1",
    }
    p.update(changes)
    return p


def _write(tmp_path, points):
    path = tmp_path / "set.json"
    path.write_text(json.dumps({"sources": {}, "points": points}))
    return path


def test_the_packaged_set_loads_with_a_citation_and_a_known_implementation_per_point():
    points, sources = load_published()
    assert len(points) == 244
    assert DEFAULT_PATH.name == "published_attention.json"
    assert all(p.citation for p in points)
    assert {p.impl for p in points if p.impl} <= set(IMPLS)
    assert {p.source for p in points} <= set(sources)


@pytest.mark.parametrize(
    "change, field",
    [
        ({"preset": "a200"}, "preset"),
        ({"measured_time_s": -1.0}, "measured_time_s"),
        ({"measured_time_s": "fast"}, "measured_time_s"),
        ({"citation": ""}, "citation"),
        ({"heads": 3, "kv_heads": 2}, "kv_heads"),
        ({"impl": 5}, "impl"),
    ],
)
def test_a_bad_field_is_named_in_one_line(tmp_path, change, field):
    path = _write(tmp_path, [_point(**change)])
    with pytest.raises(HbmsimError, match=field) as info:
        load_published(path)
    assert "\n" not in str(info.value)


def test_a_file_that_is_not_a_published_set_is_refused(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(HbmsimError, match="must be a JSON object"):
        load_published(bad)
    bad.write_text('{"sources": {}}')
    with pytest.raises(HbmsimError, match="lacks points"):
        load_published(bad)
    with pytest.raises(HbmsimError, match="is a directory"):
        load_published(tmp_path)


def _row(impl, series, seq, measured, predicted, source="paper"):
    return {
        "id": seq,
        "source": source,
        "impl": impl,
        "series": series,
        "problem": {"batch": 1, "heads": 2, "seq_k": seq, "head_dim": 64, "causal": False},
        "measured_time_s": measured,
        "predicted_time_s": predicted,
        "error": None if predicted is None else predicted / measured - 1,
        "reason": "",
        "citation": "c",
    }


def test_the_summary_counts_medians_worst_errors_and_ranks_per_group():
    rows = [
        _row("torch-eager", "s1", 1, 1.0, 1.1),  # +10%
        _row("torch-eager", "s1", 2, 2.0, 1.6),  # -20%
        _row("torch-eager", "s1", 3, 4.0, 4.2),  # +5%
        _row("flash-attn-2", "s2", 1, 0.5, 0.5),
        _row("flash-attn-2", "s2", 2, 1.0, None),  # not simulated
    ]
    s = summarize(rows)
    eager = next(g for g in s["groups"] if g["impl"] == "torch-eager")
    assert eager["n"] == 3 and eager["simulated"] == 3
    assert eager["median_abs_error"] == pytest.approx(0.10)
    assert eager["worst_error"] == pytest.approx(-0.20)
    assert eager["series_rank_correlation"]["s1"] == pytest.approx(1.0)
    flash = next(g for g in s["groups"] if g["impl"] == "flash-attn-2")
    assert flash["simulated"] == 1
    assert s["targets"]["points_not_simulated"] == 1


def test_speedups_pair_eager_and_flash_on_the_same_problem():
    rows = [
        _row("torch-eager", "e", 1, 3.0, 2.0),
        _row("flash-attn-2", "f", 1, 1.0, 1.0),
        _row("flash-attn-2", "f", 2, 1.0, 1.0),  # no eager timing on this problem
    ]
    (sp,) = speedups(rows)
    assert sp["impl"] == "flash-attn-2"
    assert sp["measured"] == pytest.approx(3.0)
    assert sp["predicted"] == pytest.approx(2.0)
    assert sp["error"] == pytest.approx(2.0 / 3.0 - 1)


def test_speedups_pair_flash_attn_3_with_flash_attn_2_and_count_those_off_target():
    """FlashAttention-3's speedup over FlashAttention-2 on the same problem is reported (the
    FA3 paper's claim), and the targets count those more than 10% off."""
    rows = [
        _row("flash-attn-2", "f2", 1, 2.0, 2.0),
        _row("flash-attn-3", "f3", 1, 1.0, 1.0),  # 2.0x measured and predicted
        _row("flash-attn-2", "f2", 2, 3.0, 3.0),
        _row("flash-attn-3", "f3", 2, 2.0, 1.5),  # 1.5x measured, 2.0x predicted: +33%
    ]
    out = speedups(rows)
    assert [(s["baseline"], s["impl"]) for s in out] == [("flash-attn-2", "flash-attn-3")] * 2
    assert [round(s["error"], 6) for s in out] == [0.0, round(2.0 / 1.5 - 1, 6)]
    assert summarize(rows)["targets"]["fa3_over_fa2_speedups_off_by_more_than_10pct"] == 1


def test_validate_published_predicts_every_point_of_a_file(tmp_path, capsys):
    points = [
        _point(id=1, impl="torch-eager", measured_time_s=2e-4),
        _point(id=2, impl="flash-attn-2", measured_time_s=1e-4),
        _point(id=3, impl=None, label="xformers"),  # context only: not simulated
    ]
    assert main(["validate", "--published", str(_write(tmp_path, points)), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [p["id"] for p in out["points"]] == [1, 2]
    for p in out["points"]:
        assert p["predicted_time_s"] > 0
        assert p["error"] == pytest.approx(p["predicted_time_s"] / p["measured_time_s"] - 1)
    (sp,) = out["speedups"]
    assert sp["measured"] == pytest.approx(2.0)
    by_impl = {p["impl"]: p["predicted_time_s"] for p in out["points"]}
    assert sp["predicted"] == pytest.approx(by_impl["torch-eager"] / by_impl["flash-attn-2"])


def test_validate_published_text_names_the_targets(tmp_path, capsys):
    path = _write(tmp_path, [_point(id=1, impl="flash-attn-2")])
    assert main(["validate", "--published", str(path)]) == 0
    text = capsys.readouterr().out
    assert "per source and implementation" in text
    assert "targets:" in text


def test_an_extra_check_is_a_recorded_comparison_read_field_by_field(tmp_path, capsys):
    """`validate --published FILE --report` output is what the Validate page's extra checks
    read back; a damaged file is reported by name and field, never a crash."""
    points = [_point(id=1, impl="torch-eager"), _point(id=2, impl="flash-attn-2")]
    report = tmp_path / "extra" / "gpu-torch.json"
    report.parent.mkdir()
    argv = ["validate", "--published", str(_write(tmp_path, points)), "--report", str(report)]
    assert main(argv) == 0
    (bad := tmp_path / "extra" / "broken.json").write_text(
        report.read_text().replace('"measured_time_s": 0.0001', '"measured_time_s": "fast"', 1)
    )
    found, problems = load_extra_checks(report.parent)
    assert [path.name for path, _ in found] == ["gpu-torch.json"]
    (_, comparison), (problem,) = found[0], problems
    assert [r["id"] for r in comparison["points"]] == [1, 2]
    assert bad.name in problem and "points[0].measured_time_s" in problem and "a number" in problem


def test_a_source_runs_the_release_it_timed():
    """The FlashAttention paper timed flash-attn before its 1.0 split heuristics: its points
    run flash-attn-1@0.1, other sources the default release; the decode sources' flash-attention
    2.0.9 columns run flash-attn-2@2.0."""
    from hbmsim.validation.published import run_as

    points, _ = load_published()
    fa1_paper = [p for p in points if p.source.startswith("FA1-") and p.impl == "flash-attn-1"]
    fa2_paper = [p for p in points if p.source == "FA2-fig4" and p.impl == "flash-attn-1"]
    assert fa1_paper and {run_as(p) for p in fa1_paper} == {"flash-attn-1@0.1"}
    assert fa2_paper and {run_as(p) for p in fa2_paper} == {"flash-attn-1"}
    decode, _ = load_published(DECODE_PATH)
    fa2_0_9 = [p for p in decode if "2.0.9" in p.label]
    assert len(fa2_0_9) == 30 and {run_as(p) for p in fa2_0_9} == {"flash-attn-2@2.0"}
    assert {run_as(p) for p in decode if p.impl == "flash-decoding"} == {"flash-decoding"}


def test_impl_releases_are_named_name_at_release(capsys):
    args = ["simulate", "--seq", "256", "--heads", "2", "--no-engine", "--json"]
    assert main([*args, "--impl", "flash-attn-1@0.1"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert any("0.1" in n for n in notes)
    assert main([*args, "--impl", "flash-attn-1@9.9"]) == 2
    assert "release" in capsys.readouterr().err
    assert main([*args, "--impl", "flash-decoding@2.0"]) == 2
    assert "NAME@RELEASE applies to flash-attn-1, flash-attn-2" in capsys.readouterr().err


def test_a_batch_caller_may_give_the_replay_more_work_than_the_interactive_bound():
    """`engine_max_steps` is the replay's budget: at a plan's estimate every step is replayed;
    under it the plan's kernels are stretched instead (marked so, the bytes the same), and the
    counts stand with the reason only where even the stretch's estimate passes its own bound.
    The published set's batch run gives the replay more than the interactive bound."""
    p = Problem(batch=1, heads=2, seq_q=512, seq_k=512, causal=True)
    hw = get_hardware("a100-80gb")
    plan = make_plan("fa2", p, hw)
    steps = engine_steps(plan, count_plan(plan))
    replayed = simulate(p, hw, "fa2", engine_max_steps=steps)
    assert (
        replayed.extra["time_s"] == simulate(p, hw, "fa2", engine_max_steps=10**12).extra["time_s"]
    )
    assert not any(k["stretched"] for k in replayed.extra["engine"]["kernels"])
    short = simulate(p, hw, "fa2", engine_max_steps=steps - 1)
    assert all(k["stretched"] for k in short.extra["engine"]["kernels"])
    assert short.extra["dram_read_bytes"] == replayed.extra["dram_read_bytes"]
    assert PUBLISHED_ENGINE_MAX_STEPS > MAX_ENGINE_STEPS


def test_torch_timings_are_written_as_points_the_published_reader_takes(tmp_path):
    """kernels/torch_timings.py's file (GPU timings of PyTorch) is a published set: its points
    load through the one reader, with the shape, pass and implementation they were timed at;
    the H200 file committed from it has the same fields."""
    from kernels import torch_timings as tt

    doc = tt.document("gpu-torch", "Measured by a test", 1e-6)
    shapes = [(32, 32, 512, 64, False, "fwd"), (1, 16, 16384, 128, True, "fwd+bwd")]
    for i, (impl, shape) in enumerate(zip(("torch-eager", "flash-attn-2"), shapes, strict=True)):
        doc["points"].append(
            tt.published_point("gpu-torch", "c", "GPU", "h200", impl, shape, 1e-3, i)
        )
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    points, sources = load_published(path)
    assert list(sources) == ["gpu-torch"]
    got = [
        (
            p.impl,
            p.problem.batch,
            p.problem.heads,
            p.problem.seq_q,
            p.problem.head_dim,
            p.problem.causal,
            p.problem.pass_,
            p.preset,
        )
        for p in points
    ]
    assert got == [
        ("torch-eager", 32, 32, 512, 64, False, "fwd", "h200"),
        ("flash-attn-2", 1, 16, 16384, 128, True, "fwd+bwd", "h200"),
    ]
    committed = DEFAULT_PATH.parent.parent.parent / "kernels/results/raw/h200-torch-2026-11-30.json"
    first = json.loads(committed.read_text())["points"][0]
    assert set(first) == set(doc["points"][0])
    assert len(load_published(committed)[0]) == 96


def test_flash_attn_3_timings_are_predicted_by_its_latest_release(tmp_path, capsys):
    """A FlashAttention-3 timing the run took (where flash_attn_interface imports) is a point
    of the set like the others, predicted by the flash-attn-3 mirror at its default release
    (what a current install runs), the paper's sources aside."""
    from hbmsim.validation.published import run_as
    from kernels import torch_timings as tt

    doc = tt.document("gpu-torch", "Measured by a test", 1e-6)
    shape = (4, 2048 // 128, 4096, 128, True, "fwd")
    doc["points"].append(
        tt.published_point("gpu-torch", "c", "GPU", "h200", "flash-attn-3", shape, 1e-3, 0)
    )
    path = tmp_path / "fa3.json"
    path.write_text(json.dumps(doc))
    (pt,), _ = load_published(path)
    assert run_as(pt) == "flash-attn-3"
    assert main(["validate", "--published", str(path), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["points"]
    assert row["impl"] == "flash-attn-3" and row["predicted_time_s"] > 0
    assert set(tt.FA3_HEAD_DIMS) == {64, 128, 256}


def test_decoding_timings_are_points_the_mirrors_predict(tmp_path, capsys):
    """kernels/torch_timings.py's decoding shapes (one query token against a K/V cache, grouped
    K/V heads) are points of the published set too: they load with the query length, K/V
    heads and a series per batch and K/V heads, and `validate --published` predicts them with
    the mirrors the run timed (flash-attn-2 through its split-KV heuristic, flash-decoding)."""
    from kernels import torch_timings as tt

    doc = tt.document("gpu-torch", "Measured by a test", 1e-6)
    shape = (8, tt.DECODE_HEADS, 4096, tt.DECODE_DIM, False, "fwd")
    for i, impl in enumerate(tt.DECODE_IMPLS):
        doc["points"].append(
            tt.published_point(
                "gpu-torch", "c", "GPU", "h200", impl, shape, 50e-6, i, seq_q=1, kv_heads=8
            )
        )
    path = tmp_path / "decode.json"
    path.write_text(json.dumps(doc))
    points, _ = load_published(path)
    for pt in points:
        assert (pt.problem.seq_q, pt.problem.seq_k, pt.problem.kv_heads) == (1, 4096, 8)
        assert pt.problem.heads == 32 and pt.problem.head_dim == 128 and pt.problem.batch == 8
        assert "decode b8 kv8" in pt.series
    plan = make_impl_plan("flash-attn-2", points[0].problem, get_hardware("h200"))
    assert plan.tiles.splits > 1  # one query token: mha_fwd's split-KV heuristic
    assert main(["validate", "--published", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert sorted(p["impl"] for p in out["points"]) == sorted(tt.DECODE_IMPLS)
    for p in out["points"]:
        assert p["predicted_time_s"] > 0 and p["problem"]["seq_q"] == 1


def test_a_host_bound_point_says_where_the_unmeasured_host_cost_would_flip_it(tmp_path, capsys):
    """flash-attn-2 on a tiny problem in a timed loop is host-bound at the preset's cost per
    host operation: the report says so and gives the cost at which it turns GPU-bound. Run
    again with that cost measured beside the point (calibration.host_op_s) just under the flip
    value, the call is GPU-bound; just over it, host-bound. The text report lists the group
    only while the cost is unmeasured."""
    point = _point(impl="flash-attn-2", measured_time_s=5e-5)
    main(["validate", "--published", str(_write(tmp_path, [point])), "--json"])
    (row,) = json.loads(capsys.readouterr().out)["points"]
    assert row["bound"] == "host"
    flip = row["host_op_flip_s"]
    assert 0 < flip < get_hardware("a100-80gb").host_op_s
    for factor, side in ((0.99, "gpu"), (1.01, "host")):
        path = tmp_path / f"calibrated-{factor}.json"
        calibration = {"host_op_s": flip * factor}
        path.write_text(json.dumps({"sources": {}, "calibration": calibration, "points": [point]}))
        main(["validate", "--published", str(path), "--json"])
        (measured,) = json.loads(capsys.readouterr().out)["points"]
        assert measured["bound"] == side
    main(["validate", "--published", str(_write(tmp_path, [point]))])
    text = capsys.readouterr().out
    assert "host_op_s" in text and "1/1" in text
    main(["validate", "--published", str(path)])
    assert "flips at host_op_s" not in capsys.readouterr().out
