"""The public entry points: one call from a problem to a result.

`simulate` is what the CLI and the app call; the engine (timing) plugs in here too, so both
always report the same thing for the same inputs.
"""

from __future__ import annotations

import dataclasses

from .counts import count_plan
from .execute import execute_plan
from .hardware import Hardware
from .problem import Problem
from .result import Result
from .schedules import make_plan


def simulate(
    problem: Problem,
    hardware: Hardware,
    algo: str = "fa2",
    bq: int | None = None,
    bk: int | None = None,
    bd: int | None = None,
    verify: bool = False,
    seed: int = 0,
) -> Result:
    """Exact counts of `algo` on `problem`; with verify, also execute and check against naive."""
    plan = make_plan(algo, problem, hardware, bq, bk, bd)
    result = count_plan(plan)
    if verify:
        execution = execute_plan(plan, seed=seed)
        result = dataclasses.replace(result, extra={**result.extra, "verify": execution.to_dict()})
    return result
