"""Start-up of the `hbmsim` command: wall time and peak memory of short calls, side by side.

    python bench/startup.py                    # this checkout
    python bench/startup.py --against ../old   # this checkout next to another one, interleaved

Each call is a fresh `python -m hbmsim.cli ...` process (imports are the cost being measured),
run REPEATS times per checkout, the checkouts interleaved call by call so that the machine's
drift falls on both alike; the table gives the median and the fastest run of each, and with
--against the ratio of medians (this / other). Peak memory is the child's maximum resident set.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hbmsim.fmt import table  # noqa: E402

CALLS = [
    ("hbmsim --help", ["--help"]),
    ("simulate --no-engine", ["simulate", "--no-engine"]),
    (
        "simulate --impl flash-attn-2 --no-engine",
        ["simulate", "--impl", "flash-attn-2", "--no-engine"],
    ),
    ("simulate (fa2, 4k tokens)", ["simulate", "--json"]),
]
REPEATS = 7


def one_call(checkout: Path, argv: list[str]) -> tuple[float, int]:
    """(seconds, peak resident bytes) of one `python -m hbmsim.cli ARGV` in `checkout`."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    start = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "hbmsim.cli", *argv],
        cwd=checkout,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _pid, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{checkout}: hbmsim {' '.join(argv)} failed")
    return seconds, usage.ru_maxrss * 1024  # ru_maxrss is in KiB on Linux


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, help="another checkout, timed alongside")
    parser.add_argument("--repeats", type=int, default=REPEATS)
    args = parser.parse_args()
    checkouts = [ROOT] + ([args.against.resolve()] if args.against else [])
    for c in checkouts:
        if not (c / "hbmsim" / "cli").exists() and not (c / "hbmsim" / "cli.py").exists():
            raise SystemExit(f"{c}: not an hbmsim checkout")
    rows = []
    for name, argv in CALLS:
        times = {c: [] for c in checkouts}
        peaks = {c: [] for c in checkouts}
        for _ in range(args.repeats):
            for c in checkouts:
                s, peak = one_call(c, argv)
                times[c].append(s)
                peaks[c].append(peak)
        row = [name]
        for c in checkouts:
            row += [
                f"{statistics.median(times[c]):.3f} s",
                f"{min(times[c]):.3f} s",
                f"{max(peaks[c]) / 1e6:.0f} MB",
            ]
        if args.against:
            ratio = statistics.median(times[ROOT]) / statistics.median(times[checkouts[1]])
            row.append(f"{ratio:.2f}")
        rows.append(row)
    head = ["call", "median", "fastest", "peak"]
    if args.against:
        head = ["call", "this: median", "fastest", "peak", "other: median", "fastest", "peak"]
        head.append("this / other")
    version = sys.version.split()[0]
    print(f"start-up of `hbmsim`, {args.repeats} runs each, interleaved (python {version})")
    print(table(head, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
