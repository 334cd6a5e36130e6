"""Implementation mirrors: tile programs of what real attention libraries run.

The textbook programs (`hbmsim.algorithms`, `--algo`) are the algorithms as the papers write
them. A mirror is what one library launches for a given problem on a given GPU: its kernel
sequence, tiles and warps (chosen by the library's own rules), what it keeps in registers
rather than shared memory, the order its grid starts, GQA packing, padding to whole MMA tiles,
its split heuristics and the host-side operations of its Python wrapper. Every choice cites
the library's source in a comment; these plans are what measured timings are compared with.

One subpackage per library, each with its launch rules (`rules`), its kernels' tile programs
(`kernels`, `backward`) and the mirror that assembles a call (`mirror`): `pytorch/` (eager
attention), `flash_attn_1/`, `flash_attn_2/` (with `decoding`, Flash-Decoding as
`flash_attn_with_kvcache` runs it), `flash_attn_3/`; and `cupy/`, the validation run's vendor
baseline (not an `--impl`: kernels/validate.py uses it). `common` holds what every mirror
shares; `MIRRORS` below is the registry from `--impl NAME` to its mirror.
"""

from __future__ import annotations

import importlib

from ..algorithms import MAX_TILE
from ..errors import ConfigError, check_int
from ..gpu.hardware import Hardware
from ..problem.attention import Problem
from ..program.plan import Plan

# --impl NAME -> the module whose make_plan builds its plan (imported when first asked for)
MIRRORS = {
    "torch-eager": ".pytorch.eager",
    "flash-attn-1": ".flash_attn_1.mirror",
    "flash-attn-2": ".flash_attn_2.mirror",
    "flash-attn-3": ".flash_attn_3.mirror",
    "flash-decoding": ".flash_attn_2.decoding",
}
IMPLS = tuple(MIRRORS)
# Mirrors that model more than one release of their library, chosen as NAME@RELEASE
# (flash_attn_1.RELEASES: "1.0", the default, and "0.1", before its split heuristics;
# flash_attn_3.RELEASES: "latest", the default, and "2024-07", the beta its paper timed)
WITH_RELEASES = ("flash-attn-1", "flash-attn-3")


def make_impl_plan(
    impl: str, problem: Problem, hw: Hardware, bq: int | None = None, bk: int | None = None
) -> Plan:
    """The plan `impl` runs for `problem` (and its pass) on `hw`. `bq`, `bk` replace the
    library's tile sizes (the plan's notes say so). `impl` may name a release of a library
    whose mirror models several (`flash-attn-1@0.1`).

    Raises ConfigError for an unknown implementation, bad tiles, or a combination the library
    refuses (one line naming the limit as the library states it); SramOverflowError when
    overridden tiles do not fit.
    """
    impl, _, release = impl.partition("@")  # "flash-attn-1@0.1": a library's older release
    if impl not in IMPLS:
        raise ConfigError("impl", f"must be one of {', '.join(IMPLS)} (got {impl!r})")
    if release and impl not in WITH_RELEASES:
        raise ConfigError(
            "impl",
            f"{impl} has one release here; NAME@RELEASE applies to {', '.join(WITH_RELEASES)}",
        )
    for name, value in (("bq", bq), ("bk", bk)):
        if value is not None:
            check_int(name, value, 1, MAX_TILE)
    hw.check_dtype(problem.dtype)
    module = importlib.import_module(MIRRORS[impl], __name__)
    if release:
        return module.make_plan(problem, hw, bq, bk, release=release)
    return module.make_plan(problem, hw, bq, bk)


__all__ = ["IMPLS", "make_impl_plan"]
