"""Follow one query row through FlashAttention's online softmax, from the real tile program.

Runs only the CTA that owns the row, with the executor's values, and records what the FA2
program keeps for that row after each K/V block: the running max m, the running sum l and the
rescale factor exp(m_old - m_new) applied to the partial output. The last m + log(l) is the
row's log-sum-exp, compared with naive attention's. Why from the program and not a separate
formula: the panel then shows what the simulated kernel computes, not a textbook copy.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError, TooLargeToExecuteError
from ..program.plan import Plan
from .execute import ExecuteCtx
from .reference import (
    attention_scores,
    causal_visible,
    dropout_keep_mask,
    naive_attention,
    random_inputs,
)

MAX_FOLLOW_ELEMENTS = 1 << 24  # one head's Q, K, V and the naive score row


@dataclass(frozen=True)
class RowTrace:
    row: int
    tiles: list[tuple[int, int]]  # key columns [c0, c1) of each K/V block visited
    m: list[float]  # running max after each block
    l: list[float]  # running sum after each block
    rescale: list[float]  # exp(m_before - m_after): how much the old partial sums shrink
    lse: float  # m + log(l) after the last block
    naive_lse: float  # log-sum-exp of naive attention's scores for this row
    naive_max: float


class _Recorder(ExecuteCtx):
    """Executes one CTA and keeps the values written to the `m` and `l` buffers."""

    def __init__(self, plan, arrays, keep, local_row):
        super().__init__(plan, arrays, keep)
        self.local_row = local_row
        self.m_values: list[float] = []
        self.l_values: list[float] = []
        self.tiles: list[tuple[int, int]] = []

    def _on_transfer(self, kind, buf, tensor, region, value):
        if kind == "load" and tensor == "K":
            self.tiles.append(region[2])
        return super()._on_transfer(kind, buf, tensor, region, value)

    def _on_compute(self, fn, args, matmul, vector, exp, out):
        result = super()._on_compute(fn, args, matmul, vector, exp, out)
        if out == "m" and matmul == 0 and vector and len(self.tiles) > len(self.m_values):
            self.m_values.append(float(result[self.local_row]))
        elif out == "l" and vector and len(self.tiles) > len(self.l_values):
            self.l_values.append(float(result[self.local_row]))
        return result


def follow_row(plan: Plan, row: int, seed: int = 0) -> RowTrace:
    """Trace query row `row` of head 0, batch 0 through an FA2 plan."""
    if plan.algo != "fa2":
        raise ConfigError("algo", f"following a row needs an fa2 plan (got {plan.algo!r})")
    p = plan.problem
    if not 0 <= row < p.seq_q:
        raise ConfigError("row", f"must be from 0 to {p.seq_q - 1} (got {row})")
    one_head = dataclasses.replace(p, batch=1, heads=1, kv_heads=1)
    if (one_head.seq_q + 2 * one_head.seq_k) * p.head_dim > MAX_FOLLOW_ELEMENTS:
        raise TooLargeToExecuteError(
            f"row: following a row executes one head; seq {p.seq_k:,} x head_dim "
            f"{p.head_dim} is more than {MAX_FOLLOW_ELEMENTS:,} elements"
        )
    inputs = random_inputs(one_head, seed)
    keep = dropout_keep_mask(one_head, seed) if p.dropout else None
    # batch 0, head 0 only: every rank-3+ tensor keeps one batch and one head
    arrays = {name: np.full((1, 1) + spec.shape[2:], np.nan) for name, spec in plan.tensors.items()}
    arrays.update(inputs)
    i = row // plan.tiles.bq
    ctx = _Recorder(plan, arrays, keep, row - i * plan.tiles.bq)
    kernel = plan.kernels[0]
    ctx.begin_kernel(0, kernel)
    ctx.begin_cta((0, 0, i), 1)
    kernel.program(ctx, (0, 0, i))
    m, l = ctx.m_values, ctx.l_values
    rescale = [
        float(np.exp(a - b)) if np.isfinite(a) else 0.0
        for a, b in zip([-np.inf] + m[:-1], m, strict=True)
    ]
    _, lse = naive_attention(inputs["Q"], inputs["K"], inputs.get("V"), one_head, keep)
    scores = attention_scores(inputs["Q"], inputs["K"], one_head)[0, 0, row]
    if p.masked:
        scores = scores[causal_visible(one_head)[row]]
    return RowTrace(
        row,
        ctx.tiles,
        m,
        l,
        rescale,
        m[-1] + float(np.log(l[-1])),
        float(lse[0, 0, row]),
        float(np.max(scores)),
    )
