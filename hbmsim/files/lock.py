"""A lock on an output file while one run writes it, so that a second run refuses at once.

Why: two `hbmsim explore` runs writing one table each replace it whole when they end, so the
later one silently dropped every row of the earlier one. The lock is an advisory `flock` on a
hidden file beside the output (`.NAME.lock`); the kernel releases it when its process ends,
however it ends (SIGKILL included), so a killed run never leaves a stale lock behind. The
file holds who took it (process, host, start time, command), for the refusal to name.

The lock file is the one file hbmsim writes in place rather than through the one writer
(writer.py): a lock must stay on the same file while it is held, and a rename would replace
it. It is removed by its holder as the run ends; a run that finds the file of a dead process
takes the lock over.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from ..errors import ConfigError

MAX_HOLDER_BYTES = 4096


def lock_path(target: Path) -> Path:
    """The lock file of a (resolved) output path."""
    return target.with_name(f".{target.name}.lock")


@contextlib.contextmanager
def output_lock(path, field: str) -> Iterator[Path]:
    """Hold the lock on output `path` for the duration of the block, or raise a ConfigError
    naming the run that holds it. Yields the lock file's path."""
    target = Path(os.path.realpath(os.fspath(path)))
    lock = lock_path(target)
    fd = _acquire(lock, path, field)
    try:
        _write_holder(fd)
        yield lock
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)  # while still held: a run waiting on this file retries (below)
        os.close(fd)


def _acquire(lock: Path, path, field: str) -> int:
    while True:
        try:  # never follow a link, never block on a FIFO someone put there
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except OSError as exc:
            raise ConfigError(
                field, f"cannot lock {path} for writing: {lock} ({exc.strerror})"
            ) from None
        mine = os.fstat(fd)
        if not stat.S_ISREG(mine.st_mode):
            os.close(fd)
            raise ConfigError(field, f"cannot lock {path}: {lock} is not a file hbmsim wrote")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise ConfigError(
                field,
                f"{path} is being written by another run ({holder}); wait for it to end, or "
                "write to another file",
            ) from None
        try:  # the holder before us may have removed the file after we opened it
            now = os.stat(lock, follow_symlinks=False)
        except FileNotFoundError:
            now = None
        if now is not None and (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino):
            return fd
        os.close(fd)  # a stale name: take the lock on the file that is there now


def _write_holder(fd: int) -> None:
    holder = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": " ".join(["hbmsim", *sys.argv[1:]])[:500],
    }
    data = json.dumps(holder).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def _read_holder(fd: int) -> str:
    """Who holds the lock, in words; the file is theirs and may be half written."""
    try:
        raw = os.pread(fd, MAX_HOLDER_BYTES, 0)
        holder = json.loads(raw.decode("utf-8"))
        words = f"process {int(holder['pid'])} on {str(holder['host'])[:100]}"
        words += f", started {str(holder['started'])[:40]}"
        command = str(holder.get("command", ""))[:200]
        return words + (f": {command}" if command else "")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return "its details are not readable yet"
