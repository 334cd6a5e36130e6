"""Running an exploration on Dask distributed: one simulation is one task.

By default the tasks run on an embedded `LocalCluster` (one single-threaded worker process per
core: the engine is Python, so threads would share one core); `scheduler=ADDRESS` sends the
same tasks to an existing cluster, e.g. one started with `dask scheduler` and `dask worker` on
many machines. Dask does the distribution, the retries and the recovery: a worker that dies
mid-run has its tasks rerun elsewhere, and a task that keeps killing workers ends as a row
with status "error" instead of stopping the run.

Resumable: rows already in the output table, or in the journal an interrupted run left beside
it, are not run again (a row with status "error" is: it may have been a lost worker). The
output always ends as one whole table, written atomically, also when the run is interrupted.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import ConfigError
from ..files.writer import check_writable
from .spec import ExploreSpec
from .table import (
    Journal,
    columns_for,
    error_row,
    point_id,
    read_table,
    run_point,
    table_format,
    write_table,
)

# progress(done, total, rows_per_s): called as rows finish
Progress = Callable[[int, int, float], None]


@dataclass
class ExploreRun:
    """What a run did: points in the spec (after --limit), rows kept from earlier runs, rows
    simulated now, and how they ended."""

    output: str
    points: int
    kept: int = 0
    ran: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    other_rows: int = 0  # rows of the output that this spec does not name (kept as they were)
    workers: int = 0
    dashboard: str | None = None
    seconds: float = 0.0

    def summary(self) -> str:
        ended = ", ".join(f"{n} {s}" for s, n in sorted(self.statuses.items())) or "nothing new"
        line = (
            f"{self.points:,} points: {self.kept:,} already in {self.output}, "
            f"{self.ran:,} simulated ({ended}) in {self.seconds:.1f} s"
        )
        if self.ran and self.workers:
            line += f" on {self.workers} worker{'s' * (self.workers != 1)}"
        if self.other_rows:
            line += f"; {self.other_rows:,} rows of other specs kept as they were"
        return line


def explore(
    spec: ExploreSpec,
    output,
    scheduler: str | None = None,
    workers: int | None = None,
    limit: int | None = None,
    progress: Progress | None = None,
    started: Callable[[ExploreRun], None] | None = None,
) -> ExploreRun:
    """Run `spec`'s points not yet in `output` and write the whole table there."""
    table_format(output, "output")
    check_writable(output, "output")
    if limit is not None and limit < 1:
        raise ConfigError("limit", f"must be at least 1 (got {limit})")
    if workers is not None and not 1 <= workers <= 1024:
        raise ConfigError("workers", f"must be from 1 to 1,024 (got {workers})")
    points = list(spec.points(limit))
    columns = columns_for(spec.hardware)
    journal = Journal(output)
    done, old_columns = _done_rows(output, journal)
    columns += [c for c in old_columns if c not in columns]
    ids = [point_id(p) for p in points]
    todo = _todo(points, ids, done)
    run = ExploreRun(str(output), len(points), kept=len(points) - len(todo))
    run.other_rows = len(set(done) - set(ids))
    t0 = time.perf_counter()
    try:
        if todo:
            _run_tasks(todo, scheduler, workers, journal, done, run, progress, started)
        elif started is not None:
            started(run)
    finally:  # also on Ctrl-C: the table holds every row that finished
        if done or os.path.exists(output):  # a run that never started leaves no empty table
            rows = [done[k] for k in ids if k in done] + [
                r for k, r in done.items() if k not in set(ids)
            ]
            write_table(output, rows, columns)
        journal.remove()
        run.seconds = time.perf_counter() - t0
    return run


def _done_rows(output, journal: Journal) -> tuple[dict[str, dict], list[str]]:
    """Rows an earlier run left, by point id: in the table, then in its journal."""
    done: dict[str, dict] = {}
    columns: list[str] = []
    if os.path.exists(output):
        rows, columns = read_table(output)
        done.update((r["point_id"], r) for r in rows)
    for r in journal.read():
        done[r["point_id"]] = r
        columns += [c for c in r if c not in columns]
    return done, columns


def _todo(points, ids, done) -> list:
    """Points without a row, or whose row is an error (perhaps a lost worker): to run."""
    return [
        p
        for p, k in zip(points, ids, strict=True)
        if done.get(k, {}).get("status") in (None, "error")
    ]


def pending(spec: ExploreSpec, output, limit: int | None = None) -> tuple[int, int]:
    """(points the spec runs, points of them `output` lacks), running nothing."""
    points = list(spec.points(limit))
    done, _ = _done_rows(output, Journal(output))
    return len(points), len(_todo(points, [point_id(p) for p in points], done))


def _run_tasks(todo, scheduler, workers, journal, done, run, progress, started) -> None:
    from distributed import as_completed  # deferred: Dask distributed, loaded by a run only

    with _client(scheduler, workers) as client:
        run.workers = len(client.scheduler_info(n_workers=-1)["workers"])
        run.dashboard = _dashboard(client, scheduler is None)
        if started is not None:
            started(run)
        futures = {
            client.submit(run_point, p, key=f"hbmsim-point-{point_id(p)}", pure=True): p
            for p in todo
        }
        t0 = time.perf_counter()
        for n, future in enumerate(as_completed(futures, loop=client.loop), start=1):
            row = _row_of(future, futures[future])
            done[row["point_id"]] = row
            journal.append(row)
            run.ran += 1
            run.statuses[row["status"]] = run.statuses.get(row["status"], 0) + 1
            if progress is not None:
                progress(n, len(todo), n / max(time.perf_counter() - t0, 1e-9))


def _row_of(future, point) -> dict:
    """The task's row; a task that failed in Dask (its workers kept dying) is an error row."""
    try:
        return future.result()
    except Exception as exc:  # noqa: BLE001 - one point's failure is recorded, the run goes on
        return error_row(point, exc)


@contextlib.contextmanager
def _client(scheduler: str | None, workers: int | None):
    """A Dask client: of the cluster at `scheduler`, or of an embedded one closed after."""
    from distributed import Client  # deferred: Dask distributed, loaded by a run only

    if scheduler is not None:
        if workers is not None:
            raise ConfigError(
                "workers",
                "sets the embedded cluster's size; a --scheduler cluster has the workers it has",
            )
        try:
            client = Client(scheduler, timeout="10s", set_as_default=False)
        except (OSError, TimeoutError, ValueError) as exc:
            raise ConfigError(
                "scheduler", f"cannot reach a Dask scheduler at {scheduler} ({exc})"
            ) from None
        with client:
            yield client
        return
    with local_cluster(workers) as cluster, Client(cluster, set_as_default=False) as client:
        yield client


def local_cluster(workers: int | None = None):
    """The embedded cluster: `workers` single-threaded worker processes (default one per
    core), as `hbmsim explore` runs without --scheduler."""
    # deferred: Dask distributed, loaded by a run only
    import dask
    from distributed import LocalCluster

    # Dask's workers sample their threads' stacks every 10 ms for the dashboard's profile, a
    # cost on the engine's pure-Python work that bench/explore.py measures
    with dask.config.set({"distributed.worker.profile.enabled": False}), _workers_ignore_ctrl_c():
        return LocalCluster(
            n_workers=workers or os.cpu_count() or 1,
            threads_per_worker=1,  # the engine is pure Python: one process per core
            processes=True,
            dashboard_address=":0",  # any free port: two runs at once must not collide
            silence_logs=logging.CRITICAL,  # workers outliving the scheduler log tracebacks
        )


@contextlib.contextmanager
def _workers_ignore_ctrl_c():
    """Worker processes started inside this ignore SIGINT. Ctrl-C at a terminal reaches every
    process of the foreground group: this one stops the run (and writes the table), and the
    cluster closes its workers; left to Python's default, each worker printed a traceback of
    its own KeyboardInterrupt. A process started with SIGINT ignored keeps it ignored (Python
    installs its KeyboardInterrupt handler only over the default)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers are the main thread's (the app runs its clusters elsewhere)
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def _dashboard(client, embedded: bool) -> str | None:
    """The Dask dashboard's address. Its pages need bokeh, which hbmsim does not install: an
    embedded cluster's link is given only where bokeh is there (a remote scheduler's always)."""
    if embedded and importlib.util.find_spec("bokeh") is None:
        return None
    try:
        return (
            client.dashboard_link
            if client.scheduler_info().get("services", {}).get("dashboard")
            else None
        )
    except Exception:  # noqa: BLE001 - a link is a convenience, never a reason to fail
        return None


def print_progress(stream=sys.stderr) -> Progress:
    """A one-line progress display for a person at a terminal: done/total, rate, time left."""

    def show(done: int, total: int, rate: float) -> None:
        left = (total - done) / rate if rate > 0 else 0.0
        end = "\n" if done == total else ""
        stream.write(f"\r{done:,}/{total:,} points, {rate:.1f}/s, {left:.0f} s left   {end}")
        stream.flush()

    return show
