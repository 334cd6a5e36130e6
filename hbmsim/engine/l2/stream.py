"""Every wave decided in one unbroken stream: kernels whose waves cannot be skipped (no
translation period, or too short), each by the cheapest exact rule that applies (a one-class
kernel by its runs' first accesses, runs.py, or one CTA's stream, lockstep.py), any other
access by access.
"""

from __future__ import annotations

import numpy as np

from ..workload.work import KernelWork
from .budget import check_decided
from .lockstep import LockstepWave
from .lru import (
    NUMPY_STEPS_PER_ACCESS,
    lru_answer,
)
from .order import in_logical_order, joined_streams
from .runs import (
    PairedRunHitTable,
    PairedRuns,
    RunHitTable,
    RunStream,
    compressible,
    run_stream_bytes,
)
from .table import full_table


class WholeStream:
    """How `decide_unbroken` decides every wave: per kernel a RunStream, a LockstepWave (whichever
    decides fewer) or None (every access), the last kernel's PairedRuns where its rule may
    apply, and the accesses all that decides (`cost`). A RunStream whose arrays over every
    CTA would pass `max_bytes` is not built: the kernel then costs every access, which the
    budget refuses with its estimate."""

    def __init__(self, kernels, slots, capacity: int, lockstep, max_bytes: int | None = None):
        runs = [
            RunStream(kw, max(1, s))
            if compressible(kw) and (max_bytes is None or run_stream_bytes(kw) <= max_bytes)
            else None
            for kw, s in zip(kernels, slots, strict=True)
        ]
        self.streams = [
            lock if lock is not None and (run is None or lock.decided < run.heads) else run
            for run, lock in zip(runs, lockstep, strict=True)
        ]
        self.paired = None
        if kernels and runs[-1] is not None:
            paired = PairedRuns(runs[-1])
            lock = lockstep[-1]
            if paired.ok(capacity) and (lock is None or paired.heads <= lock.decided):
                self.paired = paired
        sizes = [stream_size(kw, st) for kw, st in zip(kernels, self.streams, strict=True)]
        if self.paired is not None:
            sizes[-1] = self.paired.heads
        self.cost = sum(sizes)


def stream_size(kw: KernelWork, st) -> int:
    """The accesses a kernel's stream decides: a LockstepWave's, a RunStream's heads, or
    every access (None)."""
    if isinstance(st, LockstepWave):
        return st.decided
    if st is not None:
        return st.heads
    return kernel_transfers(kw)


def kernel_transfers(kw: KernelWork, plan=None) -> int:
    """The loads and stores of the kernel's CTAs (those `plan`, a skip plan of fast.py,
    computes, or all): for a kernel of one template a product, not a sum over an array of
    every CTA (standard attention's score kernel at 1M tokens x 16 heads has 1 G CTAs)."""
    if len(kw.templates) == 1:
        n = kw.n_ctas if plan is None else plan.computed_count(kw.n_ctas)
        return n * int(kw.transfer_rows[1][0])
    ctas = np.arange(kw.n_ctas) if plan is None else plan.computed(kw.n_ctas)
    return int(kw.transfers(ctas).sum())


def decided_accesses(kernels, plans, lockstep) -> int:
    """The accesses `_try` decides with these plans."""
    n = 0
    for kw, p, lock in zip(kernels, plans, lockstep, strict=True):
        if not p.skip and lock is not None:
            n += lock.decided
        else:
            n += kernel_transfers(kw, p)
    return n


def decide_unbroken(kernels, slots, capacity, max_bytes, whole: WholeStream) -> list:
    """Every wave decided: a last one-class kernel that streams more than the cache holds
    in each wave by one pair of waves per shape (runs.PairedRuns), in one stream with the
    kernels before it; otherwise every wave in one stream, a one-class kernel by its run heads
    (l2/runs.py) or its lockstep waves (l2/lockstep.py), whichever decides fewer accesses, any
    other access by access."""
    streams, paired = whole.streams, whole.paired
    if paired is not None:
        check_decided(paired.heads, max_bytes)
        decided = paired.decide(capacity, NUMPY_STEPS_PER_ACCESS)  # None: the rule fails
        if decided is not None:
            parts, starts, ops, keys, nbytes = unbroken_stream(
                kernels, slots, max_bytes, paired, streams
            )
            flat = lru_answer(ops, keys, nbytes, capacity)
            st = paired.stream
            first = (st.cta.copy(), st.pos.copy(), flat[starts[-2] : starts[-1]])
            tables = stream_tables(kernels[:-1], parts[:-1], starts, flat, capacity)
            return [*tables, PairedRunHitTable(paired, first, decided, capacity)]
    parts, starts, ops, keys, nbytes = unbroken_stream(kernels, slots, max_bytes, None, streams)
    flat = lru_answer(ops, keys, nbytes, capacity)
    return stream_tables(kernels, parts, starts, flat, capacity)


def stream_tables(kernels, parts, starts, flat, capacity) -> list:
    tables = []
    for k, (kw, part) in enumerate(zip(kernels, parts, strict=True)):
        mine = flat[starts[k] : starts[k + 1]]
        if isinstance(part, RunStream):
            tables.append(RunHitTable(part, mine, capacity))
        elif isinstance(part, LockstepWave):
            tables.append(part.table(mine, capacity))
        else:
            tables.append(full_table(kw, part, mine))
    return tables


def unbroken_stream(kernels, slots, max_bytes=None, paired=None, streams=None):
    """The stream `decide_unbroken` decides: (per kernel a RunStream, a LockstepWave or (CTAs,
    waves, permutation), each kernel's first position, ops, tile ids, bytes), refused past
    `max_bytes`. `streams`: each kernel's RunStream or LockstepWave, or None to lay out every
    access (by default a RunStream for each one-class kernel). With `paired` (the last
    kernel's PairedRuns), that kernel contributes its first wave only, and its decided pairs
    count towards the budget; a LockstepWave its waves' heads and tails."""
    parts = []
    ops, keys, nbytes = [], [], []
    if streams is None:
        streams = [
            RunStream(kw, max(1, s)) if compressible(kw) else None
            for kw, s in zip(kernels, slots, strict=True)
        ]
    if paired is not None:
        streams = [*streams[:-1], paired.stream]
    sizes = [stream_size(kw, st) for kw, st in zip(kernels, streams, strict=True)]
    if paired is not None:
        sizes[-1] = paired.heads
    check_decided(sum(sizes), max_bytes)
    for k, (kw, s, st) in enumerate(zip(kernels, slots, streams, strict=True)):
        if isinstance(st, LockstepWave):
            part, op, key, size = st.build()
        elif st is not None:
            last = paired is not None and k == len(kernels) - 1
            part, op, key, size = st.build([0] if last else None)
        else:
            part, op, key, size = in_logical_order(kw, np.arange(kw.n_ctas), s)
        parts.append(part)
        ops.append(op)
        keys.append(key)
        nbytes.append(size)
    return (parts, *joined_streams(ops, keys, nbytes))


def check_stream_budget(kernels, plans, max_bytes: int | None, lockstep) -> None:
    check_decided(decided_accesses(kernels, plans, lockstep), max_bytes)
