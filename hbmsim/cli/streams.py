"""The command's own output streams: readable under any locale, quiet when the reader leaves,
one line when the disk is full.

Why here: stdout is a file the user chose too (`> out.json`, `| head`, `> /dev/full`), and
writing to it fails in ways the one writer (files/writer.py) never sees:

- a pipe whose reader has gone (`hbmsim simulate --json | true`): the command ends at once,
  quietly, with status 141 (128 + SIGPIPE, what a shell reports for a tool the pipe stopped);
- a full disk or a device that refuses writes (`> /dev/full`): one line on stderr, status 2;
- a terminal or pipe whose encoding cannot hold "µs" or "×" (`PYTHONIOENCODING=ascii`, a
  C locale): those characters are written as "us" and "x", others as `\\xNN` escapes, so the
  output stays readable instead of ending in a UnicodeEncodeError.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import sys
from collections.abc import Iterator

BROKEN_PIPE_STATUS = 141  # 128 + SIGPIPE (13)
# how the report's non-ASCII characters read in ASCII
ASCII_FORMS = {
    "µ": "u",
    "×": "x",
    "·": "*",
    "≤": "<=",
    "≥": ">=",
    "→": "->",
    "−": "-",
    "–": "-",
    "—": "-",
    "…": "...",
    "²": "^2",
    "ᵀ": "^T",
    "≈": "~",
    "ℓ": "l",
    "‘": "'",
    "’": "'",
    "“": '"',
    "”": '"',
}
ERRORS = "hbmsim-readable"


def _readable(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    text = exc.object[exc.start : exc.end]
    forms = (ASCII_FORMS.get(c) or c.encode("ascii", "backslashreplace").decode() for c in text)
    return "".join(forms), exc.end


codecs.register_error(ERRORS, _readable)


class OutputError(Exception):
    """Writing to stdout failed for a reason other than a closed pipe (ENOSPC, EIO...)."""

    def __init__(self, exc: OSError):
        self.strerror = exc.strerror or str(exc)
        super().__init__(self.strerror)


class _Guarded:
    """stdout as the commands see it: writes that fail with an OSError other than a closed
    pipe raise OutputError, so main() can tell the stream's failure from a bug."""

    def __init__(self, inner):
        self._inner = inner

    def write(self, text: str) -> int:
        try:
            return self._inner.write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError(exc) from None

    def flush(self) -> None:
        try:
            self._inner.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError(exc) from None

    def __getattr__(self, name):
        return getattr(self._inner, name)


def _make_readable(stream) -> None:
    """Encode what the stream's encoding cannot hold in ASCII forms, not an exception."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        "µ×".encode(encoding)
    except (UnicodeEncodeError, LookupError):
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(errors=ERRORS)


@contextlib.contextmanager
def guarded_output() -> Iterator[None]:
    """stdout and stderr readable under any encoding, stdout's failures told apart."""
    for stream in (sys.stdout, sys.stderr):
        _make_readable(stream)
    inner = sys.stdout
    sys.stdout = _Guarded(inner)
    try:
        yield
    finally:
        if isinstance(sys.stdout, _Guarded):
            sys.stdout = inner


def silence_stdout() -> None:
    """After a closed pipe or a failed write: point stdout's file descriptor at /dev/null, so
    the interpreter's final flush of what is still buffered cannot fail again at exit."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def say(line: str) -> None:
    """One line on stderr, as far as stderr can still take it."""
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr)
        sys.stderr.flush()
