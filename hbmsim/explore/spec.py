"""An explore spec: the axes of a design-space study, read and checked before anything runs.

A spec is a small TOML file (format: docs/explore.md). Its axes (GPUs and any hardware field,
models or explicit shapes, batch, context lengths, passes, programs, tiles) span a grid; a spec
runs every point of it, or a seeded random sample of it. Everything a point needs is checked
here, for every value of every axis, so a malformed spec is refused with one line naming the
field before a single simulation starts, never half way through a run:

    explore spec study.toml: axes.hardware.l2_bytes[1]: must be from 0 to ... (got -1)

Points are produced lazily by index (a sample of a billion-point grid never builds the grid),
and each carries the inputs that identify it, so a rerun can skip what is already done.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import math
import operator
import random
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal

import numpy as np

from ..algorithms.names import ALGOS
from ..errors import ConfigError, HbmsimError, InputFileError
from ..files.numbers import NUMBER, decimal_number, spelling_error, toml_numbers
from ..files.reader import FileChecker, decode_text, read_bytes
from ..gpu.hardware import Hardware
from ..gpu.presets import PRESETS, get_hardware
from ..libraries.registry import IMPL_NAMES
from ..problem.attention import ITEMSIZE, MAX_BATCH, MAX_HEAD_DIM, MAX_HEADS, MAX_SEQ, Problem
from ..problem.models import MODELS, get_model

MAX_SPEC_BYTES = 1024 * 1024  # a spec is a few hundred bytes; a long explicit list a few KiB
MAX_POINTS = 1_000_000  # points one run may hold (grid, or samples); the table stays < 1 GB
MAX_AXIS_VALUES = 10_000  # values one axis may expand to
MAX_GRID = 10**15  # a sampled grid may be this large (it is never built)
MAX_TILE = 4096

PASS_NAMES = ("prefill", "decode", "training")
"""prefill: forward over the whole context (seq_q = seq_k = context); decode: one new token
against a KV cache of `context` tokens (seq_q = 1); training: forward + backward."""
PROGRAMS = ALGOS + IMPL_NAMES  # a library's older release as NAME@RELEASE too

# the problem axes, in the order a point's columns list them, with their defaults
PROBLEM_AXES = (
    "model",
    "heads",
    "kv_heads",
    "head_dim",
    "batch",
    "context",
    "pass",
    "causal",
    "dtype",
    "program",
    "bq",
    "bk",
)
# problem axes a point has only when its spec gives them: a point without one is the problem
# without that option (a contiguous K/V cache), and its inputs, its columns and its id are
# those of a spec written before the axis existed, so earlier tables still resume
OPTIONAL_AXES = ("page_size",)
DEFAULTS = {
    "gpu": ["h100-sxm"],
    "batch": [1],
    "pass": ["prefill"],
    "causal": [True],
    "dtype": ["fp16"],
    "program": ["fa2"],
    "bq": [None],
    "bk": [None],
}
TOP_KEYS = ("mode", "samples", "seed", "axes")


@dataclass(frozen=True)
class Point:
    """One simulation of a spec: its inputs, as the results table's input columns give them."""

    index: int  # its place in the spec's grid
    inputs: dict  # column -> value (None: the default, e.g. a program's own tiles)
    hardware: dict  # hardware field (dotted for a per-dtype rate) -> value, beyond the preset

    @property
    def problem(self) -> Problem:
        """The point's problem; a model with a sliding window (mistral-7b) brings it, as
        `simulate --model` does, once the context is longer than the window (such a model's
        points are causal: _check_combinations); an MLA model (deepseek-*) brings its latent
        K/V (head_dim_v, latent_kv) as it does there."""
        i = self.inputs
        decode = i["pass"] == "decode"
        model = i.get("model")
        window = get_model(model).attention(i["context"]) if model else {}
        shape = get_model(model).shape() if model else {}
        return Problem(
            **{k: shape[k] for k in ("head_dim_v", "latent_kv") if k in shape},
            window_left=window.get("window_left", -1),
            batch=i["batch"],
            heads=i["heads"],
            kv_heads=i["kv_heads"],
            head_dim=i["head_dim"],
            seq_q=1 if decode else i["context"],
            seq_k=i["context"],
            dtype=i["dtype"],
            causal=i["causal"],
            pass_="fwd+bwd" if i["pass"] == "training" else "fwd",
            page_size=i.get("page_size"),
        )

    @property
    def gpu(self) -> Hardware:
        return hardware_for(self.inputs["gpu"], self.hardware)


def hardware_for(preset: str, fields: dict) -> Hardware:
    """A preset with some fields replaced; `"matrix_flops_per_s.fp16"` replaces one dtype's rate."""
    base = get_hardware(preset)
    changes: dict = {}
    for key, value in fields.items():
        name, _, dtype = key.partition(".")
        if dtype:
            start = changes.get(name) or getattr(base, name) or getattr(base, _TABLE_BASE[name])
            table = dict(start)
            table[dtype] = value
            changes[name] = table
        else:
            changes[name] = value
    return base.with_overrides(**changes) if changes else base


# a per-dtype table that may be None (the same as another one) starts from that one
_TABLE_BASE = {"warp_mma_flops_per_s": "matrix_flops_per_s"}


@dataclass(frozen=True)
class ExploreSpec:
    """The checked axes of a study (each a list of values) and how to pick points from them."""

    axes: dict[str, list]  # problem axes and "gpu", in PROBLEM_AXES order after "gpu"
    hardware: dict[str, list]  # hardware field -> values
    mode: str = "grid"
    samples: int | None = None
    seed: int = 0
    path: str = ""

    @property
    def grid_size(self) -> int:
        return math.prod(len(v) for v in self._all_axes().values())

    @property
    def size(self) -> int:
        """Points this spec runs: the whole grid, or its sample."""
        return self.grid_size if self.mode == "grid" else min(self.samples, self.grid_size)

    def _all_axes(self) -> dict[str, list]:
        return {**self.axes, **{f"hw:{k}": v for k, v in self.hardware.items()}}

    @functools.cached_property
    def _indices(self) -> Sequence[int]:
        if self.mode == "grid":
            return range(self.grid_size)
        return sorted(random.Random(self.seed).sample(range(self.grid_size), self.size))

    def indices(self, limit: int | None = None) -> Sequence[int]:
        """The grid indices this spec runs, in run order (the first `limit`, when given). A
        sample is drawn once per spec (a million draws take a second)."""
        return self._indices if limit is None else self._indices[:limit]

    def point(self, index: int) -> Point:
        """The point at `index` of the grid."""
        chosen, rest = {}, index
        for name, vals in reversed(self._all_axes().items()):
            rest, at = divmod(rest, len(vals))
            chosen[name] = vals[at]
        return _point(index, chosen)

    def points(self, limit: int | None = None) -> Iterator[Point]:
        """Each point in order (the first `limit` only, when given), built as it is asked for."""
        for index in self.indices(limit):
            yield self.point(index)

    def point_ids(self, limit: int | None = None) -> Iterator[tuple[int, str]]:
        """(grid index, point_id) of each point in order, without building the points: the
        key's JSON is joined from each axis value's piece, written once per value (a million
        points' ids in seconds, where building each point and its JSON took 30 s)."""
        axes = self._all_axes()
        keys = _id_pieces(axes)
        sizes = [len(v) for v in axes.values()]
        indices = self.indices(limit)
        if self.mode == "grid":
            combos = itertools.islice(itertools.product(*map(range, sizes)), len(indices))
        else:
            combos = _digits(indices, sizes)
        # the pieces of single-valued axes written once into a template; the others filled in
        # per point, looked up in C (map over list.__getitem__), not in a Python loop
        varying = [(axis, table) for axis, table in keys if len(table) > 1]
        template = "{%s}" % ",".join(  # noqa: UP031 - the result is itself a %-template
            "%s" if len(table) > 1 else table[0].replace("%", "%%") for _, table in keys
        )
        tables = [table for _, table in varying]
        pick = operator.itemgetter(*[axis for axis, _ in varying], 0, 0)  # always a tuple
        get = list.__getitem__
        for index, combo in zip(indices, combos, strict=True):
            yield index, _digest(template % tuple(map(get, tables, pick(combo))))


def _digits(indices: Sequence[int], sizes: list[int]) -> Iterator[tuple[int, ...]]:
    """The value index of each axis at each grid index (the last axis varies fastest); a
    sampled grid holds at most MAX_GRID < 2**63 points, so int64 holds every index."""
    rest = np.asarray(indices, dtype=np.int64)
    columns = []
    for n in reversed(sizes):
        columns.append((rest % n).tolist())
        rest = rest // n
    return zip(*reversed(columns), strict=True)


def point_id(point: Point) -> str:
    """A stable key of the point's inputs (not of its place in a grid: the same simulation in
    another spec has the same key): a hash of their JSON, keys sorted."""
    keyed = {**point.inputs, **{f"hw:{k}": v for k, v in sorted(point.hardware.items())}}
    return _digest(json.dumps(keyed, sort_keys=True, separators=(",", ":")))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _id_pieces(axes: dict[str, list]) -> list[tuple[int, list[str]]]:
    """For each key of a point's JSON (point_id's, in its sorted order): the axis it comes
    from and its `"key":value` piece for each value of that axis."""
    names = list(axes)
    sources: dict[str, tuple[str, object]] = {"gpu": ("gpu", None)}  # key -> (axis, how)
    for name in PROBLEM_AXES:
        if name in ("model", "heads", "kv_heads", "head_dim") and "model" in axes:
            sources[name] = ("model", name)  # the model's shape
        elif name == "kv_heads" and axes.get("kv_heads") == [None]:
            sources[name] = ("heads", None)  # kv_heads = heads
        elif name in axes:
            sources[name] = (name, None)
        else:
            sources[name] = (None, None)  # model without a model axis: null
    sources.update({k: (k, None) for k in OPTIONAL_AXES if k in axes})
    sources.update({k: (k, None) for k in names if k.startswith("hw:")})
    keys = []
    for key in sorted(sources):
        axis, how = sources[key]
        if axis is None:
            keys.append((0, [_piece(key, None)] * len(axes[names[0]])))
            continue
        values = axes[axis]
        if how is not None:
            values = [get_model(m).shape()[how] if how != "model" else m for m in values]
        keys.append((names.index(axis), [_piece(key, v) for v in values]))
    return keys


def _piece(key: str, value) -> str:
    return json.dumps(key) + ":" + json.dumps(value)


def _point(index: int, chosen: dict) -> Point:
    inputs = {"gpu": chosen["gpu"]}
    model = chosen.get("model")
    shape = get_model(model).shape() if model else {}
    for name in PROBLEM_AXES:
        inputs[name] = shape[name] if name in shape else chosen.get(name)
    if inputs["kv_heads"] is None:
        inputs["kv_heads"] = inputs["heads"]
    inputs.update({k: chosen[k] for k in OPTIONAL_AXES if k in chosen})
    hardware = {k[3:]: v for k, v in chosen.items() if k.startswith("hw:")}
    return Point(index, inputs, hardware)


def read_spec(path) -> ExploreSpec:
    """The spec in `path`, every field checked; one InputFileError naming the field if not."""
    data = read_bytes(path, "explore spec", MAX_SPEC_BYTES)
    return parse_spec_text(decode_text(bytes(data), "explore spec", path), path)


def parse_spec_text(text: str, path="<spec>") -> ExploreSpec:
    """A spec from its TOML text (a file's, or one typed into the app), every field checked;
    `path` names it in errors. Numbers are spelled as on the command line (files/numbers.py):
    TOML's `1_000` and `0x10` are refused with the same words, and its floats are read
    exactly (as Decimal) until each axis takes them as its kind."""
    chk = FileChecker("explore spec", path)
    for field, line, token in toml_numbers(text):
        if not NUMBER.fullmatch(token):
            raise chk.error(field or f"line {line}", spelling_error(token))
    try:
        doc = tomllib.loads(text, parse_float=Decimal)
    except tomllib.TOMLDecodeError as exc:
        raise InputFileError("explore spec", path, f"is not valid TOML ({exc})") from None
    except RecursionError:
        raise InputFileError("explore spec", path, "nests too deeply to be a spec") from None
    return parse_spec(doc, path)


def parse_spec(doc: dict, path="<spec>") -> ExploreSpec:
    """A spec from its parsed TOML (or an equal dict), every field checked."""
    chk = FileChecker("explore spec", path)
    chk.obj(doc, "spec", required=("axes",))
    unknown = sorted(set(doc) - set(TOP_KEYS))
    if unknown:
        raise chk.error(unknown[0], f"is not a spec field; allowed: {', '.join(TOP_KEYS)}")
    mode = chk.str(doc.get("mode", "grid"), "mode", choices=("grid", "sample"))
    samples = doc.get("samples")
    if mode == "sample":
        if samples is None:
            raise chk.error("samples", "sample mode needs the number of points to draw")
        samples = chk.int(_num(chk, samples, "samples", True), "samples", 1, MAX_POINTS)
    elif samples is not None:
        raise chk.error("samples", 'applies to mode = "sample" only')
    seed = chk.int(_num(chk, doc.get("seed", 0), "seed", True), "seed", 0, 2**63 - 1)
    axes_doc = dict(chk.obj(doc["axes"], "axes"))
    hardware_doc = chk.obj(axes_doc.pop("hardware", {}), "axes.hardware")
    axes = _problem_axes(chk, axes_doc)
    hardware = {
        key: _values(chk, value, f"axes.hardware.{key}", _hardware_kind(chk, key))
        for key, value in hardware_doc.items()
    }
    spec = ExploreSpec(axes, hardware, mode, samples, seed, str(path))
    if spec.grid_size > (MAX_POINTS if mode == "grid" else MAX_GRID):
        raise chk.error(
            "axes",
            f"span {spec.grid_size:,} points; a grid may hold at most {MAX_POINTS:,} "
            '(draw a sample of a larger one: mode = "sample")',
        )
    _check_combinations(chk, spec)
    return spec


def _problem_axes(chk: FileChecker, doc: dict) -> dict[str, list]:
    allowed = ("gpu", *PROBLEM_AXES, *OPTIONAL_AXES, "hardware")
    unknown = sorted(set(doc) - set(allowed))
    if unknown:
        raise chk.error(f"axes.{unknown[0]}", f"is not an axis; allowed: {', '.join(allowed)}")
    explicit = [k for k in ("heads", "kv_heads", "head_dim") if k in doc]
    if "model" in doc and explicit:
        raise chk.error(
            f"axes.{explicit[0]}", "give models or explicit shapes (heads, head_dim), not both"
        )
    if "model" not in doc and not {"heads", "head_dim"} <= set(doc):
        raise chk.error("axes", "needs model, or heads and head_dim (kv_heads optional)")
    kinds = {
        "gpu": ("choice", tuple(PRESETS)),
        "model": ("choice", tuple(MODELS)),
        "heads": ("int", 1, MAX_HEADS),
        "kv_heads": ("int", 1, MAX_HEADS),
        "head_dim": ("int", 1, MAX_HEAD_DIM),
        "batch": ("int", 1, MAX_BATCH),
        "context": ("int", 1, MAX_SEQ),
        "pass": ("choice", PASS_NAMES),
        "causal": ("bool",),
        "dtype": ("choice", tuple(ITEMSIZE)),
        "program": ("choice", PROGRAMS),
        "bq": ("int", 1, MAX_TILE),
        "bk": ("int", 1, MAX_TILE),
        "page_size": ("int", 1, MAX_SEQ),  # which sizes a program takes: its own refusal
    }
    if "context" not in doc:
        raise chk.error("axes.context", "is required: the context lengths (tokens) to study")
    axes = {"gpu": _values(chk, doc.get("gpu", DEFAULTS["gpu"]), "axes.gpu", kinds["gpu"])}
    for name in PROBLEM_AXES:
        if name in doc:
            axes[name] = _values(chk, doc[name], f"axes.{name}", kinds[name])
        elif name in DEFAULTS:
            axes[name] = list(DEFAULTS[name])
        elif name == "kv_heads" and "heads" in doc:
            axes[name] = [None]  # = heads
    for name in OPTIONAL_AXES:
        if name in doc:
            axes[name] = _values(chk, doc[name], f"axes.{name}", kinds[name])
    return axes


def _hardware_kind(chk: FileChecker, key: str) -> tuple:
    fields = {f.name: f for f in dataclasses.fields(Hardware)}
    name, dot, dtype = key.partition(".")
    numeric = [n for n, f in fields.items() if f.type in ("int", "float")]
    tables = [n for n, f in fields.items() if f.type.startswith("dict[str, float]")]
    where = f"axes.hardware.{key}"
    if dot:
        if name not in tables:
            raise chk.error(where, f"per-dtype rates are {', '.join(t + '.DTYPE' for t in tables)}")
        allowed = tuple(get_hardware("h100-sxm").matrix_flops_per_s)
        if dtype not in allowed:
            raise chk.error(where, f"dtype must be one of {', '.join(allowed)} (got {dtype!r})")
        return ("num",)
    if name not in numeric:
        extra = ", ".join(t + ".DTYPE" for t in tables)
        raise chk.error(
            where, f"is not a numeric hardware field; allowed: {', '.join(numeric)}, {extra}"
        )
    return ("int", 0, 1 << 62) if fields[name].type == "int" else ("num",)


def _values(chk: FileChecker, value, field: str, kind: tuple) -> list:
    """An axis: a list of values, one value, or a range table {from, to, step | factor}."""
    if isinstance(value, dict):
        if kind[0] not in ("int", "num"):
            raise chk.error(field, "a range {from, to, step or factor} needs a numeric axis")
        values = _range(chk, value, field, integer=kind[0] == "int")
    else:
        values = value if isinstance(value, list) else [value]
    if not values:
        raise chk.error(field, "is empty; give at least one value")
    if len(values) > MAX_AXIS_VALUES:
        raise chk.error(
            field, f"holds {len(values):,} values; an axis may hold at most {MAX_AXIS_VALUES:,}"
        )
    out = []
    for i, v in enumerate(values):
        at = f"{field}[{i}]" if len(values) > 1 or isinstance(value, list) else field
        v = _num(chk, v, at, kind[0] == "int")
        if kind[0] == "choice":
            out.append(chk.str(v, at, choices=kind[1]))
        elif kind[0] == "bool":
            out.append(chk.bool(v, at))
        elif kind[0] == "int":
            out.append(chk.int(v, at, kind[1], kind[2]))
        elif isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise chk.error(at, f"must be a finite number (got {v!r:.40})")
        else:
            out.append(v)
    if len(set(out)) != len(out):
        dup = next(v for v in out if out.count(v) > 1)
        raise chk.error(field, f"lists {dup!r} twice; each value once")
    return out


def _range(chk: FileChecker, table: dict, field: str, integer: bool) -> list:
    keys = set(table)
    if (
        not {"from", "to"} <= keys
        or len(keys & {"step", "factor"}) != 1
        or keys - {"from", "to", "step", "factor"}
    ):
        raise chk.error(field, "a range is {from, to, step} or {from, to, factor}")
    kind = int if integer else (int, float)
    table = {key: _num(chk, v, f"{field}.{key}", integer) for key, v in table.items()}
    for key in keys:
        v = table[key]
        if isinstance(v, bool) or not isinstance(v, kind) or not math.isfinite(v):
            want = "an integer" if integer else "a finite number"
            raise chk.error(f"{field}.{key}", f"must be {want} (got {v!r:.40})")
    lo, hi = table["from"], table["to"]
    if lo > hi:
        raise chk.error(field, f"is an empty range: from {lo} is past to {hi}")
    values, v = [], lo
    if "step" in table:
        step = table["step"]
        if step <= 0:
            raise chk.error(f"{field}.step", f"must be > 0 (got {step})")
        if hi - lo > step * MAX_AXIS_VALUES:  # a product: a tiny step cannot overflow it
            raise chk.error(
                field,
                f"expands to more than {MAX_AXIS_VALUES:,} values (from {lo} to {hi} in "
                f"steps of {step}); an axis may hold at most {MAX_AXIS_VALUES:,}",
            )
        n = math.floor((hi - lo) / step + 1e-9) + 1
        return [lo + i * step for i in range(n)]
    if table["factor"] <= 1 or (lo <= 0):
        raise chk.error(f"{field}.factor", "a geometric range needs factor > 1 and from > 0")
    while v <= hi * (1 + 1e-12) and len(values) <= MAX_AXIS_VALUES:
        values.append(v)
        v = v * table["factor"]
    return values


def _num(chk: FileChecker, value, field: str, integer: bool):
    """A number as an axis of its kind takes it: a TOML float (read exactly, as Decimal) as
    an int for an integer axis when it is whole (`4e3`), else as a float; other values as
    they are, for the axis' own check to name."""
    if not isinstance(value, Decimal):
        return value
    try:
        number = decimal_number(value, integer)
    except ValueError as exc:
        raise chk.error(field, str(exc)) from None
    return number if integer else float(number)


def _check_combinations(chk: FileChecker, spec: ExploreSpec) -> None:
    """Every combination of problem axes makes a valid Problem, and every GPU with every
    hardware value a valid Hardware; only the axes each depends on are combined."""
    a = spec.axes
    shapes = (
        [{**get_model(m).shape(), "model": m} for m in a["model"]]
        if "model" in a
        else [
            {"heads": h, "kv_heads": k if k is not None else h, "head_dim": d}
            for h, k, d in itertools.product(a["heads"], a["kv_heads"], a["head_dim"])
        ]
    )
    where = "axes.model" if "model" in a else "axes.kv_heads"
    for m in a.get("model", []):
        model = get_model(m)
        if model.alternating:  # a point is one layer; which kind would be a silent choice
            raise chk.error(
                "axes.model",
                f"{m} alternates local and global layers and a point is one layer: give that "
                f"layer's shape (heads = [{model.heads}], kv_heads = [{model.kv_heads}], "
                f"head_dim = [{model.head_dim}]), or run `hbmsim simulate --model {m}` for "
                "both kinds and the per-model total",
            )
        if model.window is not None and False in a["causal"]:
            raise chk.error(
                "axes.causal",
                f"{m} attends causally over a sliding window of {model.window:,} keys "
                f"({model.window_source}): use causal = [true]",
            )
    for shape, context, pass_, causal, dtype in itertools.product(
        shapes, a["context"], a["pass"], a["causal"], a["dtype"]
    ):
        inputs = {
            **shape,
            "batch": a["batch"][0],
            "context": context,
            "pass": pass_,
            "causal": causal,
            "dtype": dtype,
        }
        try:
            _ = Point(0, inputs, {}).problem
        except ConfigError as exc:
            raise chk.error(
                where if exc.field in shape else f"axes.{exc.field}",
                f"{exc} (with {_describe(inputs)})",
            ) from None
    keys = list(spec.hardware)
    for gpu in a["gpu"]:
        for combo in itertools.product(*(range(len(v)) for v in spec.hardware.values())):
            fields = {k: spec.hardware[k][i] for k, i in zip(keys, combo, strict=True)}
            try:
                hardware_for(gpu, fields)
            except HbmsimError as exc:
                field = getattr(exc, "field", None)
                at = next((k for k in keys if k.partition(".")[0] == field), keys[0])
                message = str(exc).split(": ", 1)[-1]
                raise chk.error(
                    f"axes.hardware.{at}[{combo[keys.index(at)]}]",
                    f"{message} (on {gpu}, with {_describe(fields)})",
                ) from None


def _describe(inputs: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in inputs.items())
