"""Work bounds stated as costs: what the engine would do, estimated before it starts.

Why: a command that runs for minutes or exhausts memory is worse than one that refuses at once
and says what would work. Each interpretation states its cost and its limit where it lives
(counting: `counts.MAX_COUNT_CLASSES`; the executor: `execute.MAX_EXECUTE_ELEMENTS` and
`MAX_EXECUTE_S`; tracing: `trace.MAX_TRACE_RECORDS`); the engine's estimate is here because
it needs the counts and the occupancy together.

The engine's fast path simulates one process per group of CTAs that start together with the
same template, each stepping through its ops. Its work is estimated as the sum over kernels of
groups x ops per CTA ("op-steps"):

- a kernel of several classes launched class by class (a causal kernel's row blocks one
  after another) counts the groups its launches form when its CTAs take the free slots in
  launch order and finished groups give their slots back in launch order
  (`_launched_groups`); one that interleaves its classes counts the fewer of that and every
  wave's classes;
- a kernel of several classes in one wave starts them all at once, one group per program
  (classes whose programs are alike share one): it counts one CTA of each distinct length;
- cohorts that share the GPU skip the rounds it repeats (rounds.Rounds); the estimate does
  not count that saving, so for such kernels it is an upper bound;
- a stretched kernel (stretch.py) counts STRETCH_GROUP_STEPS per group it launches and
  walks each of its alone runs once (`walked_ops`, ALONE_RUNS_PER_CLASS a class);
- a kernel of one CTA class runs each wave alone on an idle GPU, so the engine simulates a
  wave only when its (size, L2 hits) is new and replays the rest: before the L2 model has
  decided the hits such a kernel counts its distinct wave sizes, and the engine checks the
  plan again with the hits (`patterns`). A group alone times a loop's repeated rounds at once,
  so its CTA counts the op-steps the engine walks through (`walked_ops`: a loop whose body is
  at most MAX_PERIOD compute steps taken for LOOP_ROUNDS rounds, any other loop in full) plus
  its template's ops at 1/ARRAY_OPS_PER_STEP of a step each (the array work of preparing them
  and deciding their L2 hits).

MAX_ENGINE_STEPS bounds an interactive call's replay to about a second (the app's Sweep page
simulates 36 tile shapes of one problem), past which the kernels are stretched
(`engine_choice`); SECONDS_PER_STEP, the slowest cost per op-step measured, turns an
estimate into the time a refusal states. The measurements behind both are in
docs/benchmarks.md, "The engine's bounds". The L2 model's cost is bounded apart, by memory
(simulation.ENGINE_MAX_BYTES).
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from ..errors import TooLargeToExecuteError
from ..gpu.occupancy import kernel_slots
from ..program.launch_runs import class_runs, unit_steps
from ..program.plan import Ctx
from .workload.layout import Layout

MAX_ENGINE_STEPS = 200_000  # op-steps of the replay in an interactive call (see above)
SECONDS_PER_STEP = 7.5e-6  # the slowest measured (see above), for the refusal's time
# A batch run its user has chosen to wait for (the published set, a GPU run's measurements: a
# few minutes on a 2-core machine) lets the replay take far more, a few minutes per point at
# worst, so its comparisons stay those of the step-by-step replay wherever it can run.
BATCH_ENGINE_MAX_STEPS = 8_000_000
# A timeline needs every step replayed: a caller that asks for one waits for up to this many
TIMELINE_MAX_STEPS = 2_000_000
# Past the replay's bound every kernel is stretched (engine_choice's third tier) while the
# stretch's own estimate keeps within this (a batch caller's bound, where larger, instead)
STRETCH_MAX_STEPS = 2_000_000
MAX_REPLAY_RECORDS = 1_000_000  # a trace replayed: every CTA may be its own group
# A group's loop repeats whole when its body holds up to MAX_PERIOD compute steps (groups.py
# and rounds.py compare states that far apart); a group alone walks such a body for about
# LOOP_ROUNDS rounds before it finds a round that repeats and times the rest at once
MAX_PERIOD = 4
LOOP_ROUNDS = 3
# Which kernels the engine stretches (stretch.py says why): several classes over at least
# MIN_WAVES waves, each of at least MIN_SLOTS CTAs; at least MIN_CLASSES classes (long loops)
# need only MIN_WAVES_LONG waves, and are stretched within the replay's bound too
MIN_WAVES = 8  # a stretched kernel's drain is one wave of at least this many
MIN_SLOTS = 128  # ... and its waves hold at least this many CTAs
MIN_CLASSES = 32
MIN_WAVES_LONG = 4  # ... over at least this many waves (fewer than MIN_WAVES)
# a template's ops cost the engine about this fraction of an op-step each in array work
ARRAY_OPS_PER_STEP = 6
# A stretched kernel's group costs the schedule about this many op-steps (its phases' ends,
# its hits looked up, its alone run found among those kept), and its alone runs are about
# ALONE_RUNS_PER_CLASS per class (the launches cut a class into a first piece, pieces alike and
# a last one; CTAs whose hits differ add runs this does not count)
STRETCH_GROUP_STEPS = 16
ALONE_RUNS_PER_CLASS = 3


def engine_steps(
    plan, counts, patterns: dict[int, int] | None = None, stretched: frozenset[int] = frozenset()
) -> int:
    """The fast path's estimated op-steps for `plan` with its `counts` (a Result); a one-class
    kernel's waves as `patterns` gives them, else its distinct wave sizes (see above); the
    kernels in `stretched` as stretch.py times them (each group once, alone)."""
    return sum(kernel_steps(plan, counts, patterns, stretched))


def kernel_steps(
    plan,
    counts,
    patterns: dict[int, int] | None = None,
    stretched: frozenset[int] = frozenset(),
    cap: int | None = None,
    cut: set[int] | None = None,
) -> list[int]:
    """`engine_steps` kernel by kernel. With a `cap`, a kernel's launches are walked only
    until its estimate passes it (an interleaved kernel of 10^8 CTAs forms about as many
    groups): its value is then a lower bound above `cap`, all a bound needs, and its index
    goes into `cut` when given."""
    out = []
    for k, (kernel, kc) in enumerate(zip(plan.kernels, counts.kernels, strict=True)):
        slots = kernel_slots(plan.hardware, kernel)
        waves = math.ceil(kernel.n_ctas / slots)
        per_cta = math.ceil(kc.ops / kernel.n_ctas)
        if k in stretched:  # each group a few events of the schedule; each alone run walks
            # its loop's rounds once, however many groups share it (stretch.AloneRuns keeps
            # them); each template is prepared once
            runs = _launch_runs(kernel)
            most = None if cap is None else cap // STRETCH_GROUP_STEPS
            groups = kernel.n_ctas if runs is None else _launched_groups(runs, slots, most)
            if most is not None and runs is not None and groups > most and cut is not None:
                cut.add(k)
            alone = min(groups, ALONE_RUNS_PER_CLASS * len(kernel.grid))
            templates = sum(kc.class_ops) if kc.class_ops else groups * per_cta
            out.append(
                groups * STRETCH_GROUP_STEPS
                + alone * walked_ops(plan, k)
                + math.ceil(templates / ARRAY_OPS_PER_STEP)
            )
            continue
        if len(kernel.grid) == 1:
            sizes = 1 + (waves > 1 and kernel.n_ctas % slots != 0)
            groups = (patterns or {}).get(k, sizes)
            walked = walked_ops(plan, k) + math.ceil(per_cta / ARRAY_OPS_PER_STEP)
            per_cta = min(per_cta, walked)
        elif waves == 1 and kc.class_ops:  # one launch: a group per program (see above)
            out.append(sum(set(kc.class_ops)))
            continue
        else:
            groups = min(kernel.n_ctas, waves * len(kernel.grid))  # each wave's classes
            if (runs := _launch_runs(kernel)) is not None:
                most = None if cap is None else cap // max(per_cta, 1)
                launched = _launched_groups(runs, slots, most)
                if most is not None and launched > most and cut is not None:
                    cut.add(k)
                groups = launched if kernel.launch_order is None else min(groups, launched)
        out.append(groups * per_cta)
    return out


def stretchable(plan, every: bool = False) -> frozenset[int]:
    """Kernels stretch.py times within its narrow margin: several CTA classes over at least
    MIN_WAVES waves (its drain, where it departs from the step-by-step replay, one wave of
    many), or at least MIN_CLASSES classes over MIN_WAVES_LONG (long loops: the drain weighs
    less), of at least MIN_SLOTS CTAs (enough that their transfers' bunching averages out),
    none waiting for an atomic add's round trip (timed in phase instead: see
    engine/stretch.py). `every`: every kernel of the plan, past the replay's bound (each
    within the margin docs/engine-internals.md states for its kind)."""
    if every:
        return frozenset(range(len(plan.kernels)))

    def waves_enough(kernel, slots: int) -> bool:
        waves = math.ceil(kernel.n_ctas / slots)
        return waves >= MIN_WAVES or (_long_loops(kernel) and waves >= MIN_WAVES_LONG)

    return frozenset(
        k
        for k, kernel in enumerate(plan.kernels)
        if len(kernel.grid) > 1
        and (slots := kernel_slots(plan.hardware, kernel)) >= MIN_SLOTS
        and waves_enough(kernel, slots)
        and (kernel.posted_atomics or not _walk(plan, k).atomics)
    )


def _long_loops(kernel) -> bool:
    """A kernel of at least limits.MIN_CLASSES classes: long loops, which the stretch
    times closely enough to be used within the replay's bound and over fewer waves."""
    return len(kernel.grid) >= MIN_CLASSES


def _interleaved(kernel) -> bool:
    """A kernel whose launch order interleaves its classes (the libraries' grid orders, M block
    fastest: a causal head's row blocks, or a ragged last block, one after another): its CTAs
    end out of step, so the step-by-step replay follows them one by one (3,732 groups of one
    CTA for flash-attn 2's causal forward at batch 4 x 32 heads x 4k tokens, d 128), and as
    many groups run together as CTAs, whose bunching the stretch averages well (see
    stretch.py)."""
    if kernel.launch_order is None:  # class by class
        return False
    runs = _launch_runs(kernel)  # None: more runs than it walks
    return runs is None or len(runs) > len(kernel.grid)


class _WalkCtx(Ctx):
    """Counts the op-steps a group running alone walks through in one CTA of a kernel: each
    loop segment's body once, then taken for LOOP_ROUNDS rounds where it is short enough for
    the engine to find a repeating round (limits.MAX_PERIOD compute steps or fewer),
    else for all its iterations."""

    compress_loops = True

    def __init__(self, plan):
        super().__init__(plan)
        self.body = [[0, 0]]  # per open loop: its body's ops and compute steps so far
        self.computing = False  # the last op was a compute (consecutive ones: one step)
        self.atomics = False  # the CTA sends an atomic add

    def _on_transfer(self, kind, buf, tensor, region, value):
        self.body[-1][0] += 1
        self.computing = False
        self.atomics |= kind == "atomic"

    def _on_compute(self, fn, args, matmul, vector, exp, out):
        top = self.body[-1]
        top[0] += 1
        top[1] += not self.computing
        self.computing = True

    def loop(self, segments):
        for seg in segments:
            if not len(seg):
                continue
            self.body.append([0, 0])
            try:
                yield seg[0]
            finally:
                ops, steps = self.body.pop()
            rounds = len(seg) if steps > MAX_PERIOD else min(len(seg), LOOP_ROUNDS)
            self.body[-1][0] += ops * rounds
            self.body[-1][1] += steps * rounds


def walked_ops(plan, k: int) -> int:
    """The op-steps one CTA of kernel k (one class) takes the engine when its group runs
    alone (see the module docstring)."""
    return _walk(plan, k).body[0][0]


def _walk(plan, k: int) -> _WalkCtx:
    """Kernel k's first class's CTA, walked (_WalkCtx)."""
    kernel = plan.kernels[k]
    ctx = _WalkCtx(plan)
    ctx.begin_kernel(k, kernel)
    rep = kernel.grid[0].representative
    ctx.begin_cta(rep, 1)
    kernel.program(ctx, rep)
    return ctx


def _launched_groups(runs: list[tuple[int, int]], slots: int, most: int | None = None) -> int:
    """The groups a kernel of several classes forms: its CTAs (`runs` of one class, in launch
    order) take the free slots, one group per class in each launch, and the slots of a group
    come back when it ends, taken to end in launch order (a causal kernel's shorter row blocks
    first). Launched class by class, most classes then launch whole, a few split where a launch
    runs out of slots; interleaved, a launch holds as many groups as classes it reaches.

    Where no class comes back in a later run (every kernel launched class by class), the count
    has a closed form (`_distinct_run_groups`), in the runs' number rather than the groups'
    (millions for a long causal kernel over many heads); else the launches are walked, up to
    `most` groups when given (then the count returned is a lower bound above it)."""
    if len({cls for cls, _ in runs}) == len(runs):
        return _distinct_run_groups([n for _, n in runs], slots)
    left = deque(runs)
    running: deque[int] = deque()
    free, groups = slots, 0
    while left:
        batch: dict[int, int] = {}  # class -> its CTAs in this launch
        while free and left:
            cls, n = left[0]
            take = min(free, n)
            batch[cls] = batch.get(cls, 0) + take
            free -= take
            if take == n:
                left.popleft()
            else:
                left[0] = (cls, n - take)
        groups += len(batch)
        if most is not None and groups > most:
            return groups
        running.extend(batch.values())
        if left:
            free += running.popleft()
    return groups


def _distinct_run_groups(sizes: list[int], slots: int) -> int:
    """`_launched_groups` for runs of distinct classes, of these `sizes`, in closed form.

    Why it holds: each launch after the first frees the oldest group and fills exactly its
    slots, so launch t + 1 starts where the stream of CTAs stood `slots` CTAs after group t
    started. The groups' boundaries are then the runs' starts and every boundary moved on by
    `slots`: the points r + k x slots below the CTA count, r a run's start. Two such
    progressions of one step meet exactly when their starts agree modulo `slots`, so each
    residue counts from its earliest start."""
    ns = np.asarray([n for n in sizes if n > 0], dtype=np.int64)
    if not len(ns):
        return 0
    starts = np.concatenate([[0], np.cumsum(ns[:-1])])
    _, first = np.unique(starts % slots, return_index=True)  # starts rise: first is earliest
    return int(np.sum(-(-(int(ns.sum()) - starts[first]) // slots)))


MAX_LAUNCH_RUNS = 200_000  # runs of one class in an interleaved launch order walked above


def _launch_runs(kernel) -> list[tuple[int, int]] | None:
    """(class, CTAs) runs of a kernel's launch order; None past MAX_LAUNCH_RUNS."""
    if kernel.launch_order is None:
        return [(i, c.size) for i, c in enumerate(kernel.grid)]
    if unit_steps(kernel.grid):  # from the classes' boxes: no array of every CTA
        return class_runs(kernel.grid, kernel.launch_order, MAX_LAUNCH_RUNS)
    cls = Layout(kernel.grid, kernel.launch_order).cls
    if cls is None:  # one class in its own order
        return [(0, kernel.n_ctas)]
    starts = np.concatenate([[0], np.flatnonzero(np.diff(cls)) + 1])
    if len(starts) > MAX_LAUNCH_RUNS:
        return None
    sizes = np.diff(np.concatenate([starts, [len(cls)]]))
    return list(zip(cls[starts].tolist(), sizes.tolist(), strict=True))


def engine_choice(
    plan,
    counts,
    max_steps: int = MAX_ENGINE_STEPS,
    patterns: dict[int, int] | None = None,
    replay: bool = False,
) -> tuple[frozenset[int], str | None]:
    """(the kernels to stretch, why the engine should not run this plan), in tiers:

    1. a kernel stretch.py may time with at least its MIN_CLASSES classes (long loops) or
       whose launch order interleaves its classes (`_interleaved`: the replay follows its CTAs
       one by one) is stretched wherever it is (its time within 1.4% of the step-by-step
       replay's in every measurement, its bytes the same, at a fraction of the cost); the
       plan's other kernels are replayed while that keeps within `max_steps` (a batch caller
       that has said it will wait may pass more than the interactive default);
    2. else every kernel `stretchable` is stretched if that brings the plan within it;
    3. else the other kernels are stretched too, the dearest to replay first, until the rest
       keeps within the bound (kernels that wait on atomic adds in phase with the GPU, few
       waves, few CTAs), while the stretched part keeps within STRETCH_MAX_STEPS: past the
       replay's bound a time within the stretch's stated margin is worth more than none;
    4. else a refusal with the estimate.

    `replay`: the caller needs every step replayed (a timeline), so nothing is stretched."""
    may = frozenset() if replay else stretchable(plan)
    long = frozenset(
        k for k in may if _long_loops(plan.kernels[k]) or _interleaved(plan.kernels[k])
    )
    stretch_bound = max(max_steps, STRETCH_MAX_STEPS)
    every = stretchable(plan, every=True)
    # each kernel's cost either way, once; walked no further than any bound here needs
    cut: set[int] = set()  # kernels whose estimate stopped past the bound: lower bounds
    as_replayed = kernel_steps(plan, counts, patterns, cap=stretch_bound)
    as_stretched = kernel_steps(plan, counts, patterns, every, cap=stretch_bound, cut=cut)

    def fits(stretched: frozenset[int]) -> bool:
        replayed = sum(n for k, n in enumerate(as_replayed) if k not in stretched)
        timed = sum(n for k, n in enumerate(as_stretched) if k in stretched)
        return replayed <= max_steps and timed <= stretch_bound

    steps = sum(as_stretched[k] if k in long else as_replayed[k] for k in range(len(as_replayed)))
    for tier in (long, may):
        if fits(tier):
            return tier, None
    if not replay:  # the kernels dearest to replay stretched first, as many as it takes
        tier = set(may)
        for k in sorted(range(len(as_replayed)), key=lambda k: -as_replayed[k]):
            if k not in tier:
                tier.add(k)
                if fits(frozenset(tier)):
                    return frozenset(tier), None
    if replay and fits(every):
        return frozenset(), (
            f"engine: a timeline needs every step replayed, and this plan needs about "
            f"{steps:,} simulation steps for that; the engine replays at most "
            f"{max_steps:,}: use a smaller problem for the timeline"
        )
    steps = sum(as_stretched)
    needs = f"more than {stretch_bound:,}" if cut else f"about {steps:,}"
    worst = stretch_bound * SECONDS_PER_STEP
    waves = "" if not patterns else f" ({sum(patterns.values()):,} waves differ in their L2 hits)"
    return frozenset(), (
        f"engine: this plan needs {needs} simulation steps{waves} even with every "
        f"kernel stretched; the engine takes at most {stretch_bound:,} (about {worst:.0f} s at "
        "worst): use larger tiles (bq, bk), fewer heads or a shorter sequence to simulate "
        "time; counts work at any size"
    )


def engine_problem(
    plan,
    counts,
    max_steps: int = MAX_ENGINE_STEPS,
    patterns: dict[int, int] | None = None,
    replay: bool = False,
) -> str | None:
    """Why the engine should not run this plan (engine_choice), or None."""
    return engine_choice(plan, counts, max_steps, patterns, replay)[1]


def check_replay(n_records: int) -> None:
    """Refuse a trace whose replay could exceed the engine's bound."""
    if n_records > MAX_REPLAY_RECORDS:
        raise TooLargeToExecuteError(
            f"replay: this trace has {n_records:,} records; replay runs at most "
            f"{MAX_REPLAY_RECORDS:,}: trace a smaller problem, or use `hbmsim simulate`, "
            "which groups identical CTAs"
        )
