"""The journal of a running exploration: each finished row, appended as it finishes, so that a
run killed at any instant (SIGKILL included) loses only the points that were in flight.

The journal (`.NAME.journal` beside the table) is written and read by one schema: a record
holds exactly the table's columns, and each row is checked by the table's own cell checks
(table.check_rows) before it is written, so the reader can never refuse what the writer
wrote. The file is a header line, then one record per line:

    hbmsim explore journal 2
    1f2e3d4c {"point_id": "...", "gpu": "h100-sxm", ...}

Each record carries the CRC-32 of its JSON. A run killed mid-write leaves a torn last line:
reading drops it (its point runs again) and says so in one line. A record whose checksum
fails elsewhere (the disk, or a hand) is dropped the same way; a record whose checksum holds
but whose row the table refuses was not written by this hbmsim and is refused, naming it.

Appending is the one way hbmsim writes a file in place rather than through the one writer
(files/writer.py): the journal is only ever read back by the next run, which writes the
table whole and removes it.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import time
import zlib
from pathlib import Path

from ..errors import HbmsimError, InputFileError
from ..files.reader import FileChecker, parse_json, read_bytes
from .table import MAX_TABLE_BYTES, check_rows, error_fields

HEADER = b"hbmsim explore journal 2\n"
WHAT = "explore journal"


class Journal:
    """Rows appended to `.NAME.journal` beside the table as they finish (a line each, flushed
    at once and synced at most once a second), in `columns` (the table's)."""

    def __init__(self, table_path, columns: list[str] | None = None):
        target = Path(os.path.realpath(os.fspath(table_path)))
        self.path = target.with_name(f".{target.name}.journal")
        self.columns = columns
        self._fd: int | None = None
        self._synced = 0.0
        self._end: int | None = None  # bytes of whole records: a torn tail is cut before appending

    def check(self) -> None:
        """Refuse a journal path that is not a plain file (a FIFO would block the run, a
        link would send its rows elsewhere), before the run starts."""
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return
        if not stat.S_ISREG(st.st_mode):
            kind = "a link" if stat.S_ISLNK(st.st_mode) else "not a plain file"
            raise InputFileError(
                WHAT, self.path, f"is {kind}, so not a journal hbmsim wrote; remove it"
            )

    def read(self) -> tuple[list[dict], str | None]:
        """(rows of an earlier run, checked like a table's, and None or one line saying what
        was dropped). Missing: no rows."""
        self.check()
        try:
            data = bytes(read_bytes(self.path, WHAT, MAX_TABLE_BYTES))
        except InputFileError:
            if not self.path.exists():  # removed by a run that just ended
                return [], None
            raise
        lines = data.split(b"\n")
        whole, torn = lines[:-1], lines[-1]
        self._end = len(data) - len(torn)
        if not whole and (not torn or HEADER.startswith(torn)):  # empty, or cut in its header
            return [], _dropped_note(self.path, 0, bool(torn))
        if not whole or whole[0] + b"\n" != HEADER:
            dropped = len(whole) + bool(torn)
            return [], (
                f"{WHAT} {self.path}: is not a journal of this hbmsim (an older format?); its "
                f"{dropped:,} lines are set aside and their points run again"
            )
        rows, damaged = self._records(whole[1:])
        return rows, _dropped_note(self.path, damaged, bool(torn))

    def _records(self, lines: list[bytes]) -> tuple[list[dict], int]:
        chk = FileChecker(WHAT, self.path)
        raw, damaged = [], 0
        for n, line in enumerate(lines, start=2):
            crc, _, payload = line.partition(b" ")
            if len(crc) != 8 or not _intact(crc, payload):
                damaged += 1
                continue
            row = parse_json(payload.decode("ascii"), WHAT, f"{self.path} (line {n})")
            if not isinstance(row, dict):
                raise chk.error(f"line {n}", "is not a JSON object")
            raw.append((n, row))
        rows = []
        for n, row in raw:  # each checked with its own columns, as the table's rows are
            try:
                rows += check_rows(chk, [row], list(row), "json")
            except HbmsimError as exc:
                raise chk.error(
                    f"line {n}",
                    f"holds a row the table refuses ({str(exc).split(': ', 1)[-1]}); it was not "
                    "written by this hbmsim: remove the journal to run its points again",
                ) from None
        return rows, damaged

    def append(self, row: dict) -> dict:
        """Write `row` (in the journal's columns) as one record; returns the row as written.
        A row the table's checks refuse (an hbmsim bug) is written as an error row saying
        why, so neither this run nor the next one stops on it."""
        columns = self.columns or list(row)
        row = {c: row.get(c) for c in columns}
        try:
            check_rows(FileChecker(WHAT, self.path), [row], columns, "json")
            payload = json.dumps(row, allow_nan=False, separators=(",", ":"))
        except (HbmsimError, ValueError) as exc:
            row = {**row, **error_fields(f"a row the table refuses: {exc}")}
            payload = json.dumps(row, allow_nan=False, separators=(",", ":"), default=str)
        data = payload.encode("ascii")
        self._write(b"%08x %s\n" % (zlib.crc32(data), data))
        return row

    def _write(self, record: bytes) -> None:
        if self._fd is None:
            self._open()
        os.write(self._fd, record)
        now = time.monotonic()
        if now - self._synced > 1.0:  # the OS holds what was written; sync at most 1/s
            os.fsync(self._fd)
            self._synced = now

    def _open(self) -> None:
        self.check()
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
        self._fd = os.open(self.path, flags, 0o644)
        size = os.fstat(self._fd).st_size
        if self._end is not None and size > self._end:  # a torn tail, already said: cut it
            os.ftruncate(self._fd, self._end)
            size = self._end
        if size == 0:
            os.write(self._fd, HEADER)

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None

    def remove(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


def _intact(crc: bytes, payload: bytes) -> bool:
    try:
        return int(crc, 16) == zlib.crc32(payload) and payload.isascii()
    except ValueError:
        return False


def _dropped_note(path: Path, damaged: int, torn: bool) -> str | None:
    parts = []
    if torn:
        parts.append("its last line, cut short when a run stopped mid-write")
    if damaged:
        parts.append(f"{damaged:,} record{'s' * (damaged != 1)} whose checksum failed")
    if not parts:
        return None
    return f"{WHAT} {path}: dropped {' and '.join(parts)}; those points run again"
