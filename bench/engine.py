"""Engine speed, measured side by side in one run.

    python bench/engine.py

1. Full per-op replay (every CTA its own SimPy process, accesses from a full trace) vs the fast
   path (CTAs launched together simulated once, accesses extrapolated per CTA class), for
   several sizes: the ratio, and the predicted times side by side (they must agree).
2. The fast path alone on the FlashAttention paper's configuration (A100 40GB, batch 64,
   heads 16, seq 1024, head dim 64, fp16; standard and fa2) and on a 65,536-token single-head
   run (target: under 2 s each on one core of the 2-core development machine).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hbmsim import Problem, get_hardware, make_plan  # noqa: E402
from hbmsim.engine import run_engine  # noqa: E402
from hbmsim.fmt import seconds, table  # noqa: E402


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def main() -> None:
    h100 = get_hardware("h100-sxm")
    rows = []
    for algo, p in [
        ("fa2", Problem(batch=1, heads=4, seq_q=1024, seq_k=1024)),
        ("fa2", Problem(batch=1, heads=8, seq_q=4096, seq_k=4096)),
        ("fa2", Problem(batch=1, heads=8, seq_q=4096, seq_k=4096, causal=True)),
        ("fa1", Problem(batch=2, heads=8, seq_q=4096, seq_k=4096)),
        ("standard", Problem(batch=1, heads=4, seq_q=1024, seq_k=1024)),
        ("standard", Problem(batch=1, heads=4, seq_q=2048, seq_k=2048, causal=True)),
    ]:
        plan = make_plan(algo, p, h100)
        fast, t_fast = timed(lambda plan=plan: run_engine(plan))
        exact, t_exact = timed(lambda plan=plan: run_engine(plan, exact=True))
        label = f"{algo} b{p.batch} h{p.heads} seq {p.seq_q}" + (" causal" if p.causal else "")
        rows.append(
            [
                label,
                f"{t_exact:.2f} s",
                f"{t_fast:.3f} s",
                f"{t_exact / t_fast:.0f}x",
                seconds(exact.time_s),
                seconds(fast.time_s),
                f"{abs(fast.time_s / exact.time_s - 1):.1e}",
            ]
        )
    print("full per-op replay vs fast path (h100-sxm, head dim 64, fp16)")
    print(
        table(
            ["case", "exact", "fast", "speed-up", "exact predicts", "fast predicts", "rel. diff"],
            rows,
        )
    )
    print()
    a100 = get_hardware("a100-40gb")
    rows = []
    for algo, p, hw in [
        ("standard", Problem(batch=64, heads=16, seq_q=1024, seq_k=1024), a100),
        ("fa2", Problem(batch=64, heads=16, seq_q=1024, seq_k=1024), a100),
        ("fa2", Problem(batch=1, heads=1, seq_q=65536, seq_k=65536), a100),
        ("fa2", Problem(batch=1, heads=1, seq_q=65536, seq_k=65536), h100),
    ]:
        plan = make_plan(algo, p, hw)
        result, wall = timed(lambda plan=plan: run_engine(plan))
        rows.append(
            [
                f"{algo} b{p.batch} h{p.heads} seq {p.seq_q} on {hw.name}",
                f"{wall:.2f} s",
                seconds(result.time_s),
            ]
        )
    print("fast path at scale (target: under 2 s each)")
    print(table(["case", "wall time", "predicted"], rows))


if __name__ == "__main__":
    main()
