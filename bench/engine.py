"""Engine speed, measured side by side in one run.

    python bench/engine.py

1. Full per-op replay (every CTA its own SimPy process, accesses from a full trace) vs the fast
   path (CTAs launched together simulated once, accesses extrapolated per CTA class), for
   several sizes and two library mirrors: the ratio, and the predicted times side by side
   (they must agree).
2. The fast path at scale: the FlashAttention paper's configuration (A100 40GB, batch 64,
   heads 16, seq 1024, standard causal + dropout, fwd+bwd), fa2 causal at 16k tokens x 16
   heads, the slowest published mirror point, and seq 1,048,576. Per case: building the
   per-access arrays, the L2 hit test in bulk next to the access-by-access LRU replay it
   replaces (same hits, checked), and the whole call.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hbmsim import Problem, get_hardware  # noqa: E402
from hbmsim.api import build_plan  # noqa: E402
from hbmsim.engine import occupancy, run_engine  # noqa: E402
from hbmsim.errors import TooLargeToExecuteError  # noqa: E402
from hbmsim.fmt import seconds, table  # noqa: E402
from hbmsim.l2 import kernel_hits  # noqa: E402
from hbmsim.workload import from_plan_fast  # noqa: E402


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def label(what, p, hw=None):
    out = f"{what} b{p.batch} h{p.heads} seq {p.seq_q}"
    out += " causal" if p.causal else ""
    out += " dropout" if p.dropout else ""
    out += f" {p.pass_}" if p.pass_ != "fwd" else ""
    return out + (f" on {hw.name}" if hw else "")


def exact_vs_fast() -> None:
    h100, a100 = get_hardware("h100-sxm"), get_hardware("a100-40gb")
    rows = []
    for what, p, hw, impl in [
        ("fa2", Problem(batch=1, heads=4, seq_q=1024, seq_k=1024), h100, None),
        ("fa2", Problem(batch=1, heads=8, seq_q=4096, seq_k=4096), h100, None),
        ("fa2", Problem(batch=1, heads=8, seq_q=4096, seq_k=4096, causal=True), h100, None),
        ("fa1", Problem(batch=2, heads=8, seq_q=4096, seq_k=4096), h100, None),
        ("standard", Problem(batch=1, heads=4, seq_q=1024, seq_k=1024), h100, None),
        ("standard", Problem(batch=1, heads=4, seq_q=2048, seq_k=2048, causal=True), h100, None),
        (
            "flash-attn-1",
            Problem(batch=1, heads=4, seq_q=2048, seq_k=2048, pass_="fwd+bwd"),
            a100,
            1,
        ),
        (
            "torch-eager",
            Problem(batch=2, heads=4, seq_q=512, seq_k=512, causal=True, pass_="fwd+bwd"),
            a100,
            1,
        ),
    ]:
        plan = build_plan(p, hw, None if impl else what, what if impl else None)
        fast, t_fast = timed(lambda plan=plan: run_engine(plan))
        exact, t_exact = timed(lambda plan=plan: run_engine(plan, exact=True))
        rows.append(
            [
                label(what, p, hw),
                f"{t_exact:.2f} s",
                f"{t_fast:.3f} s",
                f"{t_exact / t_fast:.0f}x",
                seconds(exact.time_s),
                seconds(fast.time_s),
                f"{abs(fast.time_s / exact.time_s - 1):.1e}",
            ]
        )
    print("full per-op replay vs fast path (head dim 64, fp16)")
    print(
        table(
            ["case", "exact", "fast", "speed-up", "exact predicts", "fast predicts", "rel. diff"],
            rows,
        )
    )


def at_scale() -> None:
    h100, a100 = get_hardware("h100-sxm"), get_hardware("a100-40gb")
    rows = []
    for what, p, hw, impl in [
        (
            "standard",
            Problem(
                batch=64,
                heads=16,
                seq_q=1024,
                seq_k=1024,
                causal=True,
                dropout=0.1,
                pass_="fwd+bwd",
            ),
            a100,
            None,
        ),
        ("fa2", Problem(batch=64, heads=16, seq_q=1024, seq_k=1024), a100, None),
        ("fa2", Problem(batch=1, heads=16, seq_q=16384, seq_k=16384, causal=True), h100, None),
        (
            "flash-attn-1",
            Problem(batch=2, heads=8, seq_q=8192, seq_k=8192, pass_="fwd+bwd"),
            a100,
            1,
        ),
        ("fa2", Problem(batch=1, heads=16, seq_q=1 << 20, seq_k=1 << 20), h100, None),
    ]:
        plan = build_plan(p, hw, None if impl else what, what if impl else None)
        name = label(what, p, hw)
        try:
            result, total = timed(lambda plan=plan: run_engine(plan))
        except TooLargeToExecuteError as exc:
            rows.append([name, "-", "-", "-", "-", "-", str(exc)[:60] + "..."])
            continue
        work, build = timed(lambda plan=plan: from_plan_fast(plan))
        slots = [
            hw.sm_count
            * occupancy(hw, k.sram_bytes, k.threads_per_cta, k.name, k.registers_per_thread)
            for k in work.kernels
        ]
        bulk, t_bulk = timed(lambda a=(work.kernels, slots, hw.l2_bytes): kernel_hits(*a))
        replay, t_replay = timed(
            lambda a=(work.kernels, slots, hw.l2_bytes): kernel_hits(*a, bulk=False)
        )
        same = all((a == b).all() for a, b in zip(bulk, replay, strict=True))
        rows.append(
            [
                name,
                f"{build:.2f} s",
                f"{t_bulk:.2f} s",
                f"{t_replay:.2f} s",
                f"{t_replay / t_bulk:.1f}x" + ("" if same else " DIFFER"),
                f"{total:.2f} s",
                seconds(result.time_s),
            ]
        )
    print("fast path at scale")
    print(
        table(
            ["case", "build", "L2 bulk", "L2 replay", "replay/bulk", "whole call", "predicted"],
            rows,
        )
    )


def main() -> None:
    exact_vs_fast()
    print()
    at_scale()


if __name__ == "__main__":
    main()
