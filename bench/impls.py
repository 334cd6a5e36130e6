"""Library mirrors next to the textbook program, measured side by side in one run.

    python bench/impls.py

The implementation mirrors (`--impl`) should take about as long to simulate as the textbook
`--algo` programs of the same size. For each problem (an H100, fp16 unless said), the whole
`hbmsim simulate` call (counts, then the engine) of `fa2`, `flash-attn-2` and `flash-attn-3`,
alternated over REPEATS rounds (the machine's speed drifts; the median of each is printed),
and each mirror's time over fa2's: FlashAttention-3's kernel is warp-specialised (per-step
pipe overlap) and, at head dim 128 without a mask, runs clusters of two CTAs sharing K/V by
multicast, which the engine handles in the same fast path.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hbmsim import Problem, get_hardware  # noqa: E402
from hbmsim.api import simulate  # noqa: E402
from hbmsim.fmt import seconds, table  # noqa: E402

REPEATS = 3
WHO = (("fa2", None), (None, "flash-attn-2"), (None, "flash-attn-3"))
CASES = [
    ("d64, 32 heads, 16k", dict(heads=32, seq_q=16384, seq_k=16384, head_dim=64)),
    ("d128, 16 heads, 8k (FA3: clusters)", dict(heads=16, seq_q=8192, seq_k=8192, head_dim=128)),
    (
        "d128 causal, 16 heads, 16k",
        dict(heads=16, seq_q=16384, seq_k=16384, head_dim=128, causal=True),
    ),
    ("d64, batch 32 x 32 heads, 512", dict(batch=32, heads=32, seq_q=512, seq_k=512, head_dim=64)),
    (
        "d128 causal, batch 4 x 32 heads, 4k",
        dict(batch=4, heads=32, seq_q=4096, seq_k=4096, head_dim=128, causal=True),
    ),
]


def main() -> None:
    hw = get_hardware("h100-sxm")
    rows = []
    for name, fields in CASES:
        p = Problem(**fields)
        took: dict[int, list[float]] = {i: [] for i in range(len(WHO))}
        predicted = {}
        for _ in range(REPEATS):
            for i, (algo, impl) in enumerate(WHO):
                t = time.perf_counter()
                r = simulate(p, hw, algo, impl=impl)
                took[i].append(time.perf_counter() - t)
                predicted[i] = r.extra.get("time_s")
        med = [statistics.median(took[i]) for i in range(len(WHO))]
        rows.append(
            [name]
            + [f"{m:.2f} s" for m in med]
            + [f"{med[1] / med[0]:.2f}x", f"{med[2] / med[0]:.2f}x"]
            + [seconds(predicted[i]) if predicted[i] else "-" for i in range(len(WHO))]
        )
    print(f"whole simulate call, median of {REPEATS} alternated rounds, h100-sxm, fp16")
    print(
        table(
            [
                "problem",
                "fa2",
                "flash-attn-2",
                "flash-attn-3",
                "fa-2 / fa2",
                "fa-3 / fa2",
                "predicted fa2",
                "fa-2",
                "fa-3",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
