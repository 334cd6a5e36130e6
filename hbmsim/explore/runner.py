"""Running an exploration on Dask distributed: one simulation is one task.

The tasks run on an embedded `LocalCluster` or an existing cluster (cluster.py). Dask does the
distribution, the retries and the recovery: a worker that dies mid-run has its task rerun
elsewhere, and a task whose workers keep dying ends as a row with status "error" and the
reason instead of stopping the run (a run where every point kills its workers stops after
MAX_LOST_IN_A_ROW of them, saying so, rather than writing a million error rows).

Bounded at any grid size: points are built one by one as tasks are submitted, and only a few
per worker are in flight at once (WINDOW_PER_THREAD), so the first rows come within seconds
and memory holds the rows done, not the grid.

Durable: one run at a time writes an output (files/lock.py refuses a second one, naming the
first); each finished row goes to the journal (journal.py) at once, so a run killed at any
instant loses only the points in flight, and the next run of the same command resumes: rows
already in the output or its journal are not run again (a row with status "error" is: it may
have been a lost worker). The output always ends as one whole table, written atomically,
also when the run is interrupted (Ctrl-C, SIGTERM, SIGHUP: the signal that arrives while the
table is being written waits until it is).
"""

from __future__ import annotations

import contextlib
import glob
import os
import signal
import sys
import threading
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError
from ..files.lock import output_lock
from ..files.writer import check_writable
from .cluster import DEFAULT_TIMEOUT_S, check_timeout, client_for, parse_scheduler
from .journal import Journal
from .spec import ExploreSpec, point_id
from .table import columns_for, error_row, read_table, run_point, table_format, write_table

# progress(done, total, rows_per_s): called as rows finish
Progress = Callable[[int, int, float], None]
WINDOW_PER_THREAD = 2  # tasks in flight per worker thread: one running, one waiting
MAX_LOST_IN_A_ROW = 16  # points in a row whose workers kept dying: the cluster is unfit
MAX_WORKERS = 1024
INTERRUPTS = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}  # 128 + signal


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
    held: int = 0  # the spec's points the output holds when the run ends

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


class ExploreInterrupted(KeyboardInterrupt):
    """A run stopped by a signal after writing its table: `run` says what the table holds,
    `status` is the exit status the signal calls for (130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, run: ExploreRun, signum: int):
        super().__init__(signum)
        self.run, self.signum, self.status = run, signum, INTERRUPTS.get(signum, 130)


class Interrupted(KeyboardInterrupt):
    """Raised by the handlers of `interrupts()` for SIGTERM and SIGHUP, as Ctrl-C raises
    KeyboardInterrupt."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class SchedulerLost(ConfigError):
    """The cluster went away mid-run: the table holds what finished; the line says so."""


def explore(
    spec: ExploreSpec,
    output,
    scheduler: str | None = None,
    workers: int | None = None,
    limit: int | None = None,
    progress: Progress | None = None,
    started: Callable[[ExploreRun], None] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    notice: Callable[[str], None] | None = None,
) -> ExploreRun:
    """Run `spec`'s points not yet in `output` and write the whole table there. `notice` is
    told, in one line each, what was dropped from an earlier run's journal."""
    check_run(spec, output, scheduler, workers, limit, timeout)
    with output_lock(output, "output"):
        _remove_stale_temporaries(output)
        columns = columns_for(spec.hardware, spec.axes)
        journal = Journal(output, columns)
        book = _Book.of(output, journal, spec, limit, notice)
        journal.columns = book.columns
        run = ExploreRun(str(output), spec.size if limit is None else min(limit, spec.size))
        run.kept, run.other_rows = run.points - len(book.todo), book.other_rows
        t0 = time.perf_counter()
        stopped: KeyboardInterrupt | None = None
        try:
            if book.todo:
                _run_tasks(spec, book, scheduler, workers, timeout, journal, run, progress, started)
            elif started is not None:
                started(run)
        except KeyboardInterrupt as exc:  # the table is written below, then it is said
            stopped = exc
        finally:
            with deferred_signals():  # a second Ctrl-C waits for the table: it is written whole
                if book.rows or os.path.exists(output):  # nothing started: no empty table
                    write_table(output, book.ordered(), book.columns)
                journal.remove()
            run.held = book.held
            run.seconds = time.perf_counter() - t0
    if stopped is not None:
        raise ExploreInterrupted(run, getattr(stopped, "signum", signal.SIGINT)) from None
    return run


def check_run(spec, output, scheduler, workers, limit, timeout) -> None:
    """Every option of a run, checked before anything is read, locked or started."""
    table_format(output, "output")
    check_writable(output, "output")
    if limit is not None and not 1 <= limit <= spec.size:
        raise ConfigError("limit", f"must be from 1 to {spec.size:,} (got {limit:,})")
    if workers is not None and not 1 <= workers <= MAX_WORKERS:
        raise ConfigError("workers", f"must be from 1 to {MAX_WORKERS:,} (got {workers:,})")
    check_timeout(timeout)
    if scheduler is not None:
        parse_scheduler(scheduler)
        if workers is not None:
            raise ConfigError(
                "workers",
                "sets the embedded cluster's size; a --scheduler cluster has the workers it has",
            )


@dataclass
class _Book:
    """The rows a run holds (from the output, its journal, and this run), the order the table
    lists them in, and the spec's points still to run (grid indices)."""

    rows: dict[str, dict]
    columns: list[str]
    todo: array | range | list
    order: dict[str, int] = field(default_factory=dict)  # point id -> grid index
    other_rows: int = 0

    @classmethod
    def of(cls, output, journal: Journal, spec: ExploreSpec, limit, notice) -> _Book:
        rows, columns, note = earlier_rows(output, journal, spec.hardware, spec.axes)
        if note and notice is not None:
            notice(note)
        if not rows:  # nothing done: every point is to run, no id needs computing
            return cls(rows, columns, spec.indices(limit))
        todo, order = array("q"), {}  # order: only the ids with a row (a million ids cost)
        for index, pid in spec.point_ids(limit):
            row = rows.get(pid)
            if row is not None:
                order[pid] = index
            if row is None or row["status"] == "error":
                todo.append(index)
        return cls(rows, columns, todo, order, len(set(rows) - set(order)))

    def add(self, index: int, row: dict) -> None:
        self.rows[row["point_id"]] = row
        self.order[row["point_id"]] = index

    @property
    def held(self) -> int:
        return sum(1 for pid in self.order if pid in self.rows)

    def ordered(self) -> list[dict]:
        """The spec's rows in grid order, then the other rows as the output listed them."""
        mine = sorted((i, pid) for pid, i in self.order.items() if pid in self.rows)
        ordered = [self.rows[pid] for _, pid in mine]
        return ordered + [r for pid, r in self.rows.items() if pid not in self.order]


def earlier_rows(
    output, journal: Journal, hardware_keys, optional=()
) -> tuple[dict, list[str], str | None]:
    """(rows an earlier run left, by point id: in the table, then in its journal; the table's
    columns; a line saying what of the journal was dropped, or None)."""
    journal.check()
    done: dict[str, dict] = {}
    columns = columns_for(hardware_keys, optional)
    if os.path.exists(output):
        rows, old = read_table(output)
        done.update((r["point_id"], r) for r in rows)
        columns += [c for c in old if c not in columns]
    rows, note = journal.read()
    for r in rows:
        done[r["point_id"]] = {c: r.get(c) for c in columns} | r
        columns += [c for c in r if c not in columns]
    return done, columns, note


def pending(spec: ExploreSpec, output, limit: int | None = None) -> tuple[int, int, str | None]:
    """(points the spec runs, points of them `output` lacks, a note on its journal), running
    nothing: ids are streamed, so a grid of a million points is counted in seconds."""
    journal = Journal(output)
    done, _, note = earlier_rows(output, journal, spec.hardware, spec.axes)
    total = spec.size if limit is None else min(limit, spec.size)
    if not done:
        return total, total, note
    todo = sum(
        1 for _, pid in spec.point_ids(limit) if done.get(pid, {}).get("status") in (None, "error")
    )
    return total, todo, note


def _run_tasks(spec, book, scheduler, workers, timeout, journal, run, progress, started) -> None:
    from distributed import as_completed  # deferred: Dask distributed, loaded by a run only

    with client_for(scheduler, workers, timeout) as client:
        if scheduler is not None:
            _wait_for_a_worker(client, scheduler, timeout)
        threads = _threads(client)
        run.workers = len(client.scheduler_info(n_workers=-1)["workers"])
        run.dashboard = _dashboard(client, scheduler is None)
        if started is not None:
            started(run)
        todo = iter(book.todo)
        flight: dict = {}  # future -> (grid index, point)
        done = as_completed([], loop=client.loop)

        def submit(n: int) -> None:
            for index in _take(todo, n):
                point = spec.point(index)
                key = f"hbmsim-point-{point_id(point)}"
                future = client.submit(run_point, point, key=key, pure=True)
                flight[future] = (index, point)
                done.add(future)

        future = None
        try:
            submit(WINDOW_PER_THREAD * threads)
            t0, lost, checked = time.perf_counter(), 0, time.monotonic()
            for n, future in enumerate(done, start=1):
                index, point = flight.pop(future)
                row, lost = _row_of(future, point, lost, scheduler, book, run)
                book.add(index, journal.append(row))
                run.ran += 1
                run.statuses[row["status"]] = run.statuses.get(row["status"], 0) + 1
                if progress is not None:
                    progress(n, len(book.todo), n / max(time.perf_counter() - t0, 1e-9))
                if time.monotonic() - checked > 5:  # a cluster's workers come and go
                    threads, checked = _threads(client), time.monotonic()
                submit(WINDOW_PER_THREAD * threads - len(flight))
        finally:  # futures let go while their client is open: none is freed after it closes
            future = None
            done.clear()
            flight.clear()


def _wait_for_a_worker(client, scheduler: str, timeout: float) -> None:
    """A cluster without workers would hold every task forever: wait `timeout` for one."""
    try:
        client.wait_for_workers(1, timeout=timeout)
    except Exception:  # noqa: BLE001 - Dask's TimeoutError, or the connection gone
        raise ConfigError(
            "scheduler",
            f"the Dask scheduler at {scheduler} has no workers (none joined within "
            f"{timeout:g} s, --timeout); start some with `dask worker {scheduler}`",
        ) from None


def _take(it: Iterator[int], n: int) -> list[int]:
    out = []
    for _ in range(max(0, n)):
        try:
            out.append(next(it))
        except StopIteration:
            break
    return out


def _threads(client) -> int:
    try:
        return max(1, sum(client.nthreads().values()))
    except Exception:  # noqa: BLE001 - a count for pacing only; one thread is always safe
        return 1


def _row_of(future, point, lost: int, scheduler, book, run) -> tuple[dict, int]:
    """The task's row, and how many points in a row now ended with their workers lost. A task
    whose workers kept dying (Dask gave up after its retries) is an error row saying so; a
    cancelled task means the cluster itself went away, which stops the run."""
    if future.status == "finished":
        try:
            return future.result(), 0
        except Exception as exc:  # noqa: BLE001 - a result that cannot be fetched is an error
            return error_row(point, exc), lost
    if future.status == "cancelled":
        where = scheduler or "the embedded cluster"
        raise SchedulerLost(
            "scheduler",
            f"lost the Dask scheduler of {where} mid-run; {run.output} keeps every finished "
            f"row ({book.held:,} of {run.points:,} points); the same command runs the rest",
        )
    if future.status != "error":
        return error_row(point, f"Dask reports the task {future.status}"), lost
    exc = future.exception()
    if type(exc).__name__ == "KilledWorker":
        lost += 1
        if lost >= MAX_LOST_IN_A_ROW:
            raise ConfigError(
                "workers",
                f"the workers running {lost} points in a row died every time Dask retried "
                "them (out of memory?); the run stops with the finished rows in "
                f"{run.output}: give the workers more memory, or run fewer points",
            )
        reason = f"its workers died every time Dask ran it ({exc}); out of memory?"
        return error_row(point, reason), lost
    return error_row(point, exc), lost


def _dashboard(client, embedded: bool) -> str | None:
    """The Dask dashboard's address. Its pages need bokeh, which hbmsim does not install: an
    embedded cluster's link is given only where bokeh is there (a remote scheduler's always)."""
    import importlib.util  # deferred: asked once per run

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


def _remove_stale_temporaries(output) -> None:
    """Temporary files an earlier, killed run left beside the output (the writer's
    `.NAME.*.tmp`): under the lock no other run is writing them."""
    target = Path(os.path.realpath(os.fspath(output)))
    pattern = os.path.join(glob.escape(str(target.parent)), f".{glob.escape(target.name[:60])}.*")
    for path in glob.glob(pattern):
        if path.endswith((".tmp", ".probe")):
            with contextlib.suppress(OSError):
                os.unlink(path)


@contextlib.contextmanager
def interrupts() -> Iterator[None]:
    """SIGTERM and SIGHUP end a run as Ctrl-C does (the table written, one line), on the main
    thread; elsewhere (the app's threads) signals are left as they are."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, _frame):
        raise Interrupted(signum)

    before = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def deferred_signals() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP while the block runs (the table's write), then act on
    the first that came, as it would have acted."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    before = {s: signal.signal(s, lambda signum, _f: came.append(signum)) for s in INTERRUPTS}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        if came:
            signal.raise_signal(came[0])


def print_progress(stream=None) -> Progress:
    """A one-line progress display for a person at a terminal: done/total, rate, time left."""
    stream = stream or sys.stderr

    def show(done: int, total: int, rate: float) -> None:
        left = (total - done) / rate if rate > 0 else 0.0
        end = "\n" if done == total else ""
        stream.write(f"\r{done:,}/{total:,} points, {rate:.1f}/s, {left:.0f} s left   {end}")
        stream.flush()

    return show
