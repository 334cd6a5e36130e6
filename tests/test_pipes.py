"""How a step's math occupies an SM's pipes (pipes.py): small cases worked by hand, then the
engine running a warp-specialised kernel and TMA multicast in tiny exact scenarios."""

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_engine import MB, load_row, toy_gpu, toy_plan

from hbmsim import Problem, get_hardware
from hbmsim.engine.simulation import run_engine
from hbmsim.gpu.pipes import overlapped, phases, step_seconds
from hbmsim.libraries.registry import make_impl_plan
from hbmsim.program.plan import Buffer, CtaClass, Kernel, Plan, TensorSpec, Tiles

NONE, FP32, SFU, BOTH = (False, False), (True, False), (False, True), (True, True)


def test_two_warpgroups_with_equal_gemm_and_softmax_time_ping_pong_in_half_the_time():
    """Two warpgroups, each with 1 µs of GEMMs and 1 µs of FP32 softmax work: taking the
    tensor cores in turn, each one's softmax runs while the other multiplies, so the step takes
    2 µs, not the 4 µs of one instruction stream."""
    t, v, e = 2.0, 2.0, 0.0  # the step's totals over both warpgroups
    assert step_seconds(t, v, e, NONE) == 4.0
    assert step_seconds(t, v, e, FP32) == 2.0


def test_exponentials_that_cannot_run_beside_the_tensor_cores_add_to_them():
    """Where the SFU waits for the tensor cores (the Hopper preset's assumption), a step's
    exponentials add to its GEMMs however the warpgroups take turns; the FP32 work hides."""
    assert step_seconds(2.0, 1.0, 1.0, FP32) == 3.0  # max(T + E, V + E) = max(3, 2)
    assert step_seconds(2.0, 3.0, 1.0, FP32) == 4.0  # the issue stream longer: V + E
    assert step_seconds(2.0, 1.0, 1.0, SFU) == 3.0  # max(T + V, V + E)
    assert step_seconds(2.0, 1.0, 1.0, BOTH) == 2.0  # max(T, V + E)
    assert step_seconds(2.0, 1.0, 1.0, NONE) == 4.0


@given(
    st.floats(0, 10),
    st.floats(0, 10),
    st.floats(0, 10),
    st.sampled_from([NONE, FP32, SFU, BOTH]),
)
def test_a_step_is_never_shorter_than_any_pipe_nor_longer_than_their_sum(t, v, e, overlaps):
    s = step_seconds(t, v, e, overlaps)
    assert max(t, v + e) <= s + 1e-12
    assert s <= t + v + e + 1e-12


def test_one_warpgroup_overlaps_nothing():
    """A single consumer warpgroup's softmax depends on its own GEMM: no pipe overlaps."""
    assert overlapped(1, ("vector", "exp")) == NONE
    assert overlapped(0, ("vector",)) == NONE
    assert overlapped(2, ("vector",)) == FP32
    assert overlapped(3, ("vector", "exp")) == BOTH


@pytest.mark.parametrize("n", [2, 3])
def test_warpgroups_take_the_tensor_cores_in_turn_and_softmax_beside_them(n):
    """The timeline's phases: each warpgroup's GEMMs in a slot of its own, never two at once;
    each one's softmax in the slot after its GEMMs, beside the next warpgroup's GEMMs; the
    slots span exactly the step."""
    t, v, e = 3.0, 1.5, 0.9
    rows = phases(t, v, e, n, FP32)
    total = step_seconds(t, v, e, FP32)
    mma = sorted((a, b, w) for w, ph, a, b in rows if ph == "mma")
    assert [w for *_, w in mma] == list(range(n))
    for (_, b0, _), (a1, _, _) in zip(mma, mma[1:], strict=False):
        assert b0 <= a1 + 1e-12
    assert max(b for *_, b in rows) == pytest.approx(total)
    slot = total / n
    for w, ph, a, b in rows:
        if ph == "softmax":
            assert a == pytest.approx(((w + 1) % n) * slot) and b - a == pytest.approx(slot)


def test_without_overlap_each_warpgroups_phases_follow_each_other():
    rows = phases(2.0, 1.0, 1.0, 2, NONE)
    spans = [(a, b) for _, _, a, b in rows]
    assert spans == [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0), (3.0, 4.0)]


# --- the engine ------------------------------------------------------------------------------


def _math(matmul, vector, exp):
    def program(ctx, cta):
        ctx.compute(None, matmul=matmul, vector=vector, exp=exp)

    return program


def _time(hw, warpgroups, flops):
    plan = toy_plan(_math(*flops), 1, hw)
    k = dataclasses.replace(plan.kernels[0], overlap_warpgroups=warpgroups)
    return run_engine(dataclasses.replace(plan, kernels=(k,)), l2=False).time_s


def test_a_warp_specialised_kernels_step_takes_its_clique_of_pipes():
    """One CTA whose step has 1 µs of matmul, 1 µs of FP32 and 0.5 µs of exponentials on an
    SM: one instruction stream takes 2.5 µs; two warpgroups on a GPU whose FP32 pipe runs
    beside asynchronous MMA take max(1 + 0.5, 1 + 0.5) = 1.5 µs; with the SFU beside it too,
    max(1, 1.5) = 1.5 µs; with nothing beside it, 2.5 µs again."""
    base = toy_gpu()
    per_sm = (
        base.matrix_rate("fp16") / base.sm_count,
        base.vector_rate("fp16") / base.sm_count,
        base.exp_ops_per_s / base.sm_count,
    )
    flops = (round(1e-6 * per_sm[0]), round(1e-6 * per_sm[1]), round(0.5e-6 * per_sm[2]))
    t, v, e = (f / r for f, r in zip(flops, per_sm, strict=True))
    assert _time(base.with_overrides(async_mma_overlaps=()), 2, flops) == pytest.approx(t + v + e)
    assert _time(base, 0, flops) == pytest.approx(t + v + e)
    assert _time(base, 2, flops) == pytest.approx(max(t + e, v + e))
    both = base.with_overrides(async_mma_overlaps=("vector", "exp"))
    assert _time(both, 2, flops) == pytest.approx(max(t, v + e))


def _cluster_plan(hw, n_ctas, cluster):
    """n CTAs all loading the same 1 MB row of X, in clusters of `cluster` sharing it."""

    def program(ctx, cta):
        ctx.load("A", "X", (0, (0, MB)))

    tensors = {"X": TensorSpec("X", (1, MB), 1, "input")}
    kernel = Kernel(
        "k",
        (CtaClass((range(n_ctas),)),),
        (Buffer("A", (1024,), 1),),
        program,
        cluster=cluster,
        multicast=("X",) if cluster > 1 else (),
    )
    return Plan("toy", toy_plan(load_row(1), 1, hw).problem, hw, Tiles(1, 1), tensors, (kernel,))


def test_a_multicast_tile_crosses_the_l2_path_once_per_cluster():
    """Four CTAs on four SMs load the same 1 MB over a 1 MB/ms SM-to-L2 path: 4 ms alone each,
    2 ms when clusters of two receive it by one multicast; the DRAM reads stay the tile's (the
    first of each cluster misses, as before, for half its bytes each)."""
    hw = toy_gpu(l2_bytes_per_s=1e9, hbm_bytes_per_s=1e12, hbm_latency_s=0.0)
    plain = run_engine(_cluster_plan(hw, 4, 1), l2=True)
    shared = run_engine(_cluster_plan(hw, 4, 2), l2=True)
    assert plain.time_s == pytest.approx(4 * MB / 1e9, rel=1e-9)
    assert shared.time_s == pytest.approx(2 * MB / 1e9, rel=1e-9)
    assert plain.dram_read_bytes + plain.l2_hit_bytes == 4 * MB
    assert shared.dram_read_bytes + shared.l2_hit_bytes == 2 * MB


@pytest.mark.parametrize("release", ["latest", "2024-07"])
def test_the_fast_path_and_the_exact_replay_agree_on_flash_attn_3(release):
    """FlashAttention-3 at head dim 128 without a mask: two consumer warpgroups overlapping
    their pipes, clusters of two sharing K and V. The fast path (cohorts simulated once, loop
    rounds skipped) gives the per-CTA replay's time and bytes."""
    p = Problem(batch=1, heads=3, seq_q=512, seq_k=640, head_dim=128)
    plan = make_impl_plan(f"flash-attn-3@{release}", p, get_hardware("h100-sxm"))
    (kernel,) = plan.kernels
    assert kernel.cluster == 2 and kernel.multicast == ("K", "V")
    assert kernel.overlap_warpgroups == 2
    fast, exact = run_engine(plan), run_engine(plan, exact=True)
    assert fast.time_s == pytest.approx(exact.time_s, rel=1e-9)
    assert (fast.dram_read_bytes, fast.dram_write_bytes, fast.l2_hit_bytes) == (
        exact.dram_read_bytes,
        exact.dram_write_bytes,
        exact.l2_hit_bytes,
    )
