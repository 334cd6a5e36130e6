"""A call timed by itself: the host's framework ops and launches ahead of an idle GPU
(hbmsim/host.py), worked by hand, and as the engine and the published-set check use it."""

import json

import pytest

from hbmsim import Problem, get_hardware
from hbmsim.api import build_plan, simulate
from hbmsim.engine.host import ops_before_kernels, synchronized_call_s
from hbmsim.interpret.trace import plan_meta
from hbmsim.validation.published import load_published, predict

US = 1e-6


def test_the_gpu_waits_for_each_launch_then_runs_the_kernels_back_to_back():
    # host: kernel 0 launched at (2 ops + launch) = 3 us; kernel 1 at 3 + (1 + 1) = 5 us;
    # the op after it ends the host at 6 us. GPU: 3 + 5 = 8, then max(8, 5) + 3 = 11 us.
    assert synchronized_call_s([5 * US, 3 * US], [2, 1], 1, US) == pytest.approx(11 * US)


def test_a_kernel_launched_late_leaves_the_gpu_idle_until_its_launch():
    # kernel 0 at 1 us ends at 2; kernel 1 waits for 5 ops and its launch: 1 + 6 = 7, ends 8
    assert synchronized_call_s([US, US], [0, 5], 0, US) == pytest.approx(8 * US)


def test_ops_after_the_last_launch_end_the_call_when_the_gpu_is_done_first():
    # kernel at 1 us, done at 1.5; 4 ops more: the host returns at 5 us
    assert synchronized_call_s([0.5 * US], [0], 4, US) == pytest.approx(5 * US)


def test_where_no_kernel_says_every_framework_op_comes_before_the_first():
    meta = {"framework_ops": 9, "kernels": [{"name": "a"}, {"name": "b"}]}
    assert ops_before_kernels(meta) == ([9, 0], 0)
    said = {"framework_ops": 9, "kernels": [{"host_ops_before": 2}, {"host_ops_before": 3}]}
    assert ops_before_kernels(said) == ([2, 3], 4)
    with pytest.raises(ValueError, match="declare 12 framework ops of the call's 9"):
        ops_before_kernels({"framework_ops": 9, "kernels": [{"host_ops_before": 12}]})


def test_flash_attn_2_places_its_wrappers_ops_as_its_source_runs_them():
    """flash_attn_interface + mha_fwd: 7 of the forward's 8 ops before the launch (the
    save_for_backward after it); the backward's first kernel waits for that one and the
    backward's 7 setup ops; the dqkv slice comes last. The counts add up to the call's."""
    hw = get_hardware("h200")
    for pass_, want in (("fwd", ([7], 1)), ("fwd+bwd", ([7, 8, 0, 0], 1)), ("bwd", ([7, 0, 0], 1))):
        p = Problem(batch=2, heads=8, seq_q=1024, seq_k=1024, pass_=pass_)
        plan = build_plan(p, hw, None, "flash-attn-2", None, None, None, None)
        before, after = ops_before_kernels(plan_meta(plan))
        assert (before, after) == want, pass_
        assert sum(before) + after == plan.framework_ops


def test_one_call_alone_adds_the_hosts_lead_to_the_kernels_time():
    """flash-attn-2's forward, one kernel: timed alone, the GPU waits for the 7 ops before its
    launch and the launch (8 x host_op_s) and then runs it; the op after the launch hides
    under the kernel. A loop hides all of them (time_s = the GPU's, which is longer)."""
    hw = get_hardware("h200")
    r = simulate(Problem(batch=32, heads=32, seq_q=512, seq_k=512), hw, impl="flash-attn-2")
    engine = r.extra["engine"]
    assert engine["gpu_time_s"] > 9 * hw.host_op_s  # GPU-bound in a loop
    assert r.extra["time_s"] == engine["gpu_time_s"]
    assert engine["synchronized_call_s"] == pytest.approx(engine["gpu_time_s"] + 8 * hw.host_op_s)


def test_a_textbook_program_has_no_host_to_wait_for():
    r = simulate(Problem(batch=2, heads=4, seq_q=512, seq_k=512), get_hardware("h100-sxm"), "fa2")
    assert r.extra["engine"]["synchronized_call_s"] == r.extra["time_s"]


def _one_point(tmp_path, timing, **changes):
    point = {
        "id": 0,
        "source": "test",
        "citation": "a test input, not a measurement",
        "label": "flash-attn-2",
        "impl": "flash-attn-2",
        "preset": "h200",
        "batch": 32,
        "heads": 32,
        "kv_heads": 32,
        "seq_q": 512,
        "seq_k": 512,
        "head_dim": 64,
        "dtype": "fp16",
        "causal": False,
        "dropout": 0.0,
        "pass": "fwd",
        "measured_time_s": 3.5e-4,
    }
    point.update(changes)
    if timing is not None:
        point["timing"] = timing
    path = tmp_path / f"set-{timing}.json"
    path.write_text(json.dumps({"points": [point]}))
    return path


def test_a_point_timed_call_by_call_is_predicted_as_a_call_alone(tmp_path):
    """A published-style point says how it was timed: "synchronized" points (each call timed
    by itself, as kernels/torch_timings.py times) are predicted as one call alone, the
    others (the papers' loops, and files without the field) as the loop's steady state."""
    rows = {}
    for timing in (None, "loop", "synchronized"):
        points, _ = load_published(_one_point(tmp_path, timing))
        assert points[0].timing == (timing or "loop")
        (rows[timing],) = predict(points)
    engine = simulate(
        Problem(batch=32, heads=32, seq_q=512, seq_k=512), get_hardware("h200"), impl="flash-attn-2"
    ).extra
    assert rows[None]["predicted_time_s"] == rows["loop"]["predicted_time_s"] == engine["time_s"]
    assert rows["synchronized"]["predicted_time_s"] == engine["engine"]["synchronized_call_s"]
    assert rows["synchronized"]["timing"] == "synchronized"


def test_a_point_timed_as_cuda_graph_replays_is_predicted_as_the_gpus_time(tmp_path):
    """A "kernel" point (the GPU's time alone: a CUDA-graph replay, a profiler's kernel rows)
    is predicted without the host: one query token against a 4k cache (the Flash-Decoding
    blog's shape), where a call in a loop waits on the host's ops, comes out shorter as a
    kernel point, at the engine's GPU time."""
    decode = dict(
        impl="flash-decoding",
        preset="a100-80gb",
        batch=16,
        heads=16,
        kv_heads=2,
        seq_q=1,
        seq_k=4096,
        head_dim=128,
        measured_time_s=57e-6,
    )
    rows = {}
    for timing in ("loop", "kernel"):
        points, _ = load_published(_one_point(tmp_path, timing, **decode))
        assert points[0].timing == timing
        (rows[timing],) = predict(points)
    problem = Problem(batch=16, heads=16, seq_q=1, seq_k=4096, head_dim=128, kv_heads=2)
    engine = simulate(problem, get_hardware("a100-80gb"), impl="flash-decoding").extra["engine"]
    assert engine["host_bound"]
    assert rows["kernel"]["predicted_time_s"] == engine["gpu_time_s"]
    assert rows["kernel"]["predicted_time_s"] < rows["loop"]["predicted_time_s"]
    assert rows["kernel"]["timing"] == "kernel"


def test_an_unknown_timing_is_refused_with_its_field(tmp_path):
    from hbmsim.errors import InputFileError

    with pytest.raises(
        InputFileError, match=r"points\[0\]\.timing: must be one of loop, synchronized, kernel"
    ):
        load_published(_one_point(tmp_path, "sometimes"))


def test_the_hosts_cost_measured_beside_the_points_replaces_the_presets(tmp_path):
    """kernels/torch_timings.py measures the host's cost per op where it times (a
    calibration, not an attention timing) and writes it beside the points: their prediction
    charges it in place of the preset's host_op_s, and the row says which it used."""
    from kernels import torch_timings as tt

    path = _one_point(tmp_path, "synchronized")
    doc = json.loads(path.read_text())
    measured = 25e-6
    doc = {**tt.document("test", "a test input", 1e-6, host_op_s=measured), "points": doc["points"]}
    path.write_text(json.dumps(doc))
    points, _ = load_published(path)
    assert points[0].host_op_s == measured
    (row,) = predict(points)
    hw = get_hardware("h200")
    engine = simulate(
        Problem(batch=32, heads=32, seq_q=512, seq_k=512), hw, impl="flash-attn-2"
    ).extra["engine"]
    # one kernel, 7 framework ops and its launch before it, at the measured cost each
    assert row["predicted_time_s"] == pytest.approx(engine["gpu_time_s"] + 8 * measured)
    assert row["host_op_s"] == measured
    assert engine["synchronized_call_s"] == pytest.approx(engine["gpu_time_s"] + 8 * hw.host_op_s)


@pytest.mark.parametrize("value", [0, -1e-6, 0.5, "10us", None])
def test_a_bad_measured_host_cost_is_refused_with_its_field(tmp_path, value):
    from hbmsim.errors import InputFileError

    path = _one_point(tmp_path, "synchronized")
    doc = json.loads(path.read_text())
    doc["calibration"] = {"host_op_s": value}
    path.write_text(json.dumps(doc))
    with pytest.raises(InputFileError, match=r"calibration\.host_op_s: must be"):
        load_published(path)


@pytest.mark.parametrize(
    "impl, problem, want",
    [
        # FlashAttnFunc.apply, out, lse, the semaphore before the launch; save_for_backward after
        ("flash-attn-3", dict(batch=4, heads=16, seq_q=4096, seq_k=4096), ([4], 1)),
        # causal: the semaphore's zeros fill before it too
        ("flash-attn-3", dict(batch=4, heads=16, seq_q=4096, seq_k=4096, causal=True), ([5], 1)),
        # fwd_kvcache, out, lse, the split buffers; the group packed: q's reshape and
        # transpose before, out's after (mha_fwd_kvcache)
        (
            "flash-decoding",
            dict(batch=1, heads=32, kv_heads=8, seq_q=1, seq_k=32768, head_dim=128),
            ([7, 0], 2),
        ),
        (
            "flash-decoding",
            dict(batch=1, heads=32, seq_q=1, seq_k=32768, head_dim=128),
            ([5, 0], 0),
        ),
    ],
)
def test_each_mirror_places_its_wrappers_ops_as_its_source_runs_them(impl, problem, want):
    plan = build_plan(
        Problem(**problem), get_hardware("h100-sxm"), None, impl, None, None, None, None
    )
    before, after = ops_before_kernels(plan_meta(plan))
    assert (before, after) == want
    assert sum(before) + after == plan.framework_ops
