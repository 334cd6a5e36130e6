"""The workload: one attention call, described by its shapes and options. Validates itself.

Causal masking is aligned to the bottom-right corner (as FlashAttention >= 2.1 does): query row
i may attend to key column j when j <= i + (seq_k - seq_q). With seq_q == seq_k this is the
usual lower triangle; with seq_q == 1 (decoding) the one query sees the whole cache. A causal
problem therefore needs seq_q <= seq_k, otherwise the first rows would see no key at all.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ..errors import ConfigError, check_int

ITEMSIZE = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
"""Bytes per element of Q, K, V, O and the score tables, by problem dtype. fp8 is e4m3, which
only GPUs with FP8 tensor cores run (Hardware.check_dtype)."""

STAT_ITEMSIZE = 4  # softmax statistics (m, l, log-sum-exp) are fp32 in every implementation
MASK_ITEMSIZE = 1  # dropout keep-masks and boolean causal masks: one byte per element
PASSES = ("fwd", "bwd", "fwd+bwd")

# Scores are q.k x scale; past this, float64 scores of --verify's random inputs could overflow
# (|q.k| stays far below 1e300 / MAX_SCALE), and no attention uses a scale near it.
MAX_SCALE = 1e6
MAX_SEQ = 1 << 24  # 16M tokens: beyond any context length in use, and counts stay exact
MAX_HEAD_DIM = 1024
MAX_BATCH = 1 << 16
MAX_HEADS = 1 << 12


@dataclass(frozen=True)
class Problem:
    """Shapes follow (batch, heads, seq, head_dim); K and V have `kv_heads` heads (GQA/MQA)."""

    batch: int = 1
    heads: int = 16  # a GPT-2/BERT-sized layer
    seq_q: int = 4096  # long enough that the N x N table dominates standard attention
    seq_k: int = 4096
    head_dim: int = 64  # d, the paper's main setting
    kv_heads: int | None = None  # None: same as heads (plain multi-head attention)
    dtype: str = "fp16"  # storage type of Q, K, V, O, S, P
    causal: bool = False
    dropout: float = 0.0  # probability of dropping an attention weight
    softmax_scale: float | None = None  # None: 1/sqrt(head_dim), as in the paper
    pass_: str = "fwd"  # "fwd", "bwd" (given the forward's saved tensors) or "fwd+bwd"

    def __post_init__(self):
        check_int("batch", self.batch, 1, MAX_BATCH)
        check_int("heads", self.heads, 1, MAX_HEADS)
        check_int("seq_q", self.seq_q, 1, MAX_SEQ)
        check_int("seq_k", self.seq_k, 1, MAX_SEQ)
        check_int("head_dim", self.head_dim, 1, MAX_HEAD_DIM)
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        check_int("kv_heads", self.kv_heads, 1, self.heads)
        if self.heads % self.kv_heads:
            divisors = [d for d in range(1, self.heads + 1) if self.heads % d == 0]
            allowed = ", ".join(map(str, divisors[:12])) + (", ..." if len(divisors) > 12 else "")
            raise ConfigError(
                "kv_heads",
                f"must divide heads ({self.heads}): one of {allowed}; got {self.kv_heads}",
            )
        if self.dtype not in ITEMSIZE:
            raise ConfigError("dtype", f"must be one of {', '.join(ITEMSIZE)} (got {self.dtype!r})")
        if not isinstance(self.causal, bool):
            raise ConfigError("causal", f"must be true or false (got {self.causal!r})")
        p = self.dropout
        if isinstance(p, bool) or not isinstance(p, int | float) or not 0 <= p < 1:
            raise ConfigError("dropout", f"must be a probability in [0, 1) (got {p!r})")
        if self.softmax_scale is None:
            object.__setattr__(self, "softmax_scale", 1.0 / math.sqrt(self.head_dim))
        s = self.softmax_scale
        if isinstance(s, bool) or not isinstance(s, int | float) or not (0 < s <= MAX_SCALE):
            raise ConfigError(
                "softmax_scale", f"must be a number > 0 and at most {MAX_SCALE:g} (got {s!r})"
            )
        if self.pass_ not in PASSES:
            raise ConfigError("pass", f"must be one of {', '.join(PASSES)} (got {self.pass_!r})")
        if self.causal and self.seq_q > self.seq_k:
            raise ConfigError(
                "seq_q",
                f"must be <= seq_k ({self.seq_k:,}) for causal attention "
                f"(got {self.seq_q:,}): earlier rows would see no key",
            )

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtype]

    @property
    def group_size(self) -> int:
        """Query heads per K/V head: 1 for MHA, heads for MQA."""
        return self.heads // self.kv_heads

    def kv_head(self, h: int) -> int:
        """The K/V head that query head h reads (GQA: consecutive query heads share one)."""
        return h // self.group_size

    @property
    def causal_offset(self) -> int:
        """Row i sees columns j <= i + causal_offset (bottom-right alignment)."""
        return self.seq_k - self.seq_q

    def visible_cols(self, row: int) -> int:
        """How many key columns query row `row` attends to."""
        if not self.causal:
            return self.seq_k
        return min(self.seq_k, row + self.causal_offset + 1)

    @property
    def attention_flops(self) -> int:
        """The FLOP count papers use for forward attention: 4·b·h·Nq·Nk·d (halved if causal)."""
        full = 4 * self.batch * self.heads * self.seq_q * self.seq_k * self.head_dim
        if not self.causal:
            return full
        visible = sum_visible(self.seq_q, self.seq_k, 0, self.seq_q)
        return 4 * self.batch * self.heads * visible * self.head_dim

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["pass"] = d.pop("pass_")
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Problem:
        d = dict(d)
        if "pass" in d:
            d["pass_"] = d.pop("pass")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - fields)
        if unknown:
            raise ConfigError(unknown[0], f"is not a problem field; allowed: {', '.join(fields)}")
        return cls(**d)


def sum_visible(seq_q: int, seq_k: int, r0: int, r1: int) -> int:
    """Number of (row, col) pairs visible under the causal mask for rows [r0, r1). O(1).

    Row i sees min(seq_k, i + off + 1) columns with off = seq_k - seq_q >= 0; since i < seq_q,
    i + off + 1 <= seq_k always, so the count is the arithmetic series sum of (i + off + 1).
    """
    off = seq_k - seq_q
    n = r1 - r0
    return n * (off + 1) + (r0 + r1 - 1) * n // 2
