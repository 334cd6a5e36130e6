"""The engine, SimPy style: tiny exact scenarios, then end-to-end properties.

Each scenario's docstring states the rule it pins down.
"""

import dataclasses

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from strategies import ALL_PASSES, compatible, plan_args, problems

from hbmsim import Problem, get_hardware, make_plan, save_trace, simulate, trace_plan
from hbmsim.algorithms.names import ALGOS
from hbmsim.api import build_plan
from hbmsim.engine import limits
from hbmsim.engine.l2.lru import LRU
from hbmsim.engine.limits import MAX_PERIOD
from hbmsim.engine.rounds import Repeats
from hbmsim.engine.simulation import occupancy, run_engine, simulate_workload
from hbmsim.engine.template import prepare
from hbmsim.engine.workload.work import from_trace
from hbmsim.errors import ConfigError, SramOverflowError, TooLargeToExecuteError
from hbmsim.interpret.counts import count_plan
from hbmsim.interpret.trace import OP_ATOMIC, OP_COMPUTE, OP_LOAD, OP_STORE
from hbmsim.interpret.tracefile import load_trace
from hbmsim.libraries.registry import IMPLS
from hbmsim.program.plan import Buffer, CtaClass, Kernel, Plan, TensorSpec, Tiles

MB = 1_000_000


def toy_gpu(**changes):
    """4 SMs, 1 MB/ms of DRAM bandwidth, 1 µs DRAM latency, no launch or host cost, wide SM
    ports."""
    base = dict(
        sm_count=4,
        hbm_bytes_per_s=1e9,
        hbm_latency_s=1e-6,
        l2_bytes_per_s=1e10,
        l2_latency_s=0.0,
        launch_overhead_s=0.0,
        host_op_s=0.0,
        sm_bytes_per_s=1e15,
        sram_bytes_per_sm=64 * 1024,
        sram_bytes_per_block=64 * 1024,
        l2_bytes=8 * MB,
    )
    base.update(changes)
    return get_hardware("h100-sxm").with_overrides(name="toy", **base)


def toy_plan(program, n_ctas, hw, sram=1024, stages=1, threads=128, tensor_bytes=MB):
    """One kernel of n_ctas CTAs; tensor X has one row of `tensor_bytes` bytes per CTA."""
    tensors = {"X": TensorSpec("X", (max(n_ctas, 1), tensor_bytes), 1, "input")}
    kernel = Kernel(
        "k", (CtaClass((range(n_ctas),)),), (Buffer("A", (sram,), 1),), program, threads, stages
    )
    return Plan("toy", Problem(), hw, Tiles(1, 1), tensors, (kernel,))


def load_row(nbytes):
    def program(ctx, cta):
        (i,) = cta
        ctx.load("A", "X", (i, (0, nbytes)))

    return program


def test_one_cta_loading_n_bytes_takes_latency_plus_n_over_bandwidth():
    r = run_engine(toy_plan(load_row(MB), 1, toy_gpu()), l2=False)
    assert r.time_s == pytest.approx(1e-6 + MB / 1e9, rel=1e-12)
    assert r.dram_read_bytes == MB


def test_four_ctas_on_four_sms_share_the_bandwidth():
    """Concurrent loads take their total bytes over the bandwidth, not less."""
    r = run_engine(toy_plan(load_row(MB), 4, toy_gpu()), l2=False)
    assert r.time_s == pytest.approx(1e-6 + 4 * MB / 1e9, rel=1e-12)


def test_a_transfer_never_exceeds_its_sm_port():
    """One CTA alone is limited by its SM's port, not by the whole chip's bandwidth."""
    r = run_engine(toy_plan(load_row(MB), 1, toy_gpu(sm_bytes_per_s=1e8)), l2=False)
    assert r.time_s == pytest.approx(1e-6 + MB / 1e8, rel=1e-12)


def test_a_pure_compute_cta_takes_flops_over_the_sm_rate():
    hw = toy_gpu()
    flops = 10**9

    def program(ctx, cta):
        ctx.compute(None, matmul=flops)

    r = run_engine(toy_plan(program, 1, hw), l2=False)
    per_sm = hw.matrix_rate("fp16") / hw.sm_count
    assert r.time_s == pytest.approx(flops / per_sm, rel=1e-12)


def _scalar_matmul_time(hw, flops, **kernel_changes) -> float:
    def program(ctx, cta):
        ctx.compute(None, matmul=flops)

    plan = toy_plan(program, 1, hw)
    scalar = dataclasses.replace(plan.kernels[0], tensor_cores=False, **kernel_changes)
    return run_engine(Plan("toy", Problem(), hw, Tiles(1, 1), plan.tensors, (scalar,)), l2=False)


def _fma_bound_toy():
    """A toy GPU whose FMA units do one FMA (two flops) per thread-instruction issued: half
    of what the schedulers could issue, as on an A100."""
    issue = toy_gpu().issue_rate()
    return toy_gpu(vector_flops_per_s={d: issue for d in ("fp32", "tf32", "fp16", "bf16")})


def test_a_scalar_kernels_matmul_runs_at_the_fp32_fma_rate():
    """A kernel without tensor cores (the scalar CUDA kernels) multiplies on the FMA units."""
    hw = _fma_bound_toy()
    flops = 10**9
    r = _scalar_matmul_time(hw, flops)
    per_sm = hw.vector_flops_per_s["fp32"] / hw.sm_count  # an FMA is two of the flops
    assert hw.vector_flops_per_s["fp32"] < hw.matrix_rate("fp16") / 10
    assert r.time_s == pytest.approx(flops / per_sm, rel=1e-12)


def test_a_scalar_loop_that_issues_more_than_its_fmas_runs_at_the_issue_rate():
    """Three instructions per FMA: the schedulers, not the FMA units, set the pace (each SM
    issues issue_per_clock_per_sm thread-instructions per clock); at 1.5 per FMA the FMA
    units still bind on this GPU, whose FMA units take half the issue rate."""
    hw = _fma_bound_toy()
    flops = 10**9
    issue_per_sm = hw.issue_per_clock_per_sm * hw.clock_hz
    slow = _scalar_matmul_time(hw, flops, instructions_per_fma=3.0)
    assert slow.time_s == pytest.approx(flops / 2 * 3.0 / issue_per_sm, rel=1e-12)
    pipe = _scalar_matmul_time(hw, flops, instructions_per_fma=1.5)
    assert pipe.time_s == pytest.approx(flops / (hw.vector_flops_per_s["fp32"] / hw.sm_count))


def test_shared_memory_traffic_adds_its_time_at_the_banks_rate():
    """A kernel that moves b bytes of shared memory per flop takes flops / rate + flops * b /
    (smem_bytes_per_clock_per_sm * clock) per SM: the banks' time on top of the math."""
    hw = toy_gpu()
    flops = 10**12

    def program(ctx, cta):
        ctx.compute(None, matmul=flops)

    plan = toy_plan(program, 1, hw)
    runs = {}
    for b in (0.0, 0.5):
        k = dataclasses.replace(plan.kernels[0], smem_bytes_per_flop=b)
        runs[b] = run_engine(Plan("toy", Problem(), hw, Tiles(1, 1), plan.tensors, (k,)), l2=False)
    banks = hw.smem_bytes_per_clock_per_sm * hw.clock_hz  # one SM's bytes per second
    assert runs[0.5].time_s - runs[0.0].time_s == pytest.approx(flops * 0.5 / banks, rel=1e-9)


def test_warp_level_mma_runs_at_its_own_rate_where_the_gpu_has_one():
    """Hopper: mma.sync/WMMA below the wgmma peak; a GPU without the table: the peak."""
    flops = 10**12
    for preset, rate in (("h100-sxm", "warp"), ("a100-80gb", "peak")):
        hw = toy_gpu() if preset == "h100-sxm" else get_hardware(preset)

        def program(ctx, cta):
            ctx.compute(None, matmul=flops)

        plan = toy_plan(program, 1, hw)
        k = dataclasses.replace(plan.kernels[0], warp_mma=True)
        r = run_engine(Plan("toy", Problem(), hw, Tiles(1, 1), plan.tensors, (k,)), l2=False)
        table = hw.warp_mma_flops_per_s if rate == "warp" else hw.matrix_flops_per_s
        per_sm = table["fp16"] / hw.sm_count
        assert r.time_s - hw.launch_overhead_s == pytest.approx(flops / per_sm, rel=1e-9)
    assert (
        get_hardware("h100-sxm").warp_mma_flops_per_s["fp16"]
        < 0.7 * get_hardware("h100-sxm").matrix_flops_per_s["fp16"]
    )


def test_the_kernel_mirrors_predict_what_their_compute_units_allow():
    """fa2-kernel (scalar) gets slower when the FMA rate drops below what its schedulers issue
    (a sixteenth: its loops issue 2.5 instructions per FMA and idle with its 1 warp per
    scheduler, so a quarter would still be above it) and ignores the tensor-core rate; the
    WMMA kernel is the other way round."""
    p = Problem(batch=1, heads=8, seq_q=2048, seq_k=2048, head_dim=64)
    base = get_hardware("h100-sxm")
    slow_fma = base.with_overrides(
        vector_flops_per_s={k: v / 16 for k, v in base.vector_flops_per_s.items()}
    )
    slow_tc = base.with_overrides(
        matrix_flops_per_s={k: v / 4 for k, v in base.matrix_flops_per_s.items()}
    )

    def t(algo, hw):
        return run_engine(make_plan(algo, p, hw, 64, 64)).time_s

    assert t("fa2-kernel", slow_fma) > 1.5 * t("fa2-kernel", base)
    assert t("fa2-kernel", slow_tc) == t("fa2-kernel", base)


def test_half_the_sram_runs_two_ctas_per_sm():
    hw = toy_gpu()
    for n, waves in ((8, 1), (9, 2), (16, 2)):
        r = run_engine(toy_plan(load_row(1000), n, hw, sram=32 * 1024), l2=False)
        assert (r.kernels[0].ctas_per_sm, r.kernels[0].waves) == (2, waves)


def test_registers_limit_occupancy_when_the_kernel_reports_them(tmp_path):
    """64 K registers per SM, given per warp in units of 256: 128 threads (4 warps) at 100
    registers take 4 x 3,328 = 13,312, so 4 CTAs fit where the thread limit alone allows
    2048 / 128 = 16. Unknown registers limit nothing; a trace file carries the count."""
    hw = toy_gpu()
    plain = toy_plan(load_row(1000), 32, hw, sram=1024)
    r = run_engine(plain, l2=False)
    assert (r.kernels[0].ctas_per_sm, r.kernels[0].waves) == (16, 1)
    kernel = dataclasses.replace(plain.kernels[0], registers_per_thread=100)
    with_regs = dataclasses.replace(plain, kernels=(kernel,))
    r = run_engine(with_regs, l2=False)
    assert (r.kernels[0].ctas_per_sm, r.kernels[0].waves) == (4, 2)  # 32 CTAs, 16 slots
    save_trace(trace_plan(with_regs), tmp_path / "t.hbmtrace")
    replayed = simulate_workload(from_trace(load_trace(tmp_path / "t.hbmtrace")), hw, l2=False)
    assert (replayed.kernels[0].ctas_per_sm, replayed.kernels[0].waves) == (4, 2)


def test_the_systems_shared_memory_reserve_counts_per_resident_cta():
    """An SM of 64 KiB that lets a block ask for 63 KiB keeps 1 KiB per CTA: two CTAs of
    32 KiB need 66 KiB, so one fits; two of 31 KiB need 64 KiB and fit."""
    hw = toy_gpu(sram_bytes_per_block=63 * 1024)
    for sram, per_sm in ((32 * 1024, 1), (31 * 1024, 2)):
        r = run_engine(toy_plan(load_row(1000), 8, hw, sram=sram), l2=False)
        assert r.kernels[0].ctas_per_sm == per_sm


def test_waves_serialise_when_slots_run_out():
    """Eight CTAs needing a whole SM each run as two waves of four on four SMs."""
    r = run_engine(toy_plan(load_row(MB), 8, toy_gpu(), sram=64 * 1024), l2=False)
    assert r.kernels[0].waves == 2
    assert r.time_s == pytest.approx(2 * (1e-6 + 4 * MB / 1e9), rel=1e-12)


def test_a_footprint_larger_than_an_sm_is_refused():
    hw = toy_gpu()
    plan = toy_plan(load_row(10), 1, hw, sram=128 * 1024)
    with pytest.raises(SramOverflowError, match="131,072 bytes"):
        run_engine(plan)


def test_a_footprint_over_the_block_limit_is_refused_even_if_the_sm_holds_it(tmp_path):
    """A block may ask for 63 KiB of a 64 KiB SM: a trace whose CTA needs 63.5 KiB (made for
    a GPU with more) is refused on replay, naming the block's limit, not the SM's."""
    made_for = toy_gpu()
    save_trace(trace_plan(toy_plan(load_row(10), 2, made_for, sram=65_024)), tmp_path / "t")
    workload = from_trace(load_trace(tmp_path / "t"))
    assert simulate_workload(workload, made_for).kernels[0].ctas_per_sm == 1
    with pytest.raises(SramOverflowError, match=r"thread block may use at most 64,512 bytes"):
        simulate_workload(workload, toy_gpu(sram_bytes_per_block=63 * 1024))


def test_kernels_run_in_order_with_their_launch_overhead():
    hw = toy_gpu(launch_overhead_s=5e-6)
    p = toy_plan(load_row(MB), 1, hw)
    two = Plan("toy", p.problem, hw, p.tiles, p.tensors, p.kernels * 2)
    r = run_engine(two, l2=False)
    one = 5e-6 + 1e-6 + MB / 1e9
    assert r.kernels[1].start_s == pytest.approx(one, rel=1e-12)
    assert r.time_s == pytest.approx(2 * one, rel=1e-12)


def test_pipelining_hides_the_next_load_behind_this_compute():
    """stages=2: iteration j+1's load overlaps iteration j's compute. Two buffers: the first
    two loads go out together (sharing the bandwidth), then each compute hides the next load."""
    hw = toy_gpu(hbm_latency_s=0.0)
    per_sm = hw.matrix_rate("fp16") / hw.sm_count
    compute_s = 2e-3  # each step computes longer than a 1 ms load
    steps = 5

    def program(ctx, cta):
        for j in ctx.loop([range(steps)]):
            ctx.load("A", "X", (0, (j * 1000, (j + 1) * 1000)))
            ctx.compute(None, matmul=int(compute_s * per_sm))

    serial = run_engine(toy_plan(program, 1, hw, tensor_bytes=steps * 1000, stages=1), l2=False)
    piped = run_engine(toy_plan(program, 1, hw, tensor_bytes=steps * 1000, stages=2), l2=False)
    load_s = 1000 / 1e9
    assert serial.time_s == pytest.approx(steps * (load_s + compute_s), rel=1e-9)
    assert piped.time_s == pytest.approx(2 * load_s + steps * compute_s, rel=1e-9)


def _write_between_computes(write: str, nbytes: int, compute_s: float, hw):
    """load, compute, `write` (ctx.store or ctx.atomic_add) the tile, compute."""
    per_sm = hw.matrix_rate("fp16") / hw.sm_count

    def program(ctx, cta):
        ctx.load("A", "X", (0, (0, nbytes)))
        ctx.compute(None, matmul=int(compute_s * per_sm))
        getattr(ctx, write)("A", "X", (0, (0, nbytes)))
        ctx.compute(None, matmul=int(compute_s * per_sm))

    return program


def test_a_store_is_posted_the_next_compute_does_not_wait_for_it():
    """load 1 µs, compute 2 ms, store 1 µs, compute 2 ms: the second compute starts when the
    first ends (the SM sends the store and goes on); a CTA ends when its last store is done."""
    hw = toy_gpu(hbm_latency_s=0.0)
    compute_s, nbytes = 2e-3, 1000
    program = _write_between_computes("store", nbytes, compute_s, hw)
    r = run_engine(toy_plan(program, 1, hw, tensor_bytes=nbytes), l2=False)
    move_s = nbytes / 1e9
    assert r.time_s == pytest.approx(move_s + 2 * compute_s, rel=1e-9)

    def store_last(ctx, cta):
        program(ctx, cta)
        ctx.store("A", "X", (0, (0, nbytes)))

    r = run_engine(toy_plan(store_last, 1, hw, tensor_bytes=nbytes), l2=False)
    assert r.time_s == pytest.approx(2 * move_s + 2 * compute_s, rel=1e-9)


def test_an_atomic_add_holds_the_next_compute_until_it_is_done():
    """load 1 µs, compute 2 ms, atomic add 1 µs, compute 2 ms: unlike a store, the atomic's
    transfer is waited for (L2's atomic throughput is not modelled; its round trip stands in
    for it, see the engine's docstring)."""
    hw = toy_gpu(hbm_latency_s=0.0)
    compute_s, nbytes = 2e-3, 1000
    program = _write_between_computes("atomic_add", nbytes, compute_s, hw)
    r = run_engine(toy_plan(program, 1, hw, tensor_bytes=nbytes), l2=False)
    move_s = nbytes / 1e9  # the load, and the atomic's transfer on the same link
    assert r.time_s == pytest.approx(2 * move_s + 2 * compute_s, rel=1e-9)


def test_a_posted_atomic_add_moves_its_bytes_while_the_next_compute_runs():
    """The same program in a kernel whose atomic adds are posted (Kernel.posted_atomics: a TMA
    bulk reduce-add a producer warp issues, or a `red`): the second compute starts when the
    first ends, as after a store, and the add still reads and writes its bytes."""
    hw = toy_gpu(hbm_latency_s=0.0)
    compute_s, nbytes = 2e-3, 1000
    program = _write_between_computes("atomic_add", nbytes, compute_s, hw)
    plan = toy_plan(program, 1, hw, tensor_bytes=nbytes)
    posted = dataclasses.replace(plan.kernels[0], posted_atomics=True)
    r = run_engine(dataclasses.replace(plan, kernels=(posted,)), l2=False)
    assert r.time_s == pytest.approx(nbytes / 1e9 + 2 * compute_s, rel=1e-9)
    assert (r.dram_read_bytes, r.dram_write_bytes) == (2 * nbytes, nbytes)


def test_a_prefetch_goes_out_ahead_of_the_stores_before_it_in_the_program():
    """stages=2, each step load X_j, compute, store Y_j: the load of step j + 1 is issued when
    compute j starts, not behind store j (which waits for compute j's end). The first two
    loads share the bandwidth (2 x 1 µs); each store and the next load then move while a
    3 µs compute runs; the last store ends the CTA: 2 + 5 x 3 + 1 µs."""
    hw = toy_gpu(hbm_latency_s=0.0)
    per_sm = hw.matrix_rate("fp16") / hw.sm_count
    compute_s, nbytes, steps = 3e-6, 1000, 5

    def program(ctx, cta):
        for j in ctx.loop([range(steps)]):
            ctx.load("A", "X", (0, (j * nbytes, (j + 1) * nbytes)))
            ctx.compute(None, matmul=int(compute_s * per_sm))
            ctx.store("A", "X", (0, ((steps + j) * nbytes, (steps + j + 1) * nbytes)))

    r = run_engine(toy_plan(program, 1, hw, tensor_bytes=2 * steps * nbytes, stages=2), l2=False)
    move_s = nbytes / 1e9
    assert r.time_s == pytest.approx(2 * move_s + steps * compute_s + move_s, rel=1e-9)


def test_a_second_cta_of_the_same_head_hits_the_k_tile_in_l2():
    """FA2 with two Q blocks of one head: the second block's K and V loads are L2 hits."""
    p = Problem(batch=1, heads=1, seq_q=128, seq_k=64, head_dim=64)
    r = run_engine(make_plan("fa2", p, get_hardware("h100-sxm"), 64, 64))
    kv_tile = 64 * 64 * 2
    assert r.l2_hit_bytes == 2 * kv_tile
    assert (
        r.dram_read_bytes
        == count_plan(make_plan("fa2", p, get_hardware("h100-sxm"), 64, 64)).hbm_read_bytes
        - 2 * kv_tile
    )


@pytest.mark.parametrize("algo", ["standard", "fa1", "fa2"])
def test_without_l2_dram_traffic_equals_hbm_accesses(algo):
    p = Problem(batch=2, heads=2, seq_q=333, seq_k=400, head_dim=32, causal=True, dropout=0.1)
    plan = make_plan(algo, p, get_hardware("a100-40gb"))
    r, c = run_engine(plan, l2=False), count_plan(plan)
    assert (r.dram_read_bytes, r.dram_write_bytes, r.l2_hit_bytes) == (
        c.hbm_read_bytes,
        c.hbm_write_bytes,
        0,
    )


@pytest.mark.parametrize("algo", ["standard", "fa1", "fa2"])
def test_with_l2_every_hbm_read_is_a_dram_read_or_an_l2_hit(algo):
    p = Problem(batch=2, heads=4, kv_heads=2, seq_q=500, seq_k=700, head_dim=64)
    plan = make_plan(algo, p, get_hardware("h100-sxm"))
    r, c = run_engine(plan), count_plan(plan)
    assert r.dram_read_bytes + r.l2_hit_bytes == c.hbm_read_bytes
    assert r.dram_write_bytes == c.hbm_write_bytes


CONFIGS = [
    ("fa2", Problem(batch=2, heads=4, seq_q=1000, seq_k=1000, head_dim=64)),
    ("fa2", Problem(batch=1, heads=4, kv_heads=2, seq_q=700, seq_k=900, head_dim=64, causal=True)),
    ("fa1", Problem(batch=2, heads=3, seq_q=999, seq_k=777, head_dim=64, dropout=0.1)),
    ("standard", Problem(batch=1, heads=2, seq_q=600, seq_k=650, head_dim=64, causal=True)),
    ("standard", Problem(batch=2, heads=2, seq_q=512, seq_k=512, head_dim=128, dtype="fp32")),
    (
        "fa2",
        Problem(batch=1, heads=4, kv_heads=2, seq_q=500, seq_k=600, causal=True, pass_="fwd+bwd"),
    ),
    ("fa1", Problem(batch=1, heads=2, seq_q=300, seq_k=300, dropout=0.1, pass_="bwd")),
    ("standard", Problem(batch=1, heads=2, seq_q=256, seq_k=300, pass_="fwd+bwd")),
    ("split-kv", Problem(batch=1, heads=8, kv_heads=2, seq_q=1, seq_k=8192)),
]


@pytest.mark.parametrize("algo,p", CONFIGS)
@pytest.mark.parametrize("gpu", ["h100-sxm", "l4"])
def test_fast_path_agrees_with_the_full_per_op_replay(algo, p, gpu):
    """Bytes exactly, time to rounding, per kernel."""
    plan = make_plan(algo, p, get_hardware(gpu))
    assert_same_timing(run_engine(plan), run_engine(plan, exact=True))


def test_replaying_a_trace_file_gives_the_same_time(tmp_path):
    plan = make_plan(
        "fa2",
        Problem(batch=1, heads=2, seq_q=300, seq_k=300, causal=True),
        get_hardware("a100-40gb"),
    )
    save_trace(trace_plan(plan), tmp_path / "t.hbmtrace")
    replayed = simulate_workload(from_trace(load_trace(tmp_path / "t.hbmtrace")), plan.hardware)
    direct = run_engine(plan)
    assert replayed.time_s == pytest.approx(direct.time_s, rel=1e-9)
    assert replayed.dram_read_bytes == direct.dram_read_bytes


def test_fa2_is_predicted_several_times_faster_than_standard_on_h100():
    p = Problem(batch=1, heads=16, seq_q=4096, seq_k=4096, head_dim=64, dtype="fp16")
    hw = get_hardware("h100-sxm")
    std, fa2 = (run_engine(make_plan(a, p, hw)).time_s for a in ("standard", "fa2"))
    assert std > 3 * fa2


def test_a_bandwidth_bound_run_takes_bytes_over_bandwidth():
    hw = get_hardware("h100-sxm")
    n, nbytes = 4 * hw.sm_count * 4, 4 * MB

    def program(ctx, cta):
        (i,) = cta
        ctx.load("A", "X", (i, (0, nbytes)))

    r = run_engine(toy_plan(program, n, hw, tensor_bytes=nbytes), l2=False)
    assert r.time_s == pytest.approx(n * nbytes / hw.hbm_bytes_per_s, rel=0.02)


def test_a_compute_bound_run_takes_flops_over_rate():
    hw = get_hardware("h100-sxm")
    n, flops = hw.sm_count * 8, 10**10

    def program(ctx, cta):
        (i,) = cta
        ctx.load("A", "X", (i, (0, 1000)))
        ctx.compute(None, matmul=flops)

    r = run_engine(toy_plan(program, n, hw, tensor_bytes=1000, sram=16 * 1024), l2=False)
    assert r.time_s == pytest.approx(n * flops / hw.matrix_rate("fp16"), rel=0.02)


def test_timeline_rows_are_ordered_intervals_that_add_up():
    p = Problem(batch=1, heads=2, seq_q=256, seq_k=256)
    r = run_engine(make_plan("fa2", p, get_hardware("h100-sxm")), timeline=True)
    t = r.timeline
    assert len(t) and np.all(t["end_s"] >= t["start_s"]) and t["end_s"].max() <= r.time_s
    loads = t[t["op"] == OP_LOAD]
    assert loads["bytes"].sum() == r.dram_read_bytes + r.l2_hit_bytes
    assert t[t["op"] == OP_STORE]["bytes"].sum() == r.dram_write_bytes


def test_too_large_for_the_engine_keeps_counts_and_says_why(monkeypatch):
    """simulate keeps the counts past the work bound; run_engine itself refuses at once a
    plan whose L2 decisions pass its memory budget (made small here, below even one CTA of
    each run of a causal kernel's row-block classes, classwave's least), before building
    it."""
    from hbmsim.engine import simulation as engine

    monkeypatch.setattr(limits, "STRETCH_MAX_STEPS", 1000)
    result = simulate(Problem(seq_q=1 << 17, seq_k=1 << 17, causal=True), get_hardware("h100-sxm"))
    assert "even with every kernel stretched" in result.extra["engine"]["skipped"]
    assert result.hbm_read_bytes > 0  # the counts stand
    monkeypatch.setattr(engine, "ENGINE_MAX_BYTES", 1 << 20)

    def build(_plan):
        raise AssertionError("the workload was built before the budget refused the plan")

    monkeypatch.setattr(engine, "from_plan_fast", build)
    p = Problem(batch=4, heads=8, seq_q=8192, seq_k=8192, causal=True)
    plan = build_plan(p, get_hardware("a100-40gb"), algo="fa2")
    with pytest.raises(TooLargeToExecuteError, match="L2 model would decide"):
        run_engine(plan)


def test_a_one_class_kernel_is_bounded_by_the_waves_it_simulates_not_by_all_its_waves(
    monkeypatch,
):
    """Every wave of a one-class kernel runs alone, and a wave whose (size, L2 hits) came
    before is replayed: the work bound counts the waves that differ once the L2 has decided
    (fa2 without a mask, dozens of waves, a few different), so a bound of five waves' steps
    times it as an unbounded run does, and a bound of two waves' steps, which the estimate
    before the L2 passes (two wave sizes), has it stretched instead, or, where the stretch
    passes its own bound too, refused with the count of waves that differ."""
    from hbmsim.engine.limits import ARRAY_OPS_PER_STEP, engine_steps, walked_ops

    p, hw = Problem(batch=4, heads=16, seq_q=8192, seq_k=8192), get_hardware("h100-sxm")
    plan = make_plan("fa2", p, hw)
    counts = count_plan(plan)
    kernel = plan.kernels[0]
    slots = hw.sm_count * occupancy(hw, kernel.sram_bytes, kernel.threads_per_cta, kernel.name)
    waves = -(-kernel.n_ctas // slots)
    ops = -(-counts.kernels[0].ops // kernel.n_ctas)
    per_wave = walked_ops(plan, 0) + -(-ops // ARRAY_OPS_PER_STEP)  # a group alone's walk
    assert waves > 20
    timed = run_engine(plan, max_steps=5 * per_wave)
    assert timed.time_s == run_engine(plan).time_s
    sizes = engine_steps(plan, counts)  # before the L2: its two wave sizes (full, last)
    assert sizes == 2 * per_wave
    (stretched,) = run_engine(plan, max_steps=sizes).kernels
    assert stretched.stretched
    monkeypatch.setattr(limits, "STRETCH_MAX_STEPS", sizes)
    with pytest.raises(TooLargeToExecuteError, match="waves differ in their L2 hits"):
        run_engine(plan, max_steps=sizes)


def test_a_group_alone_walks_a_short_loop_body_for_a_few_rounds_and_a_long_one_in_full():
    """The work bound's walk of one CTA, worked by hand: a load, then 100 iterations of (load,
    compute): 1 + 3 rounds x 2 ops; a body of five compute steps (over limits.MAX_PERIOD) is
    walked in full; a short loop inside a long outer one: each outer iteration walks its inner
    loop for three rounds."""
    from hbmsim.engine.limits import LOOP_ROUNDS, walked_ops

    assert LOOP_ROUNDS == 3 and MAX_PERIOD == 4

    def short(ctx, cta):
        ctx.load("A", "X", (0, (0, 8)))
        for j in ctx.loop([range(100)]):
            ctx.load("A", "X", (0, (8 * j, 8 * j + 8)))
            ctx.compute(None, matmul=1, out="A")

    def long_body(ctx, cta):
        for j in ctx.loop([range(10)]):
            for _ in range(5):  # five compute steps, each after a load
                ctx.load("A", "X", (0, (8 * j, 8 * j + 8)))
                ctx.compute(None, matmul=1, out="A")

    def nested(ctx, cta):
        for j in ctx.loop([range(10)]):
            for _ in range(5):
                ctx.load("A", "X", (0, (8 * j, 8 * j + 8)))
                ctx.compute(None, matmul=1, out="A")
            for i in ctx.loop([range(50), range(50, 60)]):
                ctx.load("A", "X", (1, (8 * i, 8 * i + 8)))
                ctx.compute(None, matmul=1, out="A")

    hw = toy_gpu()
    assert walked_ops(toy_plan(short, 1, hw), 0) == 1 + 3 * 2
    assert walked_ops(toy_plan(long_body, 1, hw), 0) == 10 * 10
    assert walked_ops(toy_plan(nested, 1, hw), 0) == 10 * (10 + 2 * 3 * 2)


def test_a_long_single_wave_kernel_is_bounded_by_the_walk_not_by_its_ops():
    """flash-attn's first release runs one CTA per head over the whole sequence: one wave of
    long programs (batch 16 x 8 heads at 16k tokens: 325 k ops per CTA). Its group runs alone
    and times repeated rounds at once, so the work bound counts a few rounds of each short
    loop plus its ops as array work: far under its ops, and a bound at that estimate times it
    as an unbounded run does."""
    from hbmsim.engine.limits import engine_steps

    p, hw = Problem(batch=16, heads=8, seq_q=16384, seq_k=16384), get_hardware("a100-40gb")
    plan = build_plan(p, hw, None, "flash-attn-1@0.1", None, None, None, None)
    counts = count_plan(plan)
    (kernel,), (kc,) = plan.kernels, counts.kernels
    occ = occupancy(hw, kernel.sram_bytes, kernel.threads_per_cta, kernel.name)
    assert len(kernel.grid) == 1 and kernel.n_ctas <= hw.sm_count * occ  # one wave
    estimate = engine_steps(plan, counts)
    assert estimate < kc.ops / kernel.n_ctas / 4
    timed = simulate(p, hw, impl="flash-attn-1@0.1", engine_max_steps=estimate)
    unbounded = simulate(p, hw, impl="flash-attn-1@0.1", engine_max_steps=10**12)
    assert timed.extra["time_s"] == unbounded.extra["time_s"]


def test_interleaved_classes_form_one_group_per_class_in_each_launch():
    """Worked by hand: classes A and B alternate in launch order (9 CTAs), 3 slots. The first
    launch takes A, B, A: two groups (A x2, B x1). Groups end in launch order: A's gives 2
    slots, and B, A launch as two groups; each later end gives one slot, and the four CTAs
    left launch one by one: 2 + 2 + 4 = 8 groups. Class by class (A x3, B x3, 2 slots): A x2;
    then A x1 with B x1; then B, B: five groups."""
    from hbmsim.engine.limits import _launched_groups

    alternating = [(0, 1), (1, 1)] * 4 + [(0, 1)]  # A B A B A B A B A
    assert _launched_groups(alternating, 3) == 8
    assert _launched_groups([(0, 3), (1, 3)], 2) == 5


def _groups_by_launching(classes: list[int], slots: int) -> int:
    """The groups formed by launching CTAs of these `classes` one by one into free slots: a
    launch fills every free slot, one group per class it holds; then the oldest group ends and
    gives its slots back."""
    pending, running, free, groups = list(classes), [], slots, 0
    while pending:
        launch, pending = pending[:free], pending[free:]
        sizes = {c: launch.count(c) for c in dict.fromkeys(launch)}
        groups += len(sizes)
        running += list(sizes.values())
        free = running.pop(0) if pending else 0
    return groups


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=30),
    slots=st.integers(1, 64),
)
def test_class_by_class_groups_in_closed_form_match_launching_them(sizes, slots):
    """The work bound counts a class-by-class kernel's groups in closed form (in its classes'
    number, not its groups': millions at a million tokens over many heads); that count is the
    one launching the CTAs one launch at a time gives."""
    from hbmsim.engine.limits import _launched_groups

    classes = [c for c, n in enumerate(sizes) for _ in range(n)]
    assert _launched_groups(list(enumerate(sizes)), slots) == _groups_by_launching(classes, slots)


def test_a_causal_kernel_launched_class_by_class_is_bounded_by_the_groups_it_forms():
    """fa2's causal row blocks launch one after another, 4 heads at a time: as a finished
    block hands its slots to the next, each block runs as about one group, not as many
    groups as it has CTAs. The work bound counts those groups, well under counting CTAs,
    and a bound at that estimate times the plan as an unbounded run does; one step less
    keeps the counts and says why."""
    import math

    from hbmsim.engine.limits import engine_steps

    p, hw = (
        Problem(batch=1, heads=4, seq_q=16384, seq_k=16384, causal=True),
        get_hardware("h100-sxm"),
    )
    plan = make_plan("fa2", p, hw)
    counts = count_plan(plan)
    (kernel,), (kc,) = plan.kernels, counts.kernels
    assert kernel.launch_order is None and len(kernel.grid) > 1
    slots = hw.sm_count * occupancy(hw, kernel.sram_bytes, kernel.threads_per_cta, kernel.name)
    every_cta = min(kernel.n_ctas, math.ceil(kernel.n_ctas / slots) * len(kernel.grid))
    estimate = engine_steps(plan, counts)
    assert estimate < every_cta * math.ceil(kc.ops / kernel.n_ctas) / 2
    timed = simulate(p, hw, "fa2", engine_max_steps=estimate)
    assert timed.extra["time_s"] == simulate(p, hw, "fa2", engine_max_steps=10**12).extra["time_s"]
    short = simulate(p, hw, "fa2", engine_max_steps=estimate - 1)
    assert all(k["stretched"] for k in short.extra["engine"]["kernels"])


def test_a_one_wave_kernel_is_bounded_by_its_distinct_programs_not_its_classes():
    """flash-attn 1.x's split forward: 29 classes (splits) in one wave, whose programs have two
    lengths (102 or 103 query steps a K/V block): the engine starts them at once as one group
    per program, and the bound counts one CTA of each length, which counting gives per class
    (their ops, weighted by the classes' CTAs, add up to the kernel's), far under counting
    29 groups: a bound at that estimate replays it as an unbounded run does."""
    import math

    from hbmsim.engine.limits import engine_steps

    p, hw = Problem(batch=1, heads=16, seq_q=1 << 15, seq_k=1 << 15), get_hardware("h100-sxm")
    plan = build_plan(p, hw, impl="flash-attn-1")
    counts = count_plan(plan)
    (kernel,), (kc,) = plan.kernels, counts.kernels
    sizes = [c.size for c in kernel.grid]
    assert len(sizes) == 29 and kernel.n_ctas <= hw.sm_count * occupancy(
        hw, kernel.sram_bytes, kernel.threads_per_cta, kernel.name
    )
    assert sum(ops * n for ops, n in zip(kc.class_ops, sizes, strict=True)) == kc.ops
    assert len(set(kc.class_ops)) == 2
    estimate = engine_steps(plan, counts)
    assert estimate == sum(set(kc.class_ops))
    assert len(sizes) * math.ceil(kc.ops / kernel.n_ctas) > 10 * estimate
    timed = simulate(p, hw, impl="flash-attn-1", engine_max_steps=estimate)
    assert not any(k["stretched"] for k in timed.extra["engine"]["kernels"])
    assert (
        timed.extra["time_s"]
        == simulate(p, hw, impl="flash-attn-1", engine_max_steps=10**12).extra["time_s"]
    )


class ReferenceLRU:
    """The obvious LRU: a list, most recent last."""

    def __init__(self, cap):
        self.cap, self.items = cap, []

    def access(self, key, size, is_load):
        for i, (k, _size) in enumerate(self.items):
            if k == key:
                self.items.append(self.items.pop(i))
                return is_load
        if size <= self.cap:
            self.items.append((key, size))
            while sum(s for _, s in self.items) > self.cap:
                self.items.pop(0)
        return False


@given(
    st.lists(st.tuples(st.integers(0, 12), st.booleans()), max_size=200),
    st.integers(1, 40),
    st.randoms(),
)
def test_l2_lru_matches_a_plain_reference(accesses, cap, rnd):
    sizes = {k: rnd.randint(1, 12) for k in range(13)}
    ref = ReferenceLRU(cap)
    expected = [ref.access(k, sizes[k], load) for k, load in accesses]
    ops = np.array([OP_LOAD if load else OP_STORE for _, load in accesses], dtype=np.int64)
    keys = np.array([[k, k] for k, _ in accesses], dtype=np.int64).reshape(-1, 2)
    got = LRU(cap, span=100).replay(
        ops, keys, np.array([sizes[k] for k, _ in accesses], dtype=np.int64)
    )
    assert got.tolist() == expected


AGREEMENT_REL = 1e-9  # both paths do the same float arithmetic; this is rounding only
MAX_AGREEMENT_TRIPS = 5_000  # the exact replay costs ~50 µs a trip: keeps the property quick


def assert_same_timing(a, b):
    """Bytes exactly, and time to AGREEMENT_REL, per kernel and in all."""
    assert len(a.kernels) == len(b.kernels)
    for x, y in zip(a.kernels, b.kernels, strict=True):
        assert (x.name, x.ctas, x.ctas_per_sm, x.waves) == (y.name, y.ctas, y.ctas_per_sm, y.waves)
        assert (x.dram_read_bytes, x.dram_write_bytes, x.l2_hit_bytes) == (
            y.dram_read_bytes,
            y.dram_write_bytes,
            y.l2_hit_bytes,
        )
        assert x.start_s == pytest.approx(y.start_s, rel=AGREEMENT_REL)
        assert x.time_s == pytest.approx(y.time_s, rel=AGREEMENT_REL)
    assert a.time_s == pytest.approx(b.time_s, rel=AGREEMENT_REL)


@settings(max_examples=max(300, settings().max_examples))
@given(
    p=problems(max_seq=128, max_d=64, passes=ALL_PASSES),
    t=st.tuples(st.integers(4, 64), st.integers(4, 64), st.integers(4, 16)),
    algo=st.sampled_from(ALGOS),
    splits=st.integers(1, 8),
    gpu=st.sampled_from(["l4", "a100-40gb", "h100-sxm"]),
    l2=st.booleans(),
)
def test_fast_path_agrees_with_the_per_cta_replay_on_random_problems(p, t, algo, splits, gpu, l2):
    """Every algorithm and implementation, causal, GQA, ragged tiles, every pass: the fast
    path, the per-CTA exact replay and a replay of the trace (as `hbmsim replay` runs it) give
    the same bytes and times, to rounding."""
    p = compatible(algo, p)
    try:
        plan = make_plan(algo, p, get_hardware(gpu), *plan_args(algo, t, p, splits))
    except SramOverflowError:
        assume(False)
    assume(count_plan(plan).trips <= MAX_AGREEMENT_TRIPS)
    fast, exact = run_engine(plan, l2=l2), run_engine(plan, l2=l2, exact=True)
    assert_same_timing(fast, exact)
    assert_same_timing(simulate_workload(from_trace(trace_plan(plan)), plan.hardware, l2=l2), exact)


def test_causal_split_kv_fast_and_exact_agree():
    """The reported case: causal split-kv on an L4 (batch 2, 100 queries against 1,024 keys,
    head dim 16, 48 x 32 tiles) was 10% faster on the fast path. Split CTAs of different
    declared classes run the same ops; they are one cohort in both paths."""
    p = Problem(batch=2, heads=1, seq_q=100, seq_k=1024, head_dim=16, causal=True)
    plan = make_plan("split-kv", p, get_hardware("l4"), 48, 32)
    assert_same_timing(run_engine(plan), run_engine(plan, exact=True))


def test_the_exact_timeline_shows_each_ctas_own_tiles():
    """Every one of the 16 S tiles (4 x 4 at 128 x 128) appears as its own store."""
    p = Problem(batch=1, heads=1, seq_q=512, seq_k=512)
    plan = make_plan("standard", p, get_hardware("h100-sxm"))
    t = run_engine(plan, exact=True, timeline=True).timeline
    s_id = list(plan.tensors).index("S")
    stores = t[(t["op"] == OP_STORE) & (t["tensor"] == s_id)]
    assert len({tuple(x) for x in stores["start"]}) == 16


def test_split_kv_fills_the_gpu_where_fa2_decoding_cannot():
    """Batch 1 decoding: FA2 runs one CTA per head on 8 of 132 SMs; split-kv spreads the KV
    cache over the GPU and is predicted several times faster."""
    hw = get_hardware("h100-sxm")
    p = Problem(batch=1, heads=8, kv_heads=2, seq_q=1, seq_k=32768)
    fa2 = run_engine(make_plan("fa2", p, hw))
    skv = run_engine(make_plan("split-kv", p, hw))
    assert fa2.kernels[0].ctas == 8
    assert skv.kernels[0].ctas >= hw.sm_count
    assert fa2.time_s > 3 * skv.time_s


def test_backward_atomics_are_resolved_in_l2():
    """FA2's dQ atomic adds: each is an L2 hit or a DRAM read; a hit adds in place and costs
    no DRAM write (the tile is written back once). Here dQ_accum (256 kB) is zeroed into L2
    and stays there, so every add hits; without the L2 every add is a DRAM read and write."""
    p = Problem(batch=1, heads=2, seq_q=256, seq_k=256, pass_="bwd")
    plan = make_plan("fa2", p, get_hardware("h100-sxm"))
    r, c = run_engine(plan), count_plan(plan)
    records = trace_plan(plan).records
    atomic_bytes = int(records["bytes"][records["op"] == OP_ATOMIC].sum())
    assert atomic_bytes > 0
    assert r.dram_read_bytes + r.l2_hit_bytes == c.hbm_read_bytes
    assert r.dram_write_bytes == c.hbm_write_bytes - atomic_bytes
    no_l2 = run_engine(plan, l2=False)
    assert no_l2.dram_write_bytes == c.hbm_write_bytes


def test_a_call_is_host_bound_when_its_ops_outlast_its_kernels():
    """A plan a framework issues spends host_op_s per kernel launch and per framework op,
    ahead of the GPU: one 1 ms kernel plus two framework ops at 1 ms each take 3 ms, and the
    result says the GPU's share. A textbook plan has no host to wait for."""
    hw = toy_gpu(host_op_s=1e-3, hbm_latency_s=0.0)
    p = toy_plan(load_row(MB), 1, hw)
    r = run_engine(dataclasses.replace(p, framework_ops=2, host_issued=True), l2=False)
    assert r.gpu_time_s == pytest.approx(1e-3, rel=1e-12)
    assert r.time_s == pytest.approx(3e-3, rel=1e-12)
    assert r.to_dict()["engine"]["host_bound"] is True
    gpu_bound = run_engine(dataclasses.replace(p, host_issued=True), l2=False)  # 1 ms each
    assert gpu_bound.time_s == pytest.approx(1e-3, rel=1e-12)
    no_host = run_engine(dataclasses.replace(p, framework_ops=2), l2=False)  # a textbook plan
    assert no_host.time_s == pytest.approx(1e-3, rel=1e-12) and no_host.host_time_s == 0


def test_l2_hits_and_dram_misses_share_the_sm_to_l2_path():
    """Every byte crosses the L2 path; misses cross DRAM too. With both at 1 MB/ms, a 1 MB
    hit and a 1 MB miss issued together share the L2 path: 2 ms, not 1 ms each on
    independent links."""
    hw = toy_gpu(hbm_latency_s=0.0, l2_bytes_per_s=1e9)
    warm = toy_plan(load_row(MB), 1, hw)  # brings row 0 into L2
    both = toy_plan(load_row(MB), 2, hw)  # CTA 0 hits row 0, CTA 1 misses row 1
    plan = dataclasses.replace(both, kernels=(warm.kernels[0], both.kernels[0]))
    r = run_engine(plan)
    assert r.kernels[1].l2_hit_bytes == MB
    assert r.kernels[1].dram_read_bytes == MB
    assert r.kernels[1].time_s == pytest.approx(2e-3, rel=1e-12)


def test_elementwise_operations_take_one_fp32_lane_clock_each():
    """Vector work is counted in operations; a lane does one per clock, and the datasheet's
    fp32 FLOP/s counts an FMA as two, so 1e9 operations on one SM take 2e9 / (FLOP/s per SM)."""
    hw = toy_gpu()
    ops = 10**9

    def program(ctx, cta):
        ctx.compute(None, vector=ops)

    r = run_engine(toy_plan(program, 1, hw), l2=False)
    lanes_per_s = hw.vector_flops_per_s["fp32"] / hw.sm_count / 2
    assert r.time_s == pytest.approx(ops / lanes_per_s, rel=1e-12)


def transfer_batches(monkeypatch) -> list:
    """The batches of transfers the engine starts from now on (Links.start), as a list that
    fills while it runs."""
    from hbmsim.engine.links import Links

    batches = []
    real = Links.start
    monkeypatch.setattr(
        Links, "start", lambda self, b, *rest: batches.append(b) or real(self, b, *rest)
    )
    return batches


@pytest.mark.parametrize("ctas", [1, 4])
def test_a_lone_groups_steady_state_is_timed_once_with_its_transfers_in_flight(monkeypatch, ctas):
    """A loop that prefetches the next tile while computing on this one and waits on memory
    (latency longer than the compute): after a few steps each step leaves a load in flight
    exactly as the step before found it, shifted in time. The engine times the rest of the
    loop at once and goes on with that load renumbered: the same total as the per-CTA replay,
    which simulates every step, and far fewer transfer batches than steps."""
    hw, steps, nbytes = toy_gpu(hbm_latency_s=20e-6), 1000, 1000

    def program(ctx, cta):
        (i,) = cta
        for j in range(steps):
            ctx.load("A", "X", (i, (j * nbytes, (j + 1) * nbytes)))
            ctx.compute(None, vector=10**3)
        ctx.store("A", "X", (i, (0, nbytes)))

    plan = toy_plan(program, ctas, hw, stages=2, tensor_bytes=steps * nbytes)
    batches = transfer_batches(monkeypatch)
    fast = run_engine(plan, l2=False)
    assert len(batches) < 20
    exact = run_engine(plan, l2=False, exact=True)
    assert_same_timing(fast, exact)
    assert fast.dram_read_bytes == ctas * steps * nbytes
    assert fast.time_s > steps * hw.hbm_latency_s / 2  # two loads in flight set the pace


@pytest.mark.parametrize(
    "what, p",
    [
        ("flash-attn-2", Problem(batch=2, heads=4, seq_q=1024, seq_k=1024, causal=True)),
        ("fa2", Problem(batch=1, heads=4, seq_q=1024, seq_k=1024, pass_="fwd+bwd")),
        ("torch-eager", Problem(batch=1, heads=2, seq_q=512, seq_k=512, causal=True)),
    ],
)
def test_alike_transfers_issued_together_run_as_one_flow_with_the_same_result(monkeypatch, what, p):
    """A step's K and V tiles (same bytes, same hits) start together and share every link
    alike, so the engine runs them as one flow of both: the same times and bytes, to the last
    bit, as running each on its own."""
    from hbmsim.engine import links as links

    plan = build_plan(
        p, get_hardware("h100-sxm"), **({"impl": what} if "-" in what else {"algo": what})
    )
    merged = [run_engine(plan), run_engine(plan, exact=True)]
    monkeypatch.setattr(
        links, "merged", lambda batch: ([[*t, 1] for t in batch], list(range(len(batch))))
    )
    apart = [run_engine(plan), run_engine(plan, exact=True)]
    for a, b in zip(merged, apart, strict=True):
        assert a.time_s == b.time_s
        assert [k.time_s for k in a.kernels] == [k.time_s for k in b.kernels]
        assert (a.dram_read_bytes, a.dram_write_bytes, a.l2_hit_bytes) == (
            b.dram_read_bytes,
            b.dram_write_bytes,
            b.l2_hit_bytes,
        )


@pytest.mark.parametrize("ctas", [1, 4])
def test_identical_steps_of_a_lone_group_are_timed_once_and_add_up(monkeypatch, ctas):
    """A CTA loading a tile and then computing on it, a thousand times over, alone on the GPU:
    each step starts and ends with nothing in flight, so after two steps the engine times the
    rest at once. The total is still a thousand times one step (latency, bytes over the
    bandwidth the CTAs share, compute), the bytes all counted, as the per-CTA replay gives."""
    hw, steps, nbytes, vector = toy_gpu(), 1000, 1000, 10**4
    compute_s = vector / (hw.vector_flops_per_s["fp32"] / hw.sm_count / 2)

    def program(ctx, cta):
        (i,) = cta
        for j in range(steps):
            ctx.load("A", "X", (i, (j * nbytes, (j + 1) * nbytes)))
            ctx.compute(None, vector=vector)

    plan = toy_plan(program, ctas, hw, tensor_bytes=steps * nbytes)
    batches = transfer_batches(monkeypatch)
    fast = run_engine(plan, l2=False)
    assert len(batches) < 10  # not a batch of transfers per step
    one_step = hw.hbm_latency_s + ctas * nbytes / hw.hbm_bytes_per_s + compute_s
    assert fast.time_s == pytest.approx(steps * one_step, rel=1e-12)
    assert fast.dram_read_bytes == ctas * steps * nbytes
    assert_same_timing(fast, run_engine(plan, l2=False, exact=True))


def looping_program(steps: dict, nbytes: int, last=None):
    """CTA i loads a tile of X and computes, steps[i] times, then stores `last(i)` bytes (a
    tile, by default) of X, or of Y where `last` is given."""

    def program(ctx, cta):
        (i,) = cta
        for j in range(steps[i]):
            ctx.load("A", "X", (i, (j * nbytes, (j + 1) * nbytes)))
            ctx.compute(None, vector=10**4)
        if last is None:
            ctx.store("A", "X", (i, (0, nbytes)))
        else:
            ctx.store("A", "Y", (i, (0, last(i))))

    return program


@pytest.mark.parametrize("stages", [1, 2])
def test_one_waves_groups_sharing_the_gpu_skip_the_rounds_it_repeats(monkeypatch, stages):
    """Two classes of two CTAs each, in one wave, loading and computing 1,000 and 1,001 times
    (two groups, neither alone: they share DRAM). Once both are in their loops the whole GPU
    is as it was one step before, shifted in time: the engine times the rounds both still
    repeat at once (rounds.Rounds), a handful of transfer batches instead of 2,001,
    with the per-CTA replay's bytes and time."""
    hw, nbytes = toy_gpu(hbm_latency_s=3e-6), 1000
    steps = {0: 1000, 1: 1000, 2: 1001, 3: 1001}

    program = looping_program(steps, nbytes)

    tensors = {"X": TensorSpec("X", (4, 1001 * nbytes), 1, "input")}
    grid = (CtaClass((range(0, 2),)), CtaClass((range(2, 4),)))
    kernel = Kernel("k", grid, (Buffer("A", (1024,), 1),), program, 128, stages)
    plan = Plan("toy", Problem(), hw, Tiles(1, 1), tensors, (kernel,))
    batches = transfer_batches(monkeypatch)
    fast = run_engine(plan, l2=False)
    assert len(batches) < 100
    assert fast.dram_read_bytes == sum(steps.values()) * nbytes
    assert_same_timing(fast, run_engine(plan, l2=False, exact=True))


@pytest.mark.parametrize("stages", [1, 2])
def test_groups_of_several_waves_skip_the_rounds_the_gpu_repeats_between_ends(monkeypatch, stages):
    """Three classes of four CTAs on a GPU of eight slots (4 SMs, two CTAs each), loading and
    computing 600, 601 and 602 times, launched class by class: two waves that overlap, the
    third class taking slots as the first two end, so the GPU runs two or three groups at
    every moment and no group is ever alone. Between one group's end and the next, every
    running group is in its loop and the whole GPU repeats its round, shifted in time: those
    rounds are timed at once (rounds.Rounds) and everything after them runs that much
    later, with the per-CTA replay's bytes and time."""
    hw, nbytes = toy_gpu(hbm_latency_s=3e-6), 1000
    steps = {i: 600 + i // 4 for i in range(12)}

    program = looping_program(steps, nbytes)

    tensors = {"X": TensorSpec("X", (12, 602 * nbytes), 1, "input")}
    grid = tuple(CtaClass((range(c, c + 4),)) for c in range(0, 12, 4))
    kernel = Kernel("k", grid, (Buffer("A", (32 * 1024,), 1),), program, 128, stages)
    plan = Plan("toy", Problem(), hw, Tiles(1, 1), tensors, (kernel,))
    batches = transfer_batches(monkeypatch)
    fast = run_engine(plan, l2=False)
    assert fast.kernels[0].waves == 2
    assert len(batches) < 300  # of 2 x 600 + 602 steps, one batch a step and group
    assert fast.dram_read_bytes == sum(steps.values()) * nbytes
    assert_same_timing(fast, run_engine(plan, l2=False, exact=True))


@pytest.mark.parametrize("stages", [1, 2])
def test_no_round_is_skipped_while_an_ended_groups_last_store_takes_bandwidth(stages):
    """Two classes in one wave: four CTAs loop 20 times and end with a store that takes DRAM
    for longer than the others' remaining loop, four loop 400 times. While the store drains,
    the long group's steps repeat one another, each slower than alone; the GPU does not repeat
    (the store ends), so those rounds must be run, not skipped at the slower pace: the
    per-CTA replay's time."""
    hw, nbytes = toy_gpu(hbm_latency_s=3e-6), 1000
    steps = {i: 20 if i < 4 else 400 for i in range(8)}

    program = looping_program(steps, nbytes, lambda i: 200 * nbytes if i < 4 else nbytes)

    tensors = {
        "X": TensorSpec("X", (8, 400 * nbytes), 1, "input"),
        "Y": TensorSpec("Y", (8, 200 * nbytes), 1, "output"),
    }
    grid = (CtaClass((range(0, 4),)), CtaClass((range(4, 8),)))
    kernel = Kernel("k", grid, (Buffer("A", (32 * 1024,), 1),), program, 128, stages)
    plan = Plan("toy", Problem(), hw, Tiles(1, 1), tensors, (kernel,))
    fast = run_engine(plan, l2=False)
    assert fast.kernels[0].waves == 1
    assert_same_timing(fast, run_engine(plan, l2=False, exact=True))


@given(
    st.integers(1, 30_000),
    st.integers(1, 9_000),
    st.integers(1, 60_000),
    st.integers(0, 2**32 - 1),
)
def test_the_prefix_holding_the_cache_is_found_from_prefixes_alone(length, tiles, capacity, seed):
    """held_prefix reads growing prefixes of a stream: the same answer as its first touches
    over the whole stream, where the cache fills (within the first prefix or a later one) and
    where it never does."""
    from hbmsim.engine.l2.lockstep import _first_touches, _holding, held_prefix

    ids = np.random.default_rng(seed).integers(0, tiles, length)
    weighed = ids % 5 + 1
    assert held_prefix(ids, weighed, capacity) == _holding(_first_touches(ids), weighed, capacity)


@settings(max_examples=max(300, settings().max_examples))
@given(
    st.lists(st.tuples(st.integers(0, 12), st.sampled_from([OP_LOAD, OP_STORE])), max_size=200),
    st.integers(1, 40),
    st.randoms(),
    st.sampled_from([0, 10, 10_000]),
    st.sampled_from([1, 3, 16, 4096]),
)
def test_the_bulk_l2_test_matches_a_plain_lru(accesses, cap, rnd, budget, checkpoint):
    """Reuse-distance brackets, exact windows and the replay fallback: the plain LRU's hits."""
    from hbmsim.engine.l2.bulk import bulk_hits

    sizes = {k: rnd.randint(1, 12) for k in range(13)}
    ref = ReferenceLRU(cap)
    expected = [ref.access(k, sizes[k], op == OP_LOAD) for k, op in accesses]
    stream = (
        np.array([op for _, op in accesses], dtype=np.int64),
        np.array([k for k, _ in accesses], dtype=np.int64),
        np.array([sizes[k] for k, _ in accesses], dtype=np.int64),
    )
    # each access's previous touch, for the second form: the run heads' previous heads are
    # then read off the runs, not sorted for
    last, previous = {}, []
    for i, (k, _op) in enumerate(accesses):
        previous.append(last.get(k, -1))
        last[k] = i
    for touches in (None, np.array(previous, dtype=np.int64)):
        got = bulk_hits(*stream, cap, budget, checkpoint, previous=touches)
        if got is not None:  # None: over budget, the caller replays (checked above)
            assert got.tolist() == expected


@pytest.mark.parametrize("fresh", [0, 5])
@pytest.mark.parametrize("shuffled", [False, True])
def test_a_stream_cycling_through_more_than_the_cache_is_decided_without_counting_windows(
    fresh, shuffled
):
    """Tiles read over and over, the cycle twice the cache (with `fresh` tiles read once in
    each cycle, as each CTA's own query tile): the window bounds alone leave most accesses open
    (every tile was seen before), counting their windows would cost more than the budget, and
    the lower bounds from gaps (one order every cycle) or from the windows' last touches (the
    order shuffled in blocks of ten each cycle, so gaps vary) decide them: all miss, as the
    LRU says."""
    from hbmsim.engine.l2.bulk import bulk_hits

    rng = np.random.default_rng(7)
    cycles = []
    for c in range(40):
        order = np.arange(200)
        if shuffled:
            order = np.concatenate([a + rng.permutation(10) for a in range(0, 200, 10)])
        cycles += [order, 1000 + c * fresh + np.arange(fresh)]
    keys = np.concatenate(cycles)
    ops = np.full(len(keys), OP_LOAD, dtype=np.int64)
    sizes = np.full(len(keys), 4, dtype=np.int64)
    ref = ReferenceLRU(400)
    expected = [ref.access(int(k), 4, True) for k in keys]
    budget = 16 * len(keys)  # the gap bound's passes fit; the windows' counts (~200 each) do not
    got = bulk_hits(ops, keys, sizes, 400, budget, checkpoint=64)
    assert got is not None
    assert got.tolist() == expected
    assert not any(expected)


@pytest.mark.parametrize("tiles_held", [4 * 60 + 32, 4 * 60 - 40])
def test_waves_that_reread_a_few_tiles_are_decided_without_counting_windows(tiles_held):
    """Lockstep waves as causal classes make them: at each step every one of a wave's 40 CTAs
    reads step j's tile of its head (4 heads, so the same 4 tiles 10 times over), 60 steps,
    then the next wave reads them all again. A tile's reuse across waves spans a whole wave
    (2,400 accesses of 240 distinct tiles): every window bound leaves it open (far more
    accesses than the cache holds, every tile seen before), counting those windows is over the
    budget, and the block bounds decide them (off by at most twice a block's tiles): all hit
    when the cache holds the wave's 240 tiles and 32 more (from the window starts), all miss
    when it holds 40 fewer (from the window ends), as the LRU says."""
    from hbmsim.engine.l2.bulk import bulk_hits

    heads, steps, ctas, waves = 4, 60, 40, 6
    wave = [h * steps + j for j in range(steps) for h in [c % heads for c in range(ctas)]]
    keys = np.array(wave * waves, dtype=np.int64)
    ops = np.full(len(keys), OP_LOAD, dtype=np.int64)
    sizes = np.full(len(keys), 4, dtype=np.int64)
    ref = ReferenceLRU(4 * tiles_held)
    expected = [ref.access(int(k), 4, True) for k in keys]
    budget = 16 * len(keys)  # the block bounds fit; the windows' counts (2,400 each) do not
    got = bulk_hits(ops, keys, sizes, 4 * tiles_held, budget, checkpoint=64)
    assert got is not None
    assert got.tolist() == expected
    later = np.array(expected[len(wave) :])  # after the first wave, whose first reads miss
    first_reads = np.arange(len(later)) % ctas < heads  # a step's first read of each tile
    assert later[~first_reads].all()
    assert later[first_reads].all() == (tiles_held >= heads * steps)
    assert later[first_reads].any() == (tiles_held >= heads * steps)


@pytest.mark.parametrize(
    "algo, p, gpu",
    [
        (
            "standard",
            Problem(
                batch=2, heads=2, seq_q=256, seq_k=256, causal=True, dropout=0.1, pass_="fwd+bwd"
            ),
            "l4",
        ),
        (
            "fa2",
            Problem(batch=1, heads=4, seq_q=512, seq_k=512, causal=True, pass_="fwd+bwd"),
            "l4",
        ),
        ("fa2", Problem(batch=2, heads=4, seq_q=256, seq_k=1024), "h100-sxm"),
    ],
)
def test_the_bulk_l2_test_gives_the_replays_hits_on_real_workloads(algo, p, gpu):
    """Both engine paths take their hits from kernel_hits: its bulk answer is checked against
    the access-by-access LRU here, on L2s small enough that hits, misses and evictions mix."""
    from hbmsim.engine.l2.lru import kernel_hits
    from hbmsim.engine.workload.classkeys import from_plan_fast
    from hbmsim.gpu.occupancy import kernel_slots

    hw = get_hardware(gpu)
    kernels = from_plan_fast(make_plan(algo, p, hw)).kernels
    slots = [kernel_slots(hw, k) for k in kernels]
    for cap in (64 << 10, 1 << 20, hw.l2_bytes):
        bulk = kernel_hits(kernels, slots, cap)
        replay = kernel_hits(kernels, slots, cap, bulk=False)
        assert [b.tolist() for b in bulk] == [r.tolist() for r in replay]
        assert sum(int(b.sum()) for b in bulk) > 0


MIRRORS = IMPLS


@settings(max_examples=max(100, settings().max_examples), deadline=None)
@given(
    p=problems(max_seq=128, max_d=64, passes=ALL_PASSES),
    impl=st.sampled_from(MIRRORS),
    gpu=st.sampled_from(["l4", "a100-40gb", "h100-sxm"]),
    l2=st.booleans(),
)
def test_fast_path_agrees_with_the_per_cta_replay_on_the_library_mirrors(p, impl, gpu, l2):
    """The implementation mirrors too: fast path, per-CTA exact replay and trace replay agree."""
    try:
        plan = build_plan(p, get_hardware(gpu), impl=impl)
    except (ConfigError, SramOverflowError):
        assume(False)
    assume(count_plan(plan).trips <= MAX_AGREEMENT_TRIPS)
    fast, exact = run_engine(plan, l2=l2), run_engine(plan, l2=l2, exact=True)
    assert_same_timing(fast, exact)
    assert_same_timing(simulate_workload(from_trace(trace_plan(plan)), plan.hardware, l2=l2), exact)


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=50))
def test_tile_ids_are_equal_exactly_when_keys_are(pairs):
    """Packed, packed by extent, ranked or densely numbered (keys far apart force each way):
    same tile, same id."""
    from hbmsim.engine.l2.lru import tile_ids

    tile_like = [[a * (1 << 50) * 64 + a % 2, a * (1 << 50) + b] for a, b in pairs]  # packs
    for keys in [
        *(
            np.array([[a * s, b * s] for a, b in pairs], dtype=np.int64)
            for s in (1, 1 << 40, 1 << 61)
        ),
        np.array(tile_like, dtype=np.int64),  # by first element and extent
    ]:
        ids = tile_ids(keys).tolist()
        for x in range(len(pairs)):
            for y in range(len(pairs)):
                assert (ids[x] == ids[y]) == (pairs[x] == pairs[y])


# --- the engine's preparation of a template, against the loop it replaces -------------------


def _prepared_by_loop(ops, nbytes, work, stages):
    """prepare's rules one op at a time: consecutive computes are one step (times added in
    order); a load is issued once the computes `stages - 1` before its place have started, a
    store or atomic once those before it are done; a compute waits for the loads and atomics
    between the compute before it and itself."""
    comp_s, comp_rows, items = [], [], []
    for i, op in enumerate(ops):
        if op == OP_COMPUTE:
            if i and ops[i - 1] == OP_COMPUTE:
                comp_s[-1] += work[i]
            else:
                comp_s.append(work[i])
                comp_rows.append(i)
            continue
        done = len(comp_s)
        gate = max(0, done - (stages - 1)) if op == OP_LOAD else done
        items.append((gate, len(items), op, nbytes[i], i, done))
    items.sort()
    waits = [[] for _ in comp_s]
    for pos, it in enumerate(items):
        if it[2] != OP_STORE and it[5] < len(comp_s):
            waits[it[5]].append(pos)
    issued = [sum(1 for it in items if it[0] <= b) for b in range(len(comp_s) + 1)]
    return comp_s, comp_rows, items, waits, issued


def _repeats_by_loop(comp_s, waits, items, issued, hits):
    n, runs = len(comp_s), {}

    def sig(b):
        lo, hi = (issued[b - 1] if b else 0), issued[b]
        return (
            comp_s[b],
            tuple(i - lo for i in waits[b]),
            tuple((it[3], it[2]) for it in items[lo:hi]),
            tuple(hits[lo:hi]),
        )

    for k in range(1, MAX_PERIOD + 1):
        run = [0] * n
        for b in range(n - k - 1, -1, -1):
            if sig(b) == sig(b + k):
                run[b] = run[b + 1] + 1
        runs[k] = run
    return runs


@settings(max_examples=200, deadline=None)
@given(
    body=st.lists(
        st.tuples(st.sampled_from([OP_LOAD, OP_STORE, OP_ATOMIC, OP_COMPUTE]), st.integers(1, 3)),
        min_size=0,
        max_size=40,
    ),
    repeat=st.integers(1, 12),
    stages=st.integers(1, 3),
    data=st.data(),
)
def test_prepare_and_repeats_follow_the_one_op_at_a_time_rules(body, repeat, stages, data):
    """The array form of a template's preparation (issue order, gates, what each compute waits
    for, merged compute times) and of its repeated steps gives what the rules applied op by op
    give, on loops of random bodies with random hits."""
    from hbmsim.engine.workload.work import TEMPLATE_DTYPE

    ops = [op for op, _ in body] * repeat
    sizes = [s for _, s in body] * repeat
    if ops and data.draw(st.booleans()):  # one iteration's computes take longer
        r = data.draw(st.integers(0, repeat - 1))
        for i in range(r * len(body), (r + 1) * len(body)):
            sizes[i] += ops[i] == OP_COMPUTE
    tmpl = np.zeros(len(ops), TEMPLATE_DTYPE)
    tmpl["op"] = ops
    tmpl["bytes"] = [64 * s if op != OP_COMPUTE else 0 for op, s in zip(ops, sizes, strict=True)]
    tmpl["matmul_flops"] = [
        3 * s if op == OP_COMPUTE else 0 for op, s in zip(ops, sizes, strict=True)
    ]
    tmpl["vector_flops"] = [
        5 * s if op == OP_COMPUTE else 0 for op, s in zip(ops, sizes, strict=True)
    ]
    rates = (7.0, 11.0, 13.0)
    work = [(3 * s / 7.0 + 5 * s / 11.0 + 0 / 13.0) * 2 for s in sizes]
    got = prepare(tmpl, stages, rates, 2)
    comp_s, comp_rows, items, waits, issued = _prepared_by_loop(
        ops, tmpl["bytes"].tolist(), work, stages
    )
    assert list(got.comp_s) == comp_s and list(got.comp_rows) == comp_rows
    assert list(got.tr_gate) == [it[0] for it in items]
    assert got.order.tolist() == [it[1] for it in items]
    assert list(got.tr_op) == [it[2] for it in items]
    assert list(got.tr_bytes) == [it[3] for it in items]
    assert got.tr_rows.tolist() == [it[4] for it in items]
    assert [list(got.waits(c)) for c in range(len(comp_s))] == waits
    assert list(got.issued_at) == issued
    hits = data.draw(st.lists(st.integers(0, 2), min_size=len(items), max_size=len(items)))
    expected = _repeats_by_loop(comp_s, waits, items, issued, hits)
    repeats = Repeats(got, np.array(hits, dtype=np.int64))
    assert {k: repeats[k] for k in expected} == expected


@settings(max_examples=200)
@given(
    st.lists(
        st.lists(
            st.tuples(st.integers(0, 1 << 40), st.integers(0, 1 << 12)), min_size=0, max_size=8
        ),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from([0, 1 << 5, 1 << 20]),
)
def test_tile_ids_packed_part_by_part_are_those_of_the_whole(parts, scale):
    """joined_tile_ids (kernel by kernel, never holding the keys twice) gives equal ids to
    equal keys and only to them, and the ids all the keys at once would have, in each of its
    packings (the plain pair, the first element with the extent when the pair would overflow,
    a dense numbering)."""
    from hbmsim.engine.l2.lru import joined_tile_ids

    arrays = []
    for part in parts:
        k = np.array(part, dtype=np.int64).reshape(-1, 2)
        k[:, 0] *= 1 + scale  # large first elements push the plain pair past 64 bits
        k[:, 1] += k[:, 0] >> 6  # a key's last element lies a tile's extent past its first
        arrays.append(k)
    whole = np.concatenate(arrays)
    got = joined_tile_ids(list(arrays))
    assert len(got) == len(whole)
    by_key: dict[tuple, set] = {}
    for key, i in zip(map(tuple, whole.tolist()), got.tolist(), strict=True):
        by_key.setdefault(key, set()).add(i)
    assert all(len(ids) == 1 for ids in by_key.values())  # equal keys: one id
    assert len({min(ids) for ids in by_key.values()}) == len(by_key)  # other keys: other ids
    assert got.tolist() == joined_tile_ids([whole]).tolist()


@settings(max_examples=max(300, settings().max_examples), deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(
                st.tuples(st.integers(0, 12), st.sampled_from([OP_LOAD, OP_STORE])),
                min_size=1,
                max_size=6,
            ),
            st.integers(1, 12),
        ),
        min_size=1,
        max_size=12,
    ),
    st.integers(1, 40),
    st.randoms(),
)
def test_cutting_repeated_stretches_keeps_the_lru_answer(segments, cap, rnd):
    """A stream of patterns each repeated a few times (a wave's CTAs stepping through the same
    tiles), cut where a pattern repeats and fits (lru._repeats_cut) and then decided in bulk:
    the plain LRU's hits, every access, whether or not the pattern fits."""
    from hbmsim.engine.l2 import lru as l2

    accesses = [a for pattern, times in segments for a in pattern * times]
    sizes = {k: rnd.randint(1, 12) for k in range(13)}
    ref = ReferenceLRU(cap)
    expected = [ref.access(k, sizes[k], op == OP_LOAD) for k, op in accesses]
    ops = np.array([op for _, op in accesses], dtype=np.int64)
    ids = np.array([k for k, _ in accesses], dtype=np.int64)
    nbytes = np.array([sizes[k] for k in ids.tolist()], dtype=np.int64)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(l2, "REPEAT_MIN_STREAM", 0)
        mp.setattr(l2, "REPEAT_MAX_PERIOD", 6)
        mp.setattr(l2, "REPEAT_MIN_SHARE", 0.0)
        got = l2.lru_answer(ops, ids, nbytes, cap)
    assert got.tolist() == expected


def test_a_wave_rereading_a_few_tiles_is_cut_to_its_first_and_last_rows(monkeypatch):
    """Rows as a causal kernel's waves make them (4 heads' tiles, each read by 25 CTAs in
    turn, one row per step): all but the first and last 4 accesses of each row are cut before
    the bulk test, and the answers are the plain LRU's."""
    from hbmsim.engine.l2 import lru as l2

    rows = [np.tile(np.arange(4) + 4 * (step % 50), 25) for step in range(200)]
    ids = np.concatenate(rows).astype(np.int64)
    ops = np.full(len(ids), OP_LOAD, dtype=np.int64)
    sizes = np.full(len(ids), 3, dtype=np.int64)
    keep = l2._repeats_cut(ids, sizes, 300)
    assert keep is None  # shorter than a stream worth cutting
    monkeypatch.setattr(l2, "REPEAT_MIN_STREAM", 0)
    keep = l2._repeats_cut(ids, sizes, 300)
    assert keep is not None and keep.sum() == 8 * len(rows)
    for cap in (300, 10):  # the pattern fits, and does not (nothing cut)
        ref = ReferenceLRU(cap)
        expected = [ref.access(int(k), 3, True) for k in ids.tolist()]
        assert l2.lru_answer(ops, ids, sizes, cap).tolist() == expected


@settings(max_examples=200, deadline=None)
@given(
    cuts=st.lists(st.lists(st.integers(1, 6), min_size=1, max_size=3), min_size=2, max_size=4),
    data=st.data(),
)
def test_launch_runs_from_the_classes_boxes_match_sorting_every_cta(cuts, data):
    """A grid cut into boxes (classes) along each axis, launched in any axis order: the runs
    of classes the work bound reads from the boxes are those of every CTA sorted into launch
    order (plan.launch_sequence) and read class by class."""
    import itertools
    from types import SimpleNamespace

    from hbmsim.program.launch_runs import class_runs
    from hbmsim.program.plan import CtaClass, launch_sequence

    spans = []  # per axis: consecutive intervals of the given lengths
    for lengths in cuts:
        edges = [0, *itertools.accumulate(lengths)]
        spans.append([range(a, b) for a, b in zip(edges, edges[1:], strict=False)])
    grid = tuple(CtaClass(tuple(box)) for box in itertools.product(*spans))
    order = tuple(data.draw(st.permutations(range(len(cuts)))))
    kernel = SimpleNamespace(grid=grid, launch_order=order)
    where = {cta: i for i, cls in enumerate(grid) for cta in cls}
    expected: list[list[int]] = []
    for cta in launch_sequence(kernel):
        if expected and expected[-1][0] == where[cta]:
            expected[-1][1] += 1
        else:
            expected.append([where[cta], 1])
    assert class_runs(grid, order, 10**6) == [tuple(r) for r in expected]
    assert class_runs(grid, order, len(expected) - 1) is None


@pytest.mark.parametrize(
    "impl, p, words",
    [
        (  # 1.07e8 CTAs in launch order, about as many groups: walked only to the bound
            "flash-attn-3",
            Problem(batch=64, heads=64, seq_q=1_000_000, seq_k=1_000_000, head_dim=64),
            "more than 2,000,000 simulation steps",
        ),
        (  # 6.4e7 CTAs of one class: the run stream's arrays alone would pass the budget
            "flash-decoding",
            Problem(batch=64, heads=64, seq_q=1_000_000, seq_k=1_000_000, head_dim=64),
            "the L2 model would decide",
        ),
    ],
)
def test_problems_of_a_hundred_million_ctas_get_the_engines_estimate_not_its_work(impl, p, words):
    """The largest problems the counts accept are answered with the engine's one-line estimate
    of why it does not time them (what to change included), reached from the classes, not by
    laying out every CTA: the counts stand beside it."""
    r = simulate(p, get_hardware("h100-sxm"), impl=impl)
    skipped = r.extra["engine"]["skipped"]
    assert words in skipped
    assert "smaller problem" in skipped or "fewer heads" in skipped
    assert r.hbm_read_bytes > 0 and "time_s" not in r.extra
