"""Exact counting vs tracing every op and summing, side by side in one run.

    python bench/counts.py            # prints a table; ratios are what to compare across runs

Both paths give identical totals (tests/test_counts.py checks that); this measures what the
CTA classes and loop segments save. Absolute times drift with the machine; ratios measured in
the same run are the figure to quote.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hbmsim import Problem, count_plan, get_hardware, make_plan, trace_plan  # noqa: E402
from hbmsim.fmt import table  # noqa: E402

CASES = [  # (algo, seq, causal): tracing cost grows as seq^2 for standard and causal flash
    ("fa2", 1024, False),
    ("fa2", 4096, False),
    ("fa2", 4096, True),
    ("fa2", 16384, False),
    ("fa1", 4096, False),
    ("fa1", 16384, True),
    ("standard", 1024, False),
    ("standard", 2048, True),
]


def best_of(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    hw = get_hardware("h100-sxm")
    rows = []
    for algo, seq, causal in CASES:
        plan = make_plan(algo, Problem(batch=1, heads=4, seq_q=seq, seq_k=seq, causal=causal), hw)
        counted = count_plan(plan)
        t_count = best_of(lambda plan=plan: count_plan(plan))
        t_trace = best_of(lambda plan=plan: trace_plan(plan).totals(), repeats=1)
        rows.append(
            [
                f"{algo} seq {seq}{' causal' if causal else ''}",
                f"{counted.ops:,}",
                f"{t_count * 1e3:.2f} ms",
                f"{t_trace * 1e3:.0f} ms",
                f"{t_trace / t_count:,.0f}x",
            ]
        )
    print("batch 1, heads 4, head_dim 64, fp16, h100-sxm, default tiles")
    print(table(["case", "ops in trace", "count", "trace+sum", "trace/count"], rows))


if __name__ == "__main__":
    main()
