"""How busy a warp scheduler is with few warps: an in-order issue model of one SM partition.

Why: an SM issues one warp instruction per scheduler per clock only while some warp has an
instruction whose operands are ready. A warp waits for the result of the instruction it
depends on (4 cycles after an FFMA, about 30 after a shared-memory load), so a scheduler with
one to three warps idles for part of the cycles (Nsight Compute saw the scalar kernels'
schedulers 49-71% busy on the H200). This replays a loop body, given as the compiled
instructions (kernels/sass_mix.py reads them from the SASS), on one scheduler holding `warps`
warps: each cycle the scheduler issues the next instruction of the warp it issued last if
that one is ready, else of the oldest ready warp (greedy-then-oldest), and an instruction is
ready when every source register has been written (issue time plus the producer's latency)
and its pipe has taken the previous instruction of its kind (`PIPES`: cycles between two warp
instructions of one pipe on one partition). The classic analytical form of the same idea is
Hong and Kim's MWP/CWP model (ISCA 2009); this runs the dependency chains instead of
averaging them.

Latencies and pipe rates are Hopper's (sm_90), each with its source in `LATENCY` and
`PIPES`; a number no study measured on Hopper is marked as a guess with the range that
matters.
"""

from __future__ import annotations

from dataclasses import dataclass

# Cycles from issue until a dependent instruction may issue (register result latency).
LATENCY = {
    # FP32, FP16x2, integer and logic ops: 4 cycles dependent (Jia et al., "Dissecting the
    # NVIDIA Volta GPU Architecture via Microbenchmarking", arXiv:1804.06826, Table 4.1;
    # Abdelkhalik et al., "Demystifying the Nvidia Ampere Architecture through
    # Microbenchmarking and Instruction-level Analysis", arXiv:2208.11174: add.f32 4 cycles
    # dependent). Hopper keeps the 4-cycle FP32 pipe (Luo et al., "Benchmarking and
    # Dissecting the Nvidia Hopper GPU Architecture", arXiv:2402.13499, Sec. IV).
    "alu": 4,
    # shared-memory load to use: 29 cycles on Hopper (Luo et al. arXiv:2402.13499, memory
    # latency table: shared memory; 23 on Turing in Jia et al. arXiv:1903.07486). The result
    # moves little between 23 and 33.
    "shared": 29,
    # special-function unit (MUFU.EX2, RCP): guess 18, range 14-23 (Jia et al. 2018 measure
    # the MUFU ops on Volta in this range); the kernels issue one per 64+ FMAs.
    "mufu": 18,
    # type conversions (F2F, I2F, F2I): guess 6, range 4-8; rare in the loops counted.
    "convert": 6,
    # global loads: an L2 hit, 260 cycles (Luo et al. arXiv:2402.13499, L2 latency on H800);
    # the loops this replays (the products) have none, copies are counted as issue only.
    "global": 260,
    # special registers (S2R) and constants (LDC): guess 20, range 10-30; outside the products.
    "special": 20,
}

# Cycles one partition's pipe is taken by one warp instruction (32 threads), from the
# instruction throughputs per SM per clock for compute capability 9.0 in the CUDA C++
# Programming Guide ("Arithmetic Instructions", throughput table), over 4 partitions:
PIPES = {
    "fma": 1,  # FP32 add, multiply, FMA: 128 per SM per clock; FP16x2 (HADD2, HFMA2): 256
    "alu": 2,  # 32-bit integer add, logic, shift, compare, min/max, IMAD: 64 per SM per clock
    "mufu": 8,  # special functions (exp2, rcp): 16 per SM per clock
    "convert": 8,  # type conversions to and from 32-bit types: 16 per SM per clock
    # shared memory: 32 banks x 4 bytes per clock per SM [CUDA-CC], one 128-byte wavefront
    # per clock shared by the 4 partitions, at least one wavefront per warp access
    "shared": 4,
    "uniform": 1,  # the uniform datapath (UIADD3, ULEA, ...): its own pipe, one per clock
    "branch": 1,
}


@dataclass(frozen=True)
class Instr:
    """One instruction of a loop body: the pipe it issues to, its result latency class, the
    registers it writes and the registers it reads (ids, any numbering)."""

    pipe: str
    latency: str
    dests: tuple[int, ...]
    srcs: tuple[int, ...]


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
    pipe_names = sorted({i.pipe for i in body})
    pipe_of = [pipe_names.index(i.pipe) for i in body]
    interval = [PIPES[i.pipe] for i in body]
    lat = [LATENCY[i.latency] for i in body]
    srcs = [i.srcs for i in body]
    dests = [i.dests for i in body]
    pipe_free = [0] * len(pipe_names)
    ready: list[dict[int, int]] = [{} for _ in range(warps)]
    pc = [0] * warps
    left = [iterations * n] * warps  # instructions each warp still has to issue
    t, last, done = 0, 0, 0
    while done < warps:
        issued = False
        earliest = None
        for k in range(warps):
            w = (last + k) % warps if k == 0 else (k - 1 if k - 1 < last else k)
            if not left[w]:
                continue
            i = pc[w]
            r = ready[w]
            at = pipe_free[pipe_of[i]]
            for s in srcs[i]:
                v = r.get(s, 0)
                if v > at:
                    at = v
            if at <= t:
                pipe_free[pipe_of[i]] = t + interval[i]
                for d in dests[i]:
                    r[d] = t + lat[i]
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
