"""Where an exploration's tasks run: an embedded Dask LocalCluster, or an existing cluster.

The embedded cluster has one single-threaded worker process per core (the engine is Python,
so threads would share one core). Its workers are forked from a fork server that was started
with Ctrl-C ignored, so they ignore it from their first instruction: Ctrl-C at a terminal
reaches every process of the foreground group, and it is this process's to handle (it writes
the table and says so in one line); a worker that took it printed a traceback of its own.
The cluster is started on a helper thread, so this process answers Ctrl-C while the workers
start (seconds), not only once they have.

An existing cluster's address is checked before any connection (`tcp://HOST:PORT`, the one
protocol a Dask scheduler serves without certificates or extra libraries), then reached under
a deadline: a closed port, a peer that never answers and one that answers something other
than Dask are each refused in one line, and no half-made Dask client is left for its
finaliser to report on at exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import re
import signal
import socket
import threading
from collections.abc import Iterator

from ..errors import ConfigError

DEFAULT_TIMEOUT_S = 5.0  # a scheduler on a working network answers in milliseconds
MAX_TIMEOUT_S = 600.0
PROTOCOLS = ("tcp",)
SUPPORTED = ", ".join(f"{p}://HOST:PORT" for p in PROTOCOLS)
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"  # one label of a DNS name
_HOSTNAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*\.?", re.ASCII)
_OTHER_PROTOCOLS = {
    "tls": "needs certificates, which hbmsim does not take",
    "ucx": "needs UCX, which hbmsim does not install",
    "inproc": "is a cluster inside one process; hbmsim starts its own without --scheduler",
    "ws": "needs Dask's websocket extra, which hbmsim does not install",
    "wss": "needs Dask's websocket extra and certificates",
    "http": "is a dashboard's address; the scheduler's is tcp://HOST:8786 by default",
    "https": "is a dashboard's address; the scheduler's is tcp://HOST:8786 by default",
}


def parse_scheduler(address) -> tuple[str, int]:
    """(host, port) of a `--scheduler` address, or a ConfigError saying what is wrong and
    what is taken, before any connection is tried."""
    text = "" if address is None else str(address)
    shown = repr(text) if len(text) <= 60 else repr(text[:60]) + "..."
    usage = f"give tcp://HOST:PORT (got {shown})"
    scheme, sep, rest = text.partition("://")
    if not sep:
        raise ConfigError("scheduler", f"is not an address: {usage}")
    scheme = scheme.lower()
    if scheme not in PROTOCOLS:
        why = _OTHER_PROTOCOLS.get(scheme, "is not a protocol of a Dask scheduler")
        raise ConfigError(
            "scheduler",
            f"{scheme[:20]}:// {why}; supported: {SUPPORTED} (got {shown})",
        )
    host, port = _host_port(rest)
    if host is None:
        raise ConfigError("scheduler", f"names no host: {usage}")
    if port is None:
        raise ConfigError("scheduler", f"names no port (Dask's default is 8786): {usage}")
    if not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError("scheduler", f"port must be from 1 to 65535: {usage}")
    if not _valid_host(host):
        raise ConfigError("scheduler", f"{host[:60]!r} is not a host name or IP address")
    return host, int(port)


def _host_port(rest: str) -> tuple[str | None, str | None]:
    if rest.startswith("["):  # [IPv6]:port
        host, close, after = rest[1:].partition("]")
        if not close:
            return None, None
        return host or None, after[1:] if after.startswith(":") and after[1:] else None
    host, colon, port = rest.rpartition(":")
    if not colon:
        return rest or None, None
    return host or None, port or None


def _valid_host(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return bool(_HOSTNAME.fullmatch(host))


def check_timeout(timeout) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise ConfigError("timeout", f"must be a number of seconds (got {timeout!r})")
    if not 0 < timeout <= MAX_TIMEOUT_S:
        raise ConfigError("timeout", f"must be > 0 and at most {MAX_TIMEOUT_S:g} s (got {timeout})")
    return float(timeout)


def connect(address: str, timeout: float):
    """A Dask client of the scheduler at `address`, checked first: the port answers within
    `timeout`, and what answers is a Dask scheduler."""
    from distributed import Client  # deferred: Dask distributed, loaded by a run only

    host, port = parse_scheduler(address)
    where = f"{host}:{port}"
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except TimeoutError:
        raise ConfigError(
            "scheduler", f"{where} did not accept a connection within {timeout:g} s (--timeout)"
        ) from None
    except OSError as exc:
        raise ConfigError("scheduler", f"cannot reach {where}: {exc.strerror or exc}") from None
    canonical = f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"
    _identify(canonical, timeout)
    try:
        return Client(canonical, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise ConfigError(
            "scheduler", f"cannot use the Dask scheduler at {where} ({exc})"
        ) from None


def _identify(address: str, timeout: float) -> None:
    """Ask the peer who it is, in Dask's own protocol and under the deadline: a scheduler
    says so; anything else (silence, garbage, another server) is refused in one line."""

    async def ask():
        from distributed.comm import connect as dask_connect  # deferred: Dask distributed

        comm = await dask_connect(address, timeout=timeout)
        try:
            await comm.write({"op": "identity"})
            return await comm.read()
        finally:
            comm.abort()

    where = address.removeprefix("tcp://")
    try:
        reply = asyncio.run(asyncio.wait_for(ask(), timeout))
    except TimeoutError:
        raise ConfigError(
            "scheduler",
            f"{where} accepted a connection but did not answer as a Dask scheduler within "
            f"{timeout:g} s (--timeout)",
        ) from None
    except Exception:  # noqa: BLE001 - whatever a peer sends is refused in one line
        raise ConfigError(
            "scheduler",
            f"{where} does not speak Dask's protocol (what it sent is not a Dask message)",
        ) from None
    if not isinstance(reply, dict) or reply.get("type") != "Scheduler":
        kind = reply.get("type") if isinstance(reply, dict) else type(reply).__name__
        raise ConfigError(
            "scheduler", f"{where} is not a Dask scheduler (it says {str(kind)[:40]!r})"
        )


# Dask's workers sample their threads' stacks every 10 ms for the dashboard's profile, a cost
# on the engine's pure-Python work that bench/explore.py measures; they are forked from a fork
# server (below) instead of each starting a fresh interpreter
DASK_SETTINGS = {
    "distributed.worker.profile.enabled": False,
    "distributed.worker.multiprocessing-method": "forkserver",
    # one task per worker thread at a time: a worker that dies (out of memory) takes only the
    # point it was running with it, not one queued behind it that Dask would blame too
    "distributed.scheduler.worker-saturation": 1.0,
}


def local_cluster(workers: int | None = None):
    """The embedded cluster: `workers` single-threaded worker processes (default one per
    core), as `hbmsim explore` runs without --scheduler."""
    # deferred: Dask distributed, loaded by a run only
    import dask
    from distributed import LocalCluster

    start_fork_server()
    with dask.config.set(DASK_SETTINGS):
        return LocalCluster(
            n_workers=workers or os.cpu_count() or 1,
            threads_per_worker=1,  # the engine is pure Python: one process per core
            processes=True,
            dashboard_address=":0",  # any free port: two runs at once must not collide
            silence_logs=logging.CRITICAL,  # workers outliving the scheduler log tracebacks
        )


def start_fork_server() -> None:
    """Start the fork server that Dask's workers are forked from with Ctrl-C ignored, which
    every process forked from it keeps (and Python installs no KeyboardInterrupt handler
    over an ignored signal). It preloads Dask itself, so this thread imports nothing while
    Ctrl-C is ignored (a few milliseconds: one fork and exec). Where it runs already it is
    left as it is; off the main thread (the app runs its clusters elsewhere, and signals are
    the main thread's) it starts with the signals as they are."""
    from multiprocessing import forkserver, get_context  # deferred: a run's workers only

    _start_resource_tracker()
    get_context("forkserver").set_forkserver_preload(["distributed"])
    if threading.current_thread() is not threading.main_thread():
        forkserver.ensure_running()
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, before)


def _start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker (the process that removes the semaphores a
    cluster's queues leave) with its warning about them off: a run that ends on a signal
    during the cluster's start leaves the half-made cluster to it, and the tracker would
    print a warning after the run's one line. It still removes them."""
    from multiprocessing import resource_tracker  # deferred: a run's workers only

    quiet = "ignore::UserWarning:multiprocessing.resource_tracker"
    before = os.environ.get("PYTHONWARNINGS")
    os.environ["PYTHONWARNINGS"] = f"{before},{quiet}" if before else quiet
    try:
        resource_tracker.ensure_running()
    finally:
        if before is None:
            del os.environ["PYTHONWARNINGS"]
        else:
            os.environ["PYTHONWARNINGS"] = before


@contextlib.contextmanager
def client_for(scheduler: str | None, workers: int | None, timeout: float) -> Iterator:
    """A Dask client: of the cluster at `scheduler`, or of an embedded one closed after (also
    when the block is interrupted, with a bound on the wait)."""
    with _dask_silenced():
        if scheduler is not None:
            client = connect(scheduler, timeout)
            try:
                yield client
            finally:
                _quietly(client.close, timeout=timeout)
            return
        cluster, client = _start_interruptibly(workers)
        try:
            yield client
        finally:
            _quietly(client.close, timeout=timeout)
            _quietly(cluster.close, timeout=10)


@contextlib.contextmanager
def _dask_silenced() -> Iterator[None]:
    """Dask's own log lines off while a run holds a client: a lost scheduler, a dying worker
    or a closing cluster each log an error with a traceback, and the run says what matters
    in one line of its own (the table it kept, what to do next)."""
    names = ["distributed"] + [
        name for name in logging.root.manager.loggerDict if name.startswith("distributed.")
    ]  # Dask's logging config gives some of them levels of their own
    loggers = [logging.getLogger(name) for name in names]
    before = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for logger, level in zip(loggers, before, strict=True):
            logger.setLevel(level)


def _start_interruptibly(workers: int | None):
    """(local_cluster(workers), a client of it), started on a helper thread while this one
    waits in short steps, so a Ctrl-C or SIGTERM during the seconds the workers take to start
    is answered at once (and no import this thread would run can swallow it); a cluster
    finished after its caller gave up is closed by the helper."""
    box: dict = {}
    abandoned = threading.Event()

    def start():
        try:
            from distributed import Client  # deferred: Dask distributed, on this thread

            cluster = local_cluster(workers)
            box["both"] = cluster, Client(cluster, set_as_default=False)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            box["error"] = exc
            return
        if abandoned.is_set():
            _quietly(box["both"][1].close, timeout=5)
            _quietly(cluster.close, timeout=10)

    start_fork_server()  # here, on the calling (main) thread, where signals can be set
    helper = threading.Thread(target=start, name="hbmsim-cluster-start", daemon=True)
    helper.start()
    try:
        while helper.is_alive():
            helper.join(0.05)
    except BaseException:
        abandoned.set()
        raise
    if "error" in box:
        raise box["error"]
    return box["both"]


def _quietly(close, **kwargs) -> None:
    """Close a Dask object without letting its shutdown speak: a run that ends (or is
    interrupted) has said what it did, and Dask's teardown noise is not part of that."""
    with contextlib.suppress(Exception):
        close(**kwargs)
