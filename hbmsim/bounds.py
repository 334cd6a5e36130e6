"""Work bounds stated as costs: what the engine would do, estimated before it starts.

Why: a command that runs for minutes or exhausts memory is worse than one that refuses at once
and says what would work. Each interpretation states its cost and its limit where it lives
(counting: `counts.MAX_COUNT_CLASSES`; the executor: `execute.MAX_EXECUTE_ELEMENTS` and
`MAX_EXECUTE_S`; tracing: `trace.MAX_TRACE_RECORDS`); the engine's estimate is here because
it needs the counts and the occupancy together.

The engine's fast path simulates one process per group of CTAs that start together with the
same template, each stepping through its ops. Its work is estimated as
Σ over kernels of groups × ops per CTA ("op-steps"), groups being min(CTAs, waves × CTA
classes) for a kernel whose launch order interleaves its classes, and for one launched class
by class (a causal kernel's row blocks one after another) the groups its launches form when
finished groups give their slots back in launch order (`_class_by_class_groups`: fa2 causal
at 16k tokens x 16 heads, 2.9 M estimated before, 0.9 M now, 0.39 M simulated). Measured on
one core, the whole `simulate` call over the estimate (fa2, fa1, flash-attn-1 and -2, causal,
1 to 4 x 16 heads, 8k-32k tokens, estimates of 0.2 M to 2 M): 4.0 to 6.5 µs per op-step, so
the bound below is about 8 to 13 seconds at worst. It stays there rather than growing to a
minute: the app's Sweep page simulates 36 tile shapes of one problem.

A kernel of one CTA class is the exception: each of its waves starts on an idle GPU and runs
alone, so the engine simulates a wave only when its (size, L2 hits) is new and replays the
rest (engine.py). How many are new is known once the L2 model has decided the hits: before,
such a kernel counts its distinct wave sizes (one or two), and the engine checks the plan
again with the hits (`patterns`: the number of distinct waves per one-class kernel).
"""

from __future__ import annotations

import math
from collections import deque

from .errors import TooLargeToExecuteError
from .occupancy import occupancy

MAX_ENGINE_STEPS = 2_000_000  # op-steps of the fast path (see above)
SECONDS_PER_STEP = 6.5e-6  # the slowest measured (see above), for the refusal's time
# A batch run its user has chosen to wait for (the published set, a GPU run's measurements: a
# few minutes on a 2-core machine) lets the engine take four times the interactive
# bound, a few minutes per point at worst. Past that a point keeps its reason, as everywhere.
BATCH_ENGINE_MAX_STEPS = 4 * MAX_ENGINE_STEPS
MAX_REPLAY_RECORDS = 1_000_000  # a trace replayed: every CTA may be its own group


def engine_steps(plan, counts, patterns: dict[int, int] | None = None) -> int:
    """The fast path's estimated op-steps for `plan` with its `counts` (a Result); a one-class
    kernel's waves as `patterns` gives them, else its distinct wave sizes (see above)."""
    hw = plan.hardware
    steps = 0
    for k, (kernel, kc) in enumerate(zip(plan.kernels, counts.kernels, strict=True)):
        occ = occupancy(
            hw, kernel.sram_bytes, kernel.threads_per_cta, kernel.name, kernel.registers_per_thread
        )
        slots = occ * hw.sm_count
        waves = math.ceil(kernel.n_ctas / slots)
        if len(kernel.grid) == 1:
            sizes = 1 + (waves > 1 and kernel.n_ctas % slots != 0)
            groups = (patterns or {}).get(k, sizes)
        elif kernel.launch_order is None:
            groups = _class_by_class_groups([c.size for c in kernel.grid], slots)
        else:
            groups = min(kernel.n_ctas, waves * len(kernel.grid))
        steps += groups * math.ceil(kc.ops / kernel.n_ctas)
    return steps


def _class_by_class_groups(sizes: list[int], slots: int) -> int:
    """The groups a kernel launched class by class forms: its CTAs take the free slots in
    launch order, one group per class in each launch, and the slots of a group come back
    when it ends, taken to end in launch order (a causal kernel's shorter row blocks first).
    Most classes then launch whole, a few split where a launch runs out of slots."""
    runs = deque(sizes)
    running: deque[int] = deque()
    free, groups = slots, 0
    while runs:
        while free and runs:
            take = min(free, runs[0])
            groups += 1
            running.append(take)
            free -= take
            if take == runs[0]:
                runs.popleft()
            else:
                runs[0] -= take
        if runs:
            free += running.popleft()
    return groups


def engine_problem(
    plan, counts, max_steps: int = MAX_ENGINE_STEPS, patterns: dict[int, int] | None = None
) -> str | None:
    """Why the engine should not run this plan, or None when it is within `max_steps` (a batch
    caller that has said it will wait may pass more than the interactive default)."""
    steps = engine_steps(plan, counts, patterns)
    if steps <= max_steps:
        return None
    worst = max_steps * SECONDS_PER_STEP
    waves = "" if not patterns else f" ({sum(patterns.values()):,} waves differ in their L2 hits)"
    return (
        f"engine: this plan needs about {steps:,} simulation steps{waves}; the engine replays "
        f"at most {max_steps:,} (about {worst:.0f} s at worst): use larger tiles (bq, bk), fewer "
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
