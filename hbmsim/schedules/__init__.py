"""Schedules: one module per algorithm family, each turning a problem into a `Plan`.

`make_plan` is the one entry point: it resolves default tiles, validates the user's tiles and
checks that every kernel's SRAM footprint fits one thread block.
"""

from __future__ import annotations

from ..errors import ConfigError, check_int
from ..hardware import Hardware
from ..problem import Problem
from ..program import Plan, Tiles
from . import flash, standard

ALGOS = ("standard", "fa1", "fa2")
MAX_TILE = 1 << 16


def default_tiles(algo: str, p: Problem, hw: Hardware) -> tuple[Tiles, tuple[str, ...]]:
    if algo == "standard":
        return standard.default_tiles(p, hw)
    if algo == "fa1":
        return flash.default_tiles_fa1(p, hw)
    return flash.default_tiles_fa2(p, hw)


def make_plan(
    algo: str,
    problem: Problem,
    hw: Hardware,
    bq: int | None = None,
    bk: int | None = None,
    bd: int | None = None,
) -> Plan:
    """The plan of `algo` for `problem` on `hw`. Tiles left as None take the algorithm default.

    Raises ConfigError for an unknown algorithm or bad tile values, SramOverflowError when the
    tiles do not fit the SRAM of one thread block.
    """
    if algo not in ALGOS:
        raise ConfigError("algo", f"must be one of {', '.join(ALGOS)} (got {algo!r})")
    for name, value in (("bq", bq), ("bk", bk), ("bd", bd)):
        if value is not None:
            check_int(name, value, 1, MAX_TILE)
    if bd is not None and algo != "standard":
        raise ConfigError("bd", "only applies to the standard algorithm's matmul kernels")
    notes: tuple[str, ...] = ()
    if bq is None or bk is None or (algo == "standard" and bd is None):
        defaults, notes = default_tiles(algo, problem, hw)
        bq = defaults.bq if bq is None else bq
        bk = defaults.bk if bk is None else bk
        bd = defaults.bd if bd is None else bd
        if (bq, bk, bd) != (defaults.bq, defaults.bk, defaults.bd):
            notes = ()  # the user chose some of the tiles: the default's story no longer applies
    tiles = Tiles(bq, bk, bd if algo == "standard" else None)
    if algo == "standard":
        plan = standard.plan(problem, hw, tiles)
    elif algo == "fa1":
        plan = flash.plan_fa1(problem, hw, tiles)
    else:
        plan = flash.plan_fa2(problem, hw, tiles)
    plan.check_fits()
    if notes:
        plan = Plan(
            plan.algo, plan.problem, plan.hardware, plan.tiles, plan.tensors, plan.kernels, notes
        )
    return plan


__all__ = ["ALGOS", "make_plan", "default_tiles"]
