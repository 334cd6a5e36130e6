"""`hbmsim explore` on Dask: points per second with 1 and 2 workers, and Dask's cost per point
against calling the simulator directly, measured side by side in one run.

    python bench/explore.py [POINTS]

The points: a seeded sample of POINTS (default 160) of docs/explore-example.toml (five models,
1k-8k tokens, flash-attn 2 tiles, five SRAM sizes, five HBM bandwidths). Three runs of the same
points, one after another:

- direct: `run_point` on each point in this process, one after another (what a loop calling
  `simulate` costs);
- 1 worker and 2 workers: `explore()` against the embedded cluster `hbmsim explore` starts
  (runner.local_cluster), of that many workers, started (and its workers' imports warmed)
  before the clock starts, so the figure is the run's own: tasks, results, the journal and
  the final table.

Printed: each run's time and points/s, the 2-worker speed-up over 1 worker (the goal on a
2-core machine: at least 1.7x), and Dask's overhead per point: (1 worker - direct) / points,
also as a share of a point's direct time (the goal: at most 10%). The cluster's start-up,
paid once per `hbmsim explore`, is printed apart.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hbmsim.explore import explore, parse_spec  # noqa: E402
from hbmsim.explore.cluster import local_cluster  # noqa: E402
from hbmsim.explore.table import run_point  # noqa: E402
from hbmsim.fmt import table  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _warm() -> None:
    import hbmsim.api  # noqa: F401 - a worker's first task should not pay the imports
    import hbmsim.libraries  # noqa: F401


def _cluster_run(spec, workers: int, folder: str) -> tuple[float, float, object]:
    """(start-up, run) seconds of `explore()` on the embedded cluster hbmsim starts, here
    started first so that the run's own time is measured apart."""
    from distributed import Client

    t = time.perf_counter()
    with local_cluster(workers) as cluster, Client(cluster) as client:
        client.run(_warm)
        start = time.perf_counter() - t
        out = os.path.join(folder, f"w{workers}.parquet")
        t = time.perf_counter()
        run = explore(spec, out, scheduler=cluster.scheduler_address)
        took = time.perf_counter() - t
    return start, took, run


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 160
    doc = tomllib.loads((ROOT / "docs" / "explore-example.toml").read_text())
    spec = parse_spec({**doc, "mode": "sample", "samples": n, "seed": 0}, "bench sample")
    points = list(spec.points())
    print(
        f"{len(points)} points: a seeded sample of docs/explore-example.toml; "
        f"{os.cpu_count()} cores\n"
    )
    _warm()
    t = time.perf_counter()
    direct_rows = [run_point(p) for p in points]
    direct = time.perf_counter() - t
    with tempfile.TemporaryDirectory() as folder:
        start1, one, run1 = _cluster_run(spec, 1, folder)
        start2, two, run2 = _cluster_run(spec, 2, folder)
    assert run1.ran == run2.ran == len(points), (run1.summary(), run2.summary())
    ok = sum(r["status"] == "ok" for r in direct_rows)
    rows = [
        ["direct (run_point in a loop)", f"{direct:.1f} s", f"{len(points) / direct:.2f}", "-"],
        ["Dask, 1 worker", f"{one:.1f} s", f"{len(points) / one:.2f}", f"{start1:.1f} s"],
        ["Dask, 2 workers", f"{two:.1f} s", f"{len(points) / two:.2f}", f"{start2:.1f} s"],
    ]
    print(table(["run", "time", "points/s", "cluster start"], rows))
    per_point = (one - direct) / len(points)
    print(f"\n{ok} of {len(points)} points ok (the rest: tiles that do not fit the SRAM)")
    print(f"2 workers over 1: {one / two:.2f}x (goal: >= 1.7x on 2 cores)")
    print(
        f"Dask's overhead per point: {per_point * 1e3:+.1f} ms, "
        f"{per_point / (direct / len(points)):+.1%} of a point's direct time (goal: <= 10%)"
    )


if __name__ == "__main__":
    main()
