"""NumPy math on tiles, called only by the executor through `ctx.compute(fn, ...)`.

Kept apart from the schedules so a program reads as its loop structure and data movement;
the functions here are the "compute" boxes of the paper's algorithms.
"""

from __future__ import annotations

import numpy as np


def causal_visible(rows: tuple[int, int], cols: tuple[int, int], offset: int) -> np.ndarray:
    """Boolean (rows x cols) tile: True where row i may attend to column j (j <= i + offset)."""
    i = np.arange(*rows)[:, None]
    j = np.arange(*cols)[None, :]
    return j <= i + offset


def band_visible(
    rows: tuple[int, int], cols: tuple[int, int], offset: int, left: int | None, right: int | None
) -> np.ndarray:
    """Boolean (rows x cols) tile: True where row i may attend to column j, i.e.
    i + offset - left <= j <= i + offset + right (None: that side unbounded). Causal is
    right = 0; flash-attn's local mask (mask.h, apply_mask_local) is this band."""
    i = np.arange(*rows)[:, None]
    j = np.arange(*cols)[None, :]
    ok = np.ones((rows[1] - rows[0], cols[1] - cols[0]), dtype=bool)
    if right is not None:
        ok &= j <= i + offset + right
    if left is not None:
        ok &= j >= i + offset - left
    return ok


def mask_scores(s: np.ndarray, visible: np.ndarray) -> np.ndarray:
    return np.where(visible, s, -np.inf)


def exp_minus(s: np.ndarray, m: np.ndarray) -> np.ndarray:
    """exp(s - m) row-wise, with rows whose max is -inf (nothing visible yet) giving 0, not NaN."""
    m_safe = np.where(np.isneginf(m), 0.0, m)
    return np.exp(s - m_safe[:, None])


def exp_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """exp(a - b) elementwise for running maxima; -inf - -inf counts as 0 weight, not NaN."""
    out = np.zeros_like(a)
    ok = ~np.isneginf(a)
    out[ok] = np.exp(a[ok] - b[ok])
    return out


def zeros(*shape: int) -> np.ndarray:
    return np.zeros(shape)


def full(value: float, *shape: int) -> np.ndarray:
    return np.full(shape, value)


def softmax_rows(s: np.ndarray) -> np.ndarray:
    m = s.max(axis=-1, keepdims=True)
    e = np.exp(s - m)
    return e / e.sum(axis=-1, keepdims=True)
