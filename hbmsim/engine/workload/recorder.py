"""Records one CTA's run of a tile program as parts, sampling long loop segments.

The same records as `TraceCtx` (the fast path == trace replay property checks it). Ops are
kept as one tuple each and laid into rows of ints a part at a time: a CTA of a long loop
has tens of thousands of ops or more (fa2 at 1M tokens: 115,000 per CTA; flash-attn 1's first
release at 32k tokens: 1.3 M), and running the program costs microseconds per op.

So a loop segment (`ctx.loop`: iterations alike in their ops, the counting contract) of
SAMPLED_LOOP_MIN iterations or more is run at four of them: the first, the second, the
middle and the last. The first two give each op's step per iteration (its region moves by
a fixed amount: K/V blocks along the keys, query steps along the rows); the segment is
laid out from the first by that step (`Laid`), once the middle and the last iterations
are found where the step puts them, op for op and field for field. Where they are not
(a region that does not move evenly) or a program leaves a loop early, `NotAffine` says so
and the CTA is run again with every iteration. In a symbolic run (program/symbolic.py) a
region's ends may be affine expressions of the grid coordinates: their coefficients are
kept beside the rows.
"""

from __future__ import annotations

import numpy as np

from ...interpret.trace import (
    MAX_AXES,
    OP_ATOMIC,
    OP_COMPUTE,
    OP_LOAD,
    OP_STORE,
    TraceCtx,
)
from ...program import symbolic as classsym
from ...program.plan import Plan
from .parts import (
    COLUMNS,
    NO_REGION,
    REGION,
    SAMPLED_LOOP_MIN,
    Laid,
    NotAffine,
    checked_step,
    coef_rows,
    parts_rows,
)


class Recorder(TraceCtx):
    """Runs one CTA of a plan at a time and keeps its ops as parts (see the module docstring)."""

    def __init__(self, plan: Plan):
        super().__init__(plan)
        self.itemsize = {name: t.itemsize for name, t in plan.tensors.items()}
        self.sampling = True
        self.symbolic_axes = 0  # axes of the symbolic run under way (`symbolic`), 0: none
        self.pending_coefs: list[tuple] = []  # (op, column, coefficients) of pending ops
        self.coefs: list[np.ndarray] = []  # per part of a symbolic run: (axes, rows, columns)

    def record(self, kernel_index: int, cta: tuple[int, ...], sampling: bool) -> list:
        self.sampling, self.left_early = sampling, False
        self.parts: list = []  # row arrays and laid-out segments (Laid), in program order
        self.pending: list[tuple] = []  # PENDING fields, then start and stop per axis
        kernel = self.plan.kernels[kernel_index]
        self.begin_kernel(kernel_index, kernel)
        self.begin_cta(cta, 1)
        kernel.program(self, cta)
        if self.left_early:
            raise NotAffine
        self._flush()
        return self.parts

    def _flush(self) -> None:
        """Lay the pending ops into one more part: an int array, a row per op (COLUMNS);
        in a symbolic run, its region coefficients too."""
        if self.pending:
            self.parts.append(np.array(self.pending, dtype=np.int64))
            if self.symbolic_axes:
                coef = np.zeros((self.symbolic_axes, len(self.pending), COLUMNS), np.int64)
                for op, column, co in self.pending_coefs:
                    coef[:, op, column] = co
                self.coefs.append(coef)
                self.pending_coefs = []
            self.pending = []

    def _mark(self) -> int:
        self._flush()
        return len(self.parts)

    def _block(self, since: int) -> tuple[np.ndarray, np.ndarray | None]:
        """The rows recorded since `_mark` returned `since`, taken out of the parts, and in a
        symbolic run their region coefficients (else None)."""
        self._flush()
        block, coef = parts_rows(self.parts[since:]), None
        if self.symbolic_axes:
            coef = coef_rows(self.parts[since:], self.coefs[since:], self.symbolic_axes)
            del self.coefs[since:]
        del self.parts[since:]
        return block, coef

    def loop(self, segments):
        if not self.sampling:
            for seg in segments:
                yield from seg
            return
        for seg in segments:
            n = seg.n if isinstance(seg, classsym.SymRange) else len(seg)
            if n < SAMPLED_LOOP_MIN:  # (decided for every CTA in a run over a box)
                yield from seg
                continue
            # a length that differs between the classes of a family run (`family`): the
            # second and third iterations check the step, the last (symbolic) where it lands
            picks = (0, 1, n // 2, n - 1) if type(n) is int else (0, 1, 2, n - 1)
            blocks, coefs = [], []
            for k in picks:
                at = self._mark()
                try:
                    yield seg[k]
                except GeneratorExit:  # the program left the loop: run it again in full
                    self.left_early = True
                    raise
                block, coef = self._block(at)
                blocks.append(block)
                coefs.append(coef)
            at_rep = tuple(k if type(k) is int else k.c0 for k in picks)
            step = checked_step(blocks, at_rep)
            self.parts.append(Laid(blocks[0], step, n))
            if self.symbolic_axes:  # laid out as its first iteration's: each must be alike,
                for k, c in zip(picks, coefs, strict=True):  # a symbolic one moved by its step
                    want = coefs[0]
                    if type(k) is not int:
                        want = want.copy()
                        for a, co in enumerate(k.co):
                            want[a, :, REGION:] += co * step
                    if c.shape != want.shape or (c != want).any():
                        raise classsym.NotSymbolic
                self.coefs.append(coefs[0])

    def _transfer(self, op: int, buf: str, tensor: str, region) -> None:
        if self.symbolic_axes:
            self._symbolic_transfer(op, buf, tensor, region)
            return
        n = 1
        starts, stops = [], []
        for r in region:  # as plan.as_region: an int i is the span (i, i + 1)
            if isinstance(r, int):
                a, b = r, r + 1
            else:
                a, b = int(r[0]), int(r[1])
            starts.append(a)
            stops.append(b)
            n *= b - a
        self._transfer_row(op, buf, tensor, n, starts, stops)

    def _transfer_row(self, op: int, buf: str, tensor: str, n: int, starts, stops) -> None:
        """One transfer of n elements as a pending row (PENDING, then its region's starts and
        stops, padded to MAX_AXES)."""
        pad = [0] * (MAX_AXES - len(starts))
        nbytes = n * self.itemsize[tensor]
        row = (op, self.tensor_ids[tensor], self.buffer_ids[buf], nbytes, 0, 0, 0)
        self.pending.append((*row, *starts, *pad, *stops, *pad))

    def _symbolic_transfer(self, op: int, buf: str, tensor: str, region) -> None:
        """`_transfer` in a symbolic run: a region's ends may be classsym.Affine, whose value
        at the representative goes in the row and whose coefficients in `pending_coefs`; its
        extent must not depend on them."""
        n = 1
        starts, stops = [], []
        at = len(self.pending)
        for axis, r in enumerate(region):
            if isinstance(r, (int, classsym.Affine)):
                a, b = r, r + 1
            else:
                a, b = r[0], r[1]
                a = a if type(a) is classsym.Affine else int(a)
                b = b if type(b) is classsym.Affine else int(b)
                extent = b - a
                if type(extent) is not int:
                    raise classsym.NotSymbolic
                n *= extent
            if type(a) is classsym.Affine:
                self.pending_coefs.append((at, REGION + axis, a.co))
                a = a.c0
            if type(b) is classsym.Affine:
                self.pending_coefs.append((at, REGION + MAX_AXES + axis, b.co))
                b = b.c0
            starts.append(a)
            stops.append(b)
        self._transfer_row(op, buf, tensor, n, starts, stops)

    def load(self, buf, tensor, region):
        self._transfer(OP_LOAD, buf, tensor, region)

    def store(self, buf, tensor, region, value=None):
        self._transfer(OP_STORE, buf, tensor, region)

    def atomic_add(self, buf, tensor, region, value=None):
        self._transfer(OP_ATOMIC, buf, tensor, region)

    def compute(self, fn, *args, matmul=0, vector=0, exp=0, out=None):
        if self.symbolic_axes and classsym.Affine in (type(matmul), type(vector), type(exp)):
            raise classsym.NotSymbolic  # work that differs between the class's CTAs
        buffer = self.buffer_ids.get(out, -1) if out is not None else -1
        self.pending.append((OP_COMPUTE, -1, buffer, 0, matmul, vector, exp) + NO_REGION)
