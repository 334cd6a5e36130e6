"""Hardware profiles from users: a JSON file of a preset's fields overridden (a calibration run
writes one), read through the one reader and checked field by field; and `--gpu`'s
resolution of a preset name or a profile path.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from ..files.reader import FileChecker, read_json_file
from .hardware import Hardware
from .presets import (
    PRESETS,
    get_hardware,
)

MAX_PROFILE_BYTES = 1024 * 1024  # a profile is a few hundred bytes; calibrated ones a few KiB


def load_profile(path: str | Path) -> Hardware:
    """A hardware profile from JSON: {"base": PRESET (optional), FIELD: value, ...}.

    Calibration runs write these; a profile may also be written by hand to describe a GPU that
    has no preset (then it must give every field). Read as a hostile input (hbmsim/files/reader.py):
    size, encoding and syntax first, then every field's type here and its range in Hardware.
    """
    data = read_json_file(path, "profile", MAX_PROFILE_BYTES)
    chk = FileChecker("profile", path)
    data = dict(chk.obj(data, "profile"))
    base_name = data.pop("base", None)
    if base_name is not None:
        base = get_hardware(chk.str(base_name, "base", choices=tuple(PRESETS)))
        data.setdefault("name", f"{base_name}+{Path(path).stem}")
        check_hardware_fields(chk, data, None, complete=False)
        with chk.fields_of(None):
            return base.with_overrides(**data)
    return check_hardware_fields(chk, data, None)


_FIELD_KINDS = {  # what JSON may give for each annotation of Hardware's fields
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "dict[str, float]": (dict, int, float),
    "dict[str, float] | None": (dict, int, float),  # null: not given (see the field)
    "dict[str, str]": (dict, str),
    "tuple[str, ...]": (list, str),
}


def _finite(value) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


def check_hardware_fields(chk, data: dict, prefix: str | None, complete: bool = True):
    """Every field of a hardware description read from a file (`chk`: an reader.FileChecker):
    known names, JSON types, then Hardware's own range checks. With `complete`, the Hardware;
    otherwise (fields overriding a preset) None once the types are right."""
    fields = {f.name: f for f in dataclasses.fields(Hardware)}

    def name(key):
        return f"{prefix}.{key}" if prefix else key

    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise chk.error(name(unknown[0]), f"is not a hardware field; allowed: {', '.join(fields)}")
    if complete:
        missing = [
            n
            for n, f in fields.items()
            if n not in data
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ]
        if missing:
            raise chk.error(
                prefix,
                f"lacks fields {', '.join(missing)}; give every field, or name a preset as 'base'",
            )
    for key, value in data.items():
        container, *scalar = _FIELD_KINDS[fields[key].type]
        if value is None and fields[key].type.endswith("| None"):
            continue
        if container is dict:
            table = chk.obj(value, name(key))
            for sub, v in table.items():
                if isinstance(v, bool) or not isinstance(v, tuple(scalar)) or not _finite(v):
                    want = "a finite number" if int in scalar else "a string"
                    raise chk.error(f"{name(key)}.{sub}", f"must be {want} (got {v!r:.40})")
        elif (
            isinstance(value, bool)
            or not isinstance(value, (container, *scalar))
            or not _finite(value)
        ):
            want = {"str": "a string", "int": "an integer"}.get(fields[key].type, "a finite number")
            raise chk.error(name(key), f"must be {want} (got {value!r:.40})")
    if not complete:
        return None
    with chk.fields_of(prefix):
        return Hardware(**data)


def resolve_hardware(gpu: str) -> Hardware:
    """A preset name, or a path to a profile JSON."""
    if gpu.endswith(".json"):
        return load_profile(gpu)
    return get_hardware(gpu)
