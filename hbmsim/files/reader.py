"""The one place where files a user hands in are read: traces, hardware profiles, measurements.

Why one place: every such file is hostile until checked. A file can be a directory, a device
that never ends (/dev/zero), empty (/dev/null), binary, UTF-16, nested a million deep, or hold
a 5,000-digit integer; a field can have the wrong type, be out of range or disagree with
another. Each reader here checks, in this order, so nothing is built from a bad file:

1. the size, before reading (at most `max_bytes + 1` bytes are ever read);
2. the encoding (UTF-8 text for JSON) and the syntax, with nesting depth and number sizes
   bounded and non-finite numbers (NaN, Infinity, 1e999) refused;
3. every field, through `FileChecker`: type, range and consistency.

Every failure is one InputFileError naming the file, the field and what was expected.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import stat
from collections.abc import Iterator

import numpy as np

from ..errors import ConfigError, InputFileError
from .numbers import MAX_INT_DIGITS, HugeInt

MAX_JSON_BYTES = 16 * 1024 * 1024  # profiles and measurements are kilobytes; results files < 1 MB
MAX_JSON_DEPTH = 32  # the deepest file hbmsim writes nests 5 levels


def read_bytes(path, what: str, max_bytes: int, error=InputFileError) -> bytearray:
    """The whole file, refused (before reading past the limit) if larger than `max_bytes`.

    Devices and pipes are read the same bounded way, so /dev/zero stops at the limit and
    /dev/null reads as empty. A pipe without a writer reads as empty instead of hanging.
    """
    text = os.fspath(path) if path is not None else ""
    if not text:
        raise error(what, "''", "no file name given")
    try:
        st = os.stat(text)
    except FileNotFoundError:
        raise error(what, text, "no such file") from None
    except OSError as exc:
        raise error(what, text, f"cannot read it ({exc.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise error(what, text, "is a directory; expected a file")
    if stat.S_ISREG(st.st_mode) and st.st_size > max_bytes:
        raise error(what, text, _too_large(st.st_size, max_bytes, what))
    try:
        fd = os.open(text, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO without a writer: no hang
    except OSError as exc:
        raise error(what, text, f"cannot read it ({exc.strerror})") from None
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        data = bytearray()  # grown in place: the peak is the file's size, not twice it
        while len(data) <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - len(data)))
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        raise error(what, text, f"cannot read it ({exc.strerror})") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise error(what, text, _too_large(None, max_bytes, what))
    return data


def _too_large(size: int | None, max_bytes: int, what: str) -> str:
    got = f" ({size:,} bytes)" if size is not None else ""
    return f"is too large{got}; a {what} file may hold at most {max_bytes:,} bytes"


def decode_text(data: bytes, what: str, path, error=InputFileError) -> str:
    """UTF-8 text (a UTF-8 byte-order mark is allowed); UTF-16/32 and binary are named."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise error(what, path, "is UTF-16 (or UTF-32) text; save it as UTF-8")
    if b"\x00" in data[:4096]:
        raise error(what, path, "is binary, not text; expected UTF-8 JSON")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(what, path, f"is not UTF-8 text (bad byte at offset {exc.start})") from None


def parse_json(
    text: str,
    what: str,
    path,
    error=InputFileError,
    max_depth: int = MAX_JSON_DEPTH,
    allow_nan: bool = False,
):
    """JSON with bounded nesting and numbers: no NaN/Infinity (unless `allow_nan`: files
    hbmsim itself writes with Python's json hold NaN for "no value" and Infinity for a
    failed check; the fields used are range-checked anyway), no float overflowing to inf, no
    integer over MAX_INT_DIGITS digits; no key twice in one object (JSON parsers disagree on
    which one wins) and no string holding a lone surrogate (`"\\ud800"`: valid JSON escapes
    that no text encoding can write back)."""

    def bad_constant(name):
        if allow_nan:
            return float(name)
        raise ValueError(f"{name} is not a number JSON allows")

    def parse_int(s):
        digits = len(s.lstrip("-"))
        return HugeInt(digits, s.startswith("-")) if digits > MAX_INT_DIGITS else int(s)

    def parse_float(s):
        x = float(s)
        if not math.isfinite(x):
            raise ValueError(f"{s[:20]} overflows a float")
        return x

    depth = _max_depth(text, max_depth)
    if depth > max_depth:
        raise error(what, path, f"nests {depth} levels deep; at most {max_depth} are allowed")
    try:
        value = json.loads(
            text,
            parse_constant=bad_constant,
            parse_int=parse_int,
            parse_float=parse_float,
            object_pairs_hook=_unique_keys,
        )
        _check_strings(value)
        return value
    except json.JSONDecodeError as exc:
        raise error(
            what, path, f"is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise error(what, path, f"is not usable JSON ({exc})") from None


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """An object's members, refusing a key given twice (Python's json keeps the last)."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key[:40]!r} appears twice in one object")
        out[key] = value
    return out


def _check_strings(value) -> None:
    """Refuse a string (key or value) that is not Unicode text: a lone surrogate escape."""
    stack, path = [(value, "")], ""
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            for key, sub in item.items():
                _text(key, f"{path}.{key}" if path else "a key")
                stack.append((sub, f"{path}.{key}" if path else key))
        elif isinstance(item, list):
            stack.extend((sub, f"{path}[{i}]") for i, sub in enumerate(item))
        elif isinstance(item, str):
            _text(item, path or "the value")


def _text(s: str, where: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as exc:
        where = where.encode("ascii", "backslashreplace").decode()[:80]
        raise ValueError(
            f"{where} holds {s[exc.start]!r}, a lone surrogate escape, not a character"
        ) from None


def _max_depth(text: str, max_depth: int) -> int:
    """Deepest [ / { nesting outside strings, found without recursion (so a file nested a
    million deep cannot blow the stack before it is refused) and in C-speed passes."""
    if text.count("[") + text.count("{") <= max_depth:
        return 0  # cannot nest deeper than it has brackets
    bare = np.frombuffer(_STRING.sub('""', text).encode("utf-8", "replace"), dtype=np.uint8)
    step = np.isin(bare, _OPEN).astype(np.int64) - np.isin(bare, _CLOSE)
    return int(np.cumsum(step).max(initial=0))


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_OPEN = np.frombuffer(b"[{", dtype=np.uint8)
_CLOSE = np.frombuffer(b"]}", dtype=np.uint8)


def read_json_file(
    path, what: str, max_bytes: int = MAX_JSON_BYTES, error=InputFileError, allow_nan=False
):
    """Size limit, encoding, syntax: the parsed JSON value, not yet checked field by field."""
    data = read_bytes(path, what, max_bytes, error)
    if not data.strip():
        raise error(what, path, "is empty; expected a JSON object")
    text = decode_text(bytes(data), what, path, error)
    return parse_json(text, what, path, error, allow_nan=allow_nan)


class FileChecker:
    """Field checks for one file, each failure one line naming the file and the field.

    Fields are named by their path in the file (`configs[3].tiles.bq`), so a user can find
    the value at fault.
    """

    def __init__(self, what: str, path, error=InputFileError):
        self.what, self.path, self.error_cls = what, str(path), error

    def error(self, field: str | None, message: str) -> InputFileError:
        return self.error_cls(self.what, self.path, message, field)

    def obj(self, value, field: str, required: tuple[str, ...] = ()) -> dict:
        if not isinstance(value, dict):
            raise self.error(field, f"must be a JSON object (got {_kind(value)})")
        missing = [k for k in required if k not in value]
        if missing:
            raise self.error(field, f"lacks {', '.join(missing)}")
        return value

    def list(self, value, field: str, lo: int = 0, hi: int = 1 << 20) -> list:
        if not isinstance(value, list):
            raise self.error(field, f"must be a JSON list (got {_kind(value)})")
        if not lo <= len(value) <= hi:
            raise self.error(field, f"must hold {lo:,} to {hi:,} items (got {len(value):,})")
        return value

    def int(self, value, field: str, lo: int, hi: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(
                field, f"must be an integer from {lo:,} to {hi:,} (got {_kind(value)})"
            )
        if not lo <= value <= hi:
            raise self.error(field, f"must be from {lo:,} to {hi:,} (got {value:,})")
        return value

    def num(self, value, field: str, lo: float, hi: float, lo_open: bool = False) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(field, f"must be a number (got {_kind(value)})")
        ok = (lo < value if lo_open else lo <= value) and value <= hi
        if not ok:
            rng = f"{'>' if lo_open else '>='} {lo:g} and <= {hi:g}"
            raise self.error(field, f"must be {rng} (got {value!r})")
        return float(value)

    def str(self, value, field: str, choices=None, max_len: int = 1000) -> str:
        if not isinstance(value, str):
            raise self.error(field, f"must be a string (got {_kind(value)})")
        if choices is not None and value not in choices:
            raise self.error(field, f"must be one of {', '.join(choices)} (got {value[:40]!r})")
        if len(value) > max_len:
            raise self.error(field, f"must be at most {max_len:,} characters")
        return value

    def bool(self, value, field: str) -> bool:
        if not isinstance(value, bool):
            raise self.error(field, f"must be true or false (got {_kind(value)})")
        return value

    @contextlib.contextmanager
    def fields_of(self, prefix: str | None) -> Iterator[None]:
        """Turn a ConfigError raised while building an object (Problem, Hardware) from the
        file into this file's error, the field named under `prefix`."""
        try:
            yield
        except ConfigError as exc:
            name = f"{prefix}.{exc.field}" if prefix else exc.field
            message = str(exc)
            message = message.split(": ", 1)[1] if message.startswith(f"{exc.field}: ") else message
            raise self.error(name, message) from None
        except TypeError as exc:  # a constructor given keys it does not take, or lacking some
            raise self.error(prefix, str(exc).split(".", 1)[-1]) from None


def _kind(value) -> str:
    """How a JSON value reads to a user: `a string 'abc'`, `a list`, `null`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f"a string {value[:40]!r}"
    if isinstance(value, int) and abs(value) >= 10**MAX_INT_DIGITS:
        return f"an integer of {len(str(abs(value))):,} digits"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
