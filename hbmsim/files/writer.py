"""The one place where hbmsim writes files: traces, sweeps, timelines, validation results.

Why one place: a write can fail half way (a full disk, an interrupt) and a path can be
unwritable (a directory, a missing folder, /proc, a device). Two rules hold for every output:

- `check_writable(path, field)` refuses a path that cannot be written *before* the work
  starts, by creating (and removing) a probe file beside the target, so a long run never ends
  in "cannot write". Devices and pipes are refused too: an output is a file that can be
  replaced whole.
- `open_atomic` / `write_atomic` write to a temporary file beside the target and rename it
  over the target only on success, so a failed or interrupted write leaves no half file and an
  existing file survives untouched.

Errors are one line, `FIELD: cannot write PATH: reason`, raised as ConfigError.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..errors import ConfigError


def _target(path, field: str) -> Path:
    """The file a write lands in: symlinks followed (a link stays a link to the new file)."""
    text = os.fspath(path) if path is not None else ""
    if not text or not text.strip():
        raise ConfigError(field, "give a file name (got an empty path)")
    if text.endswith(os.sep):
        raise ConfigError(field, f"{text} names a folder; give a file name")
    return Path(os.path.realpath(text))


def check_writable(path, field: str) -> Path:
    """The resolved target, or a ConfigError saying why `path` cannot be written."""
    target = _target(path, field)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        raise ConfigError(field, f"cannot write {path}: a part of it is not a folder") from None
    except OSError as exc:
        raise ConfigError(field, f"cannot write {path}: {exc.strerror}") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise ConfigError(field, f"{path} is a folder; give a file name inside it")
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(field, f"{path} is a device or pipe, not a file; give a file path")
        if not os.access(target, os.W_OK):  # renaming over it would work: respect the mode
            raise ConfigError(field, f"{path} is read-only; it is left as it is")
    folder = target.parent
    if not folder.is_dir():
        raise ConfigError(field, f"cannot write {path}: folder {folder} does not exist")
    try:  # the only sure test: create a file there (root passes os.access on /proc)
        fd, probe = tempfile.mkstemp(prefix=f".{target.name[:60]}.", suffix=".probe", dir=folder)
    except OSError as exc:
        raise ConfigError(field, f"cannot write in {folder}: {exc.strerror}") from None
    os.close(fd)
    os.unlink(probe)
    return target


def check_not_input(path, field: str, inputs: dict[str, object]) -> None:
    """Refuse an output that is one of the command's inputs (`--gpu g.json -o g.json`): the
    result would replace the file it was computed from. `inputs`: flag -> path (None: not
    given); the same file reached by another name or a hard link counts too."""
    target = _target(path, field)
    for flag, given in inputs.items():
        if given is None or not os.fspath(given).strip():
            continue
        source = Path(os.path.realpath(os.fspath(given)))
        same = source == target
        if not same:
            with contextlib.suppress(OSError):
                same = os.path.samefile(source, target)
        if same:
            raise ConfigError(
                field, f"{path} is the {flag} input of this command; write the output elsewhere"
            )


def check_folder(path, field: str) -> Path:
    """A folder outputs will be written into: existing, or creatable under an existing one;
    refused (with the reason) before the work starts."""
    text = os.fspath(path) if path is not None else ""
    if not text or not text.strip():
        raise ConfigError(field, "give a folder (got an empty path)")
    folder = Path(os.path.realpath(text))
    existing = folder
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(field, f"{path}: {existing} is a file, not a folder")
    try:  # a probe file where the first new folder (or the file) would be created
        fd, probe = tempfile.mkstemp(prefix=".hbmsim.", suffix=".probe", dir=existing)
    except OSError as exc:
        raise ConfigError(field, f"cannot write in {existing}: {exc.strerror}") from None
    os.close(fd)
    os.unlink(probe)
    return folder


@contextlib.contextmanager
def open_atomic(path, field: str, mode: str = "w", newline: str | None = None) -> Iterator:
    """A file object for `path`; on success the written file replaces the target whole, on
    any failure (an exception, an interrupt) the target is left as it was."""
    if mode not in ("w", "wb"):
        raise ValueError(f"open_atomic writes whole files: mode 'w' or 'wb', not {mode!r}")
    target = check_writable(path, field)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name[:60]}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise ConfigError(field, f"cannot write in {target.parent}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, mode, newline=newline) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _mode_for(target))
        os.replace(tmp, target)
    except OSError as exc:
        _remove(tmp)
        raise ConfigError(field, f"cannot write {path}: {exc.strerror or exc}") from None
    except BaseException:
        _remove(tmp)
        raise


def write_atomic(path, data: bytes | str, field: str) -> int:
    """Write `data` (bytes, or text as UTF-8) whole; returns the bytes written."""
    raw = data.encode() if isinstance(data, str) else data
    with open_atomic(path, field, "wb") as f:
        f.write(raw)
    return len(raw)


def _mode_for(target: Path) -> int:
    """An existing file keeps its permissions; a new one is readable by all, writable by its
    owner (the temporary file starts private; reading the umask is not thread-safe)."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        return 0o644


def _remove(tmp: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(tmp)
