"""How the cost of a timed `hbmsim simulate` grows with the problem, implementation by
implementation, and how far the fast path departs from the exact replay where both run.

    python bench/scale.py            # every table (tens of minutes on two cores)
    python bench/scale.py --quick    # fewer points per table

Each point is one `python -m hbmsim.cli simulate ... --json` process: its wall time and peak
resident memory (the start-up's included), the engine's path (replayed, stretched kernels, or
skipped with the reason) and the simulated time. Two tables per implementation: the sequence
length from 1k to 1M tokens at 16 heads, and batch x heads from 1 to 4,096 at 4k tokens (a
1M-token sequence or 4,096 instances is what the counts accept; whatever the engine still
refuses is printed with its reason, never dropped). The last table puts the fast path (the
kernels stretched past the replay's bound, `engine_choice`'s third tier, forced here) next
to the exact replay on problems small enough to replay: the departure per implementation and
pass. Absolute times drift with the machine; the figures to compare across runs are the
shape of each row (flat or growing) and the departures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hbmsim import Problem, get_hardware  # noqa: E402
from hbmsim.api import build_plan  # noqa: E402
from hbmsim.engine.simulation import simulate_workload  # noqa: E402
from hbmsim.engine.workload.classkeys import from_plan_fast  # noqa: E402
from hbmsim.fmt import bytes_, seconds, table  # noqa: E402

PROGRAMS = [  # (name, CLI flags): every library mirror and the textbook fa2 and standard
    ("fa2", ["--algo", "fa2"]),
    ("standard", ["--algo", "standard"]),
    ("torch-eager", ["--impl", "torch-eager"]),
    ("flash-attn-1", ["--impl", "flash-attn-1"]),
    ("flash-attn-2", ["--impl", "flash-attn-2"]),
    ("flash-attn-3", ["--impl", "flash-attn-3"]),
]
SEQS = [1024, 4096, 16384, 65536, 262144, 1048576]
INSTANCES = [(1, 1), (1, 16), (4, 64), (16, 64), (64, 64)]  # (batch, heads): 1 to 4,096
QUICK_SEQS = [1024, 16384, 262144]
QUICK_INSTANCES = [(1, 1), (4, 64), (64, 64)]
LIMIT_S = 300  # a point still running after this is stopped and printed as such


def one_call(flags: list[str]) -> dict:
    """Wall time and the engine's outcome of one CLI call (its peak memory: `measured`)."""
    argv = [sys.executable, "-m", "hbmsim.cli", "simulate", *flags, "--json"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    child = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        out, err = child.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        return {"wall": time.perf_counter() - start, "peak": None, "what": f"over {LIMIT_S} s"}
    wall = time.perf_counter() - start
    if child.returncode != 0:
        return {"wall": wall, "peak": None, "what": err.decode().strip().splitlines()[-1][:70]}
    d = json.loads(out)
    engine = d.get("engine", {})
    if "skipped" in engine:
        what = "skipped: " + engine["skipped"][:60]
    else:
        kernels = engine.get("kernels", [])
        n = sum(k["stretched"] for k in kernels)
        what = f"{seconds(d['time_s'])}, {n} of {len(kernels)} kernels stretched"
    return {"wall": wall, "peak": None, "what": what}


def measured(flags: list[str]) -> dict:
    """`one_call` in a process of its own, whose RUSAGE_CHILDREN then holds only that call's
    peak resident memory (the maximum over the children a process has waited for)."""
    code = (
        "import json, resource, sys; sys.path.insert(0, sys.argv[1]); "
        "from bench.scale import one_call; r = one_call(sys.argv[2:]); "
        "r['peak'] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024; "
        "print(json.dumps(r))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code, str(ROOT), *flags], capture_output=True, text=True, env=env
    )
    return json.loads(out.stdout)


def row(label: str, flags: list[str]) -> list[str]:
    r = measured(flags)
    peak = bytes_(r["peak"]) if r["peak"] else "-"
    return [label, f"{r['wall']:.2f} s", peak, r["what"]]


def scaling_tables(quick: bool) -> None:
    seqs = QUICK_SEQS if quick else SEQS
    instances = QUICK_INSTANCES if quick else INSTANCES
    for name, flags in PROGRAMS:
        rows = [
            row(f"seq {s:,}", [*flags, "--heads", "16", "--seq", str(s), "--causal"]) for s in seqs
        ]
        print(f"\n{name}: causal forward at 16 heads, d 64 on the H100, against the sequence")
        print(table(["problem", "wall", "peak", "engine"], rows))
        rows = [
            row(
                f"batch {b} x {h} heads",
                [*flags, "--batch", str(b), "--heads", str(h), "--seq", "4096", "--causal"],
            )
            for b, h in instances
        ]
        print(f"\n{name}: causal forward at 4k tokens, d 64 on the H100, against batch x heads")
        print(table(["problem", "wall", "peak", "engine"], rows))
    rows = []
    for label, flags in [
        ("flash-attn-2 fwd+bwd", ["--impl", "flash-attn-2", "--pass", "fwd+bwd"]),
        ("fa2 fwd+bwd", ["--algo", "fa2", "--pass", "fwd+bwd"]),
        ("flash-decoding", ["--impl", "flash-decoding", "--seq-q", "1"]),
    ]:
        for s in seqs:
            extra = ["--seq-k", str(s)] if "decoding" in label else ["--seq", str(s), "--causal"]
            rows.append(row(f"{label} seq {s:,}", [*flags, "--heads", "16", *extra]))
    print("\ntraining (forward + backward) and decoding, 16 heads, d 64 on the H100")
    print(table(["problem", "wall", "peak", "engine"], rows))


DEPARTURE_CASES = [  # small enough to replay every step, at least a few waves each
    ("fa2", Problem(batch=4, heads=16, seq_q=2048, seq_k=2048, causal=True), "h100-sxm"),
    ("fa2", Problem(batch=4, heads=16, seq_q=2048, seq_k=2048, pass_="fwd+bwd"), "h100-sxm"),
    (
        "fa2",
        Problem(batch=4, heads=16, kv_heads=4, seq_q=2048, seq_k=2048, causal=True, pass_="bwd"),
        "a100-80gb",
    ),
    ("standard", Problem(batch=4, heads=16, seq_q=2048, seq_k=2048, causal=True), "a100-80gb"),
    (
        "torch-eager",
        Problem(batch=4, heads=16, seq_q=2048, seq_k=2048, pass_="fwd+bwd"),
        "h100-sxm",
    ),
    (
        "flash-attn-1",
        Problem(batch=4, heads=16, seq_q=2048, seq_k=2048, pass_="fwd+bwd"),
        "a100-80gb",
    ),
    (
        "flash-attn-2",
        Problem(batch=4, heads=16, kv_heads=4, seq_q=2048, seq_k=2048, head_dim=128, causal=True),
        "a100-80gb",
    ),
    (
        "flash-attn-2",
        Problem(
            batch=4,
            heads=16,
            kv_heads=4,
            seq_q=2048,
            seq_k=2048,
            head_dim=128,
            causal=True,
            pass_="bwd",
        ),
        "h100-sxm",
    ),
    ("flash-attn-2", Problem(batch=4, heads=16, seq_q=2048, seq_k=2048, pass_="bwd"), "h100-sxm"),
    (
        "flash-attn-3",
        Problem(batch=4, heads=16, kv_heads=4, seq_q=2048, seq_k=2048, head_dim=128, causal=True),
        "h100-sxm",
    ),
    (
        "flash-decoding",
        Problem(batch=8, heads=32, kv_heads=8, seq_q=1, seq_k=16384, head_dim=128),
        "h100-sxm",
    ),
]


def departures() -> None:
    rows = []
    for what, p, gpu in DEPARTURE_CASES:
        library = "-" in what
        plan = build_plan(
            p, get_hardware(gpu), None if library else what, what if library else None
        )
        work = from_plan_fast(plan, regions=False)
        start = time.perf_counter()
        exact = simulate_workload(work, plan.hardware, check=lambda _p: frozenset())
        t_exact = time.perf_counter() - start
        every = frozenset(range(len(plan.kernels)))
        start = time.perf_counter()
        fast = simulate_workload(work, plan.hardware, check=lambda _p, e=every: e)
        t_fast = time.perf_counter() - start
        worst = max(
            (b.time_s / a.time_s - 1, a.name)
            for a, b in zip(exact.kernels, fast.kernels, strict=True)
            if a.time_s > 0
        )
        rows.append(
            [
                f"{what} {p.pass_}{' causal' if p.causal else ''}"
                f"{' gqa' if p.kv_heads != p.heads else ''} on {gpu}",
                f"{100 * (fast.time_s / exact.time_s - 1):+.2f}%",
                f"{100 * worst[0]:+.2f}% {worst[1][:28]}",
                f"{t_exact:.2f} s",
                f"{t_fast:.2f} s",
                f"{t_exact / max(t_fast, 1e-9):.1f}x",
            ]
        )
    print("\nthe fast path (every kernel stretched) next to the replay of every step")
    print(table(["problem", "departure", "worst kernel", "replay", "stretched", "ratio"], rows))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer points per table")
    parser.add_argument("--departures-only", action="store_true")
    args = parser.parse_args()
    if not args.departures_only:
        scaling_tables(args.quick)
    departures()
    return 0


if __name__ == "__main__":
    sys.exit(main())
