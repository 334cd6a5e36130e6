"""Errors a user can cause, each naming the field at fault and what is allowed.

Why one module: the CLI and the app both turn these into one clear line (never a
traceback), so they must be recognisable as "the user's input was wrong" rather than "hbmsim
has a bug". Anything else that escapes is a bug.
"""

MAX_MESSAGE_CHARS = 1000  # a message quoting a pasted 100,000-character value stays one line


def bounded(message: str) -> str:
    """`message`, its middle cut (and the cut said) past MAX_MESSAGE_CHARS: the field named
    at its start and the allowed range at its end stay."""
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return f"{message[:600]} [... {len(message) - 900:,} characters cut ...] {message[-300:]}"


class HbmsimError(ValueError):
    """Base of every error caused by user input or user-supplied files. Its message is
    bounded (a value a user pasted is quoted, not echoed whole)."""

    def __init__(self, *args):
        if args and isinstance(args[0], str):
            args = (bounded(args[0]), *args[1:])
        super().__init__(*args)


class ConfigError(HbmsimError):
    """A field of a problem, hardware spec or tile choice is out of its allowed range."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


class SramOverflowError(HbmsimError):
    """A kernel's on-chip tiles need more SRAM than one thread block may use."""

    def __init__(self, kernel: str, footprint_bytes: int, capacity_bytes: int, tiles: str):
        self.kernel = kernel
        self.footprint_bytes = footprint_bytes
        self.capacity_bytes = capacity_bytes
        super().__init__(
            f"tiles: kernel {kernel!r} needs {footprint_bytes:,} bytes of SRAM with {tiles}, "
            f"but a thread block may use at most {capacity_bytes:,} bytes; choose smaller tiles"
        )


class TooLargeToExecuteError(HbmsimError):
    """The NumPy executor refuses sizes it cannot hold in memory or finish in reasonable time."""


class InputFileError(HbmsimError):
    """A file the user handed in cannot be used: unreadable, too large, not the expected
    format, or a field out of range. The message names the file and, where one is at fault,
    the field: `profile gpu.json: hbm_bytes_per_s: must be > 0 (got -1)`."""

    def __init__(self, what: str, path, message: str, field: str | None = None):
        self.what = what
        self.path = str(path)
        self.field = field
        where = f"{what} {self.path}"
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")


class TraceFileError(InputFileError):
    """A trace file is truncated, corrupted, of another version, not a trace file, or holds
    content no plan could have made (a checksum proves integrity, not sanity)."""


def check_int(field: str, value, lo: int, hi: int) -> int:
    """Return `value` if it is an integer in [lo, hi], else raise a ConfigError naming the range."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(field, f"must be an integer from {lo:,} to {hi:,} (got {value!r})")
    if not lo <= value <= hi:
        raise ConfigError(field, f"must be from {lo:,} to {hi:,} (got {value:,})")
    return value


def check_positive(field: str, value, hi: float = float("inf")) -> float:
    """Return `value` if it is a finite number in (0, hi], else raise a ConfigError."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise ConfigError(field, f"must be a number > 0 (got {value!r})")
    if not 0 < value <= hi:
        bound = "" if hi == float("inf") else f" and <= {hi:g}"
        raise ConfigError(field, f"must be > 0{bound} (got {value!r})")
    return value
