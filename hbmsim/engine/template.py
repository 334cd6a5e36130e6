"""A CTA's ops prepared for timing: its transfers, its merged compute steps and what each waits
for, with the pipeline's stages, the SM's rates and the pipes' overlap applied once per
template (every group of the template runs the same prepared program).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..gpu.pipes import step_seconds
from ..interpret.trace import OP_COMPUTE, OP_LOAD, OP_STORE


@dataclass
class Template:
    """A CTA's ops prepared for timing: transfers and merged compute steps.

    Compute c waits for the transfers `wait_idx[wait_ptr[c]:wait_ptr[c + 1]]` (issue positions,
    ascending): one flat list for all of them, as a long loop has a million steps. The columns
    are `array.array`s: indexed one element at a time like lists, 8 bytes an element where a
    list of ints takes 40 (flash-attn 0.1's forward at 64k tokens is a template of 12.6 M
    ops)."""

    tr_bytes: Sequence[int]
    tr_op: Sequence[int]
    tr_gate: Sequence[int]  # computes that must finish before the transfer may start
    tr_rows: np.ndarray  # template rows of the transfers (for the timeline)
    comp_s: Sequence[float]  # duration of each merged compute step
    wait_ptr: Sequence[int]
    wait_idx: Sequence[int]
    comp_rows: Sequence[int]
    issued_at: Sequence[int] = field(default_factory=list)  # transfers issued once b computes ran
    order: np.ndarray | None = None  # each issued transfer's index in the program's order
    # warp-specialised kernels: consumer warpgroups, how their pipes overlap, and each step's
    # (tensor, FP32, SFU) seconds, for the timeline's per-warpgroup rows (pipes.phases)
    warpgroups: int = 0
    overlaps: tuple[bool, bool] = (False, False)
    comp_pipes: np.ndarray | None = None
    last_busy: int = -1  # the last compute step that takes time (-1: none does)

    def waits(self, c: int) -> Sequence[int]:
        """The transfers compute c waits for (issue positions)."""
        return self.wait_idx[self.wait_ptr[c] : self.wait_ptr[c + 1]]


def prepare(
    tmpl: np.ndarray,
    stages: int,
    per_sm: tuple[float, float, float],
    share: int,
    overlaps: tuple[bool, bool] = (False, False),
    multicast: tuple[tuple[int, ...], int] = ((), 1),
    warpgroups: int = 0,
    posted_atomics: bool = False,
) -> Template:
    """Transfers in the order they are issued: a load goes out as soon as the computes
    `stages - 1` before its place in the program have started (a prefetch the kernel issues
    ahead, so it passes the stores in between); a store or an atomic once the compute that
    produced it is done. A compute waits for the loads and atomic adds before it in the
    program, never for a store: stores are posted (the SM sends them and goes on), and so
    are atomic adds where `posted_atomics` (plan.Kernel.posted_atomics).

    Consecutive computes are one step, their times added left to right; where a kernel's
    warpgroups overlap the SM's pipes (`overlaps`, pipes.overlapped), a step's tensor, FP32
    and SFU seconds are added per pipe and combined as pipes.step_seconds says. A load of a
    tensor in `multicast` = (tensor ids, cluster) is shared by the cluster's CTAs: each is
    charged 1/cluster of its bytes. A warp-specialised kernel's template (`warpgroups` >= 2)
    keeps each step's seconds per pipe, from which a timeline draws what each warpgroup does.
    Array operations throughout: a CTA of a long loop has millions of ops (flash-attn 1's
    first release at 32k tokens: 1.3 M)."""
    ops = tmpl["op"]
    comp = ops == OP_COMPUTE
    first = step_heads(ops)
    before = np.cumsum(first)  # steps begun up to each op
    n_comp = int(before[-1]) if len(before) else 0
    at = np.flatnonzero(comp)
    step = before[at] - 1
    heads = np.flatnonzero(first[at])  # each step's first compute among `at`
    comp_s, comp_pipes = _step_seconds(
        tmpl, at, step, heads, n_comp, per_sm, share, overlaps, warpgroups
    )
    tr = np.flatnonzero(~comp)
    done = before[tr]  # steps begun before the transfer (it is not a compute)
    tr_ops = ops[tr]
    gate = np.where(tr_ops == OP_LOAD, np.maximum(0, done - (stages - 1)), done)
    order = np.argsort(gate, kind="stable")  # by gate, then program order
    gate, done, tr_ops = gate[order], done[order], tr_ops[order]
    # compute c waits for the loads and atomic adds between compute c - 1 and it (those
    # before were waited for by the computes before it); see docs/engine-model.md
    awaited = (tr_ops == OP_LOAD) if posted_atomics else (tr_ops != OP_STORE)
    waiting = np.flatnonzero(awaited & (done < n_comp))
    by_step = np.argsort(done[waiting], kind="stable")
    wait_idx = waiting[by_step]
    steps = np.arange(n_comp + 1)
    wait_ptr = np.searchsorted(done[wait_idx], steps, side="left")
    issued_at = np.searchsorted(gate, steps, side="right")  # issue() stops at a later gate
    tr_bytes = charged_bytes(tr_ops, tmpl["bytes"][tr][order], tmpl["tensor"][tr][order], multicast)
    busy = np.flatnonzero(comp_s > 0)  # compute steps that take time
    return Template(
        column(tr_bytes),
        column(tr_ops),
        column(gate),
        tr[order],
        column(comp_s, "d"),
        column(wait_ptr),
        column(wait_idx),
        column(at[heads]),
        column(issued_at),
        order,
        warpgroups,
        overlaps,
        comp_pipes,
        int(busy[-1]) if len(busy) else -1,
    )


def _step_seconds(tmpl, at, step, heads, n_comp, per_sm, share, overlaps, warpgroups):
    """(each merged step's seconds, its (tensor, FP32, SFU) seconds or None): the step's
    computes (`at`, each in `step`, the first of each at `heads`) timed at the SM's rates
    split among `share` co-resident CTAs, added left to right, or per pipe and combined as
    pipes.step_seconds says where warpgroups overlap the pipes."""
    matrix, vector, exp = per_sm
    comp_pipes = None
    if warpgroups >= 2 or any(overlaps):
        comp_pipes = np.stack(
            [
                np.bincount(step, tmpl[name][at] / rate * share, n_comp)
                for name, rate in (
                    ("matmul_flops", matrix),
                    ("vector_flops", vector),
                    ("exp_ops", exp),
                )
            ],
            axis=1,
        )
    if any(overlaps):
        return np.asarray(step_seconds(*comp_pipes.T, overlaps), dtype=np.float64), comp_pipes
    work = (
        tmpl["matmul_flops"][at] / matrix
        + tmpl["vector_flops"][at] / vector
        + tmpl["exp_ops"][at] / exp
    ) * share
    place = np.arange(len(at)) - heads[step]
    comp_s = work[heads].copy()
    for r in range(1, int(place.max()) + 1 if len(place) else 0):  # added as a loop would
        sel = place == r
        comp_s[step[sel]] += work[sel]
    return comp_s, comp_pipes


def step_heads(ops: np.ndarray) -> np.ndarray:
    """Whether each op begins a compute step: consecutive computes are one step (`prepare`),
    so a step begins at the first compute of each run of them."""
    comp = ops == OP_COMPUTE
    first = comp.copy()
    first[1:] &= ~comp[:-1]
    return first


def charged_bytes(
    ops: np.ndarray, nbytes: np.ndarray, tensor: np.ndarray, multicast: tuple[tuple[int, ...], int]
) -> np.ndarray:
    """The bytes each transfer is charged: a load of a tensor a thread-block cluster receives by
    multicast (`multicast` = (tensor ids, cluster)) at 1/cluster of its bytes, any other at
    its bytes."""
    ids, cluster = multicast
    if cluster > 1 and ids:
        shared = (ops == OP_LOAD) & np.isin(tensor, ids)
        return np.where(shared, nbytes // cluster, nbytes)
    return nbytes


def column(values: np.ndarray, code: str = "q") -> array:
    """An array.array of the values (int64, or float64 for "d"), copied from their buffer."""
    flat = np.ascontiguousarray(values, dtype=np.float64 if code == "d" else np.int64)
    column = array(code)
    column.frombytes(memoryview(flat).cast("B"))
    return column
