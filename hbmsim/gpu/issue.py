"""How busy a warp scheduler is with few warps: an in-order issue model of one SM partition.

Why: an SM issues one warp instruction per scheduler per clock only while some warp has an
instruction it may issue. A warp waits the cycles the compiler put after each instruction
(its stall count) and, after a variable-latency instruction (a shared or global load, an
exp), until the result's scoreboard is released; so a scheduler with one to three warps
idles for part of the cycles (Nsight Compute saw the scalar kernels' schedulers 49-71% busy
on the H200). Since Volta the compiler encodes this in each instruction's control bits: a
4-bit stall count, a yield bit, a write and a read scoreboard barrier and a 6-bit mask of
barriers to wait on (Jia et al., "Dissecting the NVIDIA Volta GPU Architecture via
Microbenchmarking", arXiv:1804.06826, Sec. 2.1); kernels/sass_mix.py reads them from the
SASS with the instructions.

This replays a loop body on one scheduler holding `warps` warps: each cycle the scheduler
issues the next instruction of the warp it issued last if that one may issue, else of the
oldest warp that may (greedy-then-oldest). An instruction may issue when its warp's previous
stall count has passed, every barrier in its wait mask is released, and its pipe has taken
the previous instruction of its kind (`PIPES`: cycles between two warp instructions of one
pipe on one partition). The classic analytical form of the idea is Hong and Kim's MWP/CWP
model (ISCA 2009); this runs the kernel's own schedule instead of averaging it.

Latencies of the variable-latency results and pipe rates are Hopper's (sm_90), each with its
source in `LATENCY` and `PIPES`; a number no study measured on Hopper is marked as a guess
with the range that matters.
"""

from __future__ import annotations

from dataclasses import dataclass

# Cycles from issue until a variable-latency result's scoreboard barrier is released (fixed
# latencies are the compiler's stall counts and need no table).
LATENCY = {
    # shared-memory load to use: 29 cycles on Hopper (Luo et al., "Benchmarking and
    # Dissecting the Nvidia Hopper GPU Architecture", arXiv:2402.13499, memory latency
    # table; 23 on Turing in Jia et al. arXiv:1903.07486). Results move little from 23 to 33.
    "shared": 29,
    # special-function unit (MUFU.EX2, RCP): guess 18, range 14-23 (Jia et al. measure the
    # MUFU ops of Volta and Turing in that range); the kernels issue one per 64+ FMAs.
    "mufu": 18,
    # global loads: an L2 hit, 260 cycles (Luo et al. arXiv:2402.13499, L2 latency on H800);
    # the loops this replays (the products) have none, copies are counted as issue only.
    "global": 260,
    # special registers (S2R, S2UR), conversions through the MIO: guess 20, range 10-30;
    # outside the products' steady state.
    "special": 20,
    # a store's or a read-barrier's source registers read: guess 4, range 2-8
    "read": 4,
}

# Cycles one partition's pipe is taken by one warp instruction (32 threads), from the
# instruction throughputs per SM per clock for compute capability 9.0 in the CUDA C++
# Programming Guide ("Arithmetic Instructions", throughput table), over 4 partitions:
PIPES = {
    "fma": 1,  # FP32 add, multiply, FMA: 128 per SM per clock; FP16x2 (HADD2, HFMA2): 256
    # half rate on the FMA pipe: IMAD (64 per SM per clock) and fp16 to fp32 conversions
    # (HADD2.F32), which the compiler spaces two cycles apart in a warp's own schedule (their
    # stall counts); taken as sharing the FP32 datapaths with FFMA
    "fma_half": 2,
    "alu": 2,  # 32-bit integer add, logic, shift, compare, min/max: 64 per SM per clock
    "mufu": 8,  # special functions (exp2, rcp): 16 per SM per clock
    "convert": 8,  # type conversions to and from 32-bit types (F2F, I2F): 16 per SM per clock
    # shared memory: 32 banks x 4 bytes per clock per SM [CUDA-CC], one 128-byte wavefront
    # per clock shared by the 4 partitions, at least one wavefront per warp access
    "shared": 4,
    "uniform": 1,  # the uniform datapath (UIADD3, ULEA, ...): its own pipe, one per clock
    "branch": 1,
}
# pipes that share hardware: an instruction of the first takes the second for its cycles too
SHARED_PIPES = {"fma_half": "fma"}


@dataclass(frozen=True)
class Instr:
    """One instruction of a loop body as the scheduler sees it: its pipe, the cycles its warp
    waits before its next instruction (stall count), the scoreboard barriers it waits on
    (a 6-bit mask), the barrier it sets for its result (write) and for its source registers
    (read), -1 for none, and the latency class that releases the write barrier."""

    pipe: str
    stall: int = 1
    wait_mask: int = 0
    write_barrier: int = -1
    read_barrier: int = -1
    latency: str = "shared"


def cycles_per_iteration(body: list[Instr], warps: int, iterations: int = 6) -> float:
    """Cycles one scheduler takes to run one iteration of `body` in each of `warps` warps, in
    steady state: the time for `iterations` iterations minus the time for 2, over the
    difference (the first iterations' start-up cancels)."""
    if warps < 1:
        raise ValueError("warps must be at least 1")
    if not body:
        return 0.0
    lo = _run(body, warps, 2)
    hi = _run(body, warps, iterations)
    return (hi - lo) / (iterations - 2)


def busy_fraction(body: list[Instr], warps: int) -> float:
    """Fraction of the scheduler's cycles that issue an instruction of `body`."""
    return warps * len(body) / cycles_per_iteration(body, warps)


def _run(body: list[Instr], warps: int, iterations: int) -> int:
    """Cycles until every warp has run `iterations` iterations (greedy-then-oldest issue)."""
    n = len(body)
    names = sorted(set(PIPES))
    pipe_of = [names.index(i.pipe) for i in body]
    also = [names.index(SHARED_PIPES[i.pipe]) if i.pipe in SHARED_PIPES else -1 for i in body]
    interval = [PIPES[i.pipe] for i in body]
    stall = [max(1, i.stall) for i in body]
    masks = [[b for b in range(6) if i.wait_mask >> b & 1] for i in body]
    wbar = [i.write_barrier for i in body]
    rbar = [i.read_barrier for i in body]
    lat = [LATENCY[i.latency] for i in body]
    read_lat = LATENCY["read"]
    pipe_free = [0] * len(names)
    release = [[0] * 6 for _ in range(warps)]  # each warp's scoreboard barriers
    next_at = [0] * warps  # each warp's earliest next issue (its last stall count)
    pc = [0] * warps
    left = [iterations * n] * warps  # instructions each warp still has to issue
    t, last, done = 0, 0, 0
    while done < warps:
        issued = False
        earliest = None
        for k in range(warps):
            w = last if k == 0 else (k - 1 if k - 1 < last else k)
            if not left[w]:
                continue
            i = pc[w]
            at = next_at[w]
            p = pipe_of[i]
            if pipe_free[p] > at:
                at = pipe_free[p]
            if also[i] >= 0 and pipe_free[also[i]] > at:
                at = pipe_free[also[i]]
            rel = release[w]
            for b in masks[i]:
                if rel[b] > at:
                    at = rel[b]
            if at <= t:
                pipe_free[p] = t + interval[i]
                if also[i] >= 0:
                    pipe_free[also[i]] = t + interval[i]
                if wbar[i] >= 0:
                    rel[wbar[i]] = t + lat[i]
                if rbar[i] >= 0:
                    rel[rbar[i]] = max(rel[rbar[i]], t + read_lat)
                next_at[w] = t + stall[i]
                pc[w] = i + 1 if i + 1 < n else 0
                left[w] -= 1
                if not left[w]:
                    done += 1
                last = w
                issued = True
                break
            if earliest is None or at < earliest:
                earliest = at
        if issued:
            t += 1
        elif earliest is not None:
            t = max(t + 1, earliest)
    return t
