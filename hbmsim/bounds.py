"""Work bounds stated as costs: what the engine would do, estimated before it starts.

Why: a command that runs for minutes or exhausts memory is worse than one that refuses at once
and says what would work. Each interpretation states its cost and its limit where it lives
(counting: `counts.MAX_COUNT_CLASSES`; the executor: `execute.MAX_EXECUTE_ELEMENTS` and
`MAX_EXECUTE_S`; tracing: `trace.MAX_TRACE_RECORDS`); the engine's estimate is here because
it needs the counts and the occupancy together.

The engine's fast path simulates one process per group of CTAs that start together with the
same template, each stepping through its ops. Its work is estimated as
Σ over kernels of min(CTAs, waves × CTA classes) × ops per CTA ("op-steps"). Measured on one
core (fa2, causal and not, 1 to 16 heads, seq 2k-32k): 5 to 33 µs per op-step, so the bound
below is 10 to 60 seconds at worst.
"""

from __future__ import annotations

import math

from .errors import TooLargeToExecuteError
from .occupancy import occupancy

MAX_ENGINE_STEPS = 2_000_000  # op-steps of the fast path (see above)
# A batch run its user has chosen to wait for (the published set, a GPU run's measurements: a
# quarter of an hour on a 2-core machine) lets the engine take four times the interactive
# bound, a few minutes per point at worst. Past that a point keeps its reason, as everywhere.
BATCH_ENGINE_MAX_STEPS = 4 * MAX_ENGINE_STEPS
MAX_REPLAY_RECORDS = 1_000_000  # a trace replayed: every CTA may be its own group


def engine_steps(plan, counts) -> int:
    """The fast path's estimated op-steps for `plan` with its `counts` (a Result)."""
    hw = plan.hardware
    steps = 0
    for kernel, kc in zip(plan.kernels, counts.kernels, strict=True):
        occ = occupancy(
            hw, kernel.sram_bytes, kernel.threads_per_cta, kernel.name, kernel.registers_per_thread
        )
        waves = math.ceil(kernel.n_ctas / (occ * hw.sm_count))
        groups = min(kernel.n_ctas, waves * len(kernel.grid))
        steps += groups * math.ceil(kc.ops / kernel.n_ctas)
    return steps


def engine_problem(plan, counts, max_steps: int = MAX_ENGINE_STEPS) -> str | None:
    """Why the engine should not run this plan, or None when it is within `max_steps` (a batch
    caller that has said it will wait may pass more than the interactive default)."""
    steps = engine_steps(plan, counts)
    if steps <= max_steps:
        return None
    worst = "about a minute" if max_steps <= MAX_ENGINE_STEPS else "minutes"
    return (
        f"engine: this plan needs about {steps:,} simulation steps; the engine replays at most "
        f"{max_steps:,} ({worst} at worst): use larger tiles (bq, bk), fewer "
        "heads or a shorter sequence to simulate time; counts work at any size"
    )


def check_replay(n_records: int) -> None:
    """Refuse a trace whose replay could exceed the engine's bound."""
    if n_records > MAX_REPLAY_RECORDS:
        raise TooLargeToExecuteError(
            f"replay: this trace has {n_records:,} records; replay runs at most "
            f"{MAX_REPLAY_RECORDS:,}: trace a smaller problem, or use `hbmsim simulate`, "
            "which groups identical CTAs"
        )
