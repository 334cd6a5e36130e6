"""The workload: one attention call, described by its shapes and options. Validates itself.

Causal masking is aligned to the bottom-right corner (as FlashAttention >= 2.1 does): query row
i may attend to key column j when j <= i + (seq_k - seq_q). With seq_q == seq_k this is the
usual lower triangle; with seq_q == 1 (decoding) the one query sees the whole cache. A causal
problem therefore needs seq_q <= seq_k, otherwise the first rows would see no key at all.

A sliding window (`window_left`, `window_right`) follows flash-attn's `window_size=(left,
right)` (csrc/flash_attn/src/mask.h, `apply_mask_local`): with the same bottom-right offset,
query row i attends key column j when i + off - left <= j <= i + off + right, off = seq_k -
seq_q; -1 leaves that side unbounded. Causal attention is the window's right side at 0, so a
causal problem takes window_right -1 or 0 (flash-attn sets it to 0 when causal; here a user's
other value is refused rather than changed). Mistral 7B's W = 4096 is (4096, 0) with causal.

A paged K/V cache (`page_size`) keeps each sequence's keys and values in pages of `page_size`
tokens scattered through one pool, found through a block table, as serving engines (vLLM,
SGLang) hand flash-attn's `flash_attn_with_kvcache(..., block_table=...)`. It changes where the
cache lies, not what attention computes; which page sizes a library takes is that library's
rule (its mirror checks it), so the problem only asks for a whole number of tokens.

Multi-head latent attention (MLA, DeepSeek-V2 arXiv:2405.04434 Section 2.1) in its absorbed form
(the key and value up-projections folded into the query and the output, as FlashMLA's decode
runs it) is MQA whose scores use a wider head than its values: every token keeps one latent row
of kv_lora_rank + qk_rope_head_dim columns, q.k runs over the whole row and the values are its
first kv_lora_rank columns. `head_dim_v` is the value (and output) head dim, `latent_kv` says
V is no tensor of its own but K's first head_dim_v columns, so a program that reads a K row has
read its V row too. Only the forward pass of such a problem is modelled.
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
    window_left: int = -1  # keys before the diagonal a row sees (sliding window); -1: all
    window_right: int = -1  # keys after the diagonal a row sees; -1: all (causal: 0)
    page_size: int | None = None  # tokens per page of a paged K/V cache; None: contiguous
    head_dim_v: int | None = None  # V's and O's head dim (`dv`); None: head_dim; MLA: 512
    latent_kv: bool = False  # V is K's first head_dim_v columns (MLA's one latent cache row)

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
        self._check_window()
        if self.page_size is not None:
            check_int("page_size", self.page_size, 1, MAX_SEQ)
        self._check_latent()

    def _check_latent(self) -> None:
        """head_dim_v within the head-dim range (within head_dim when V is part of K's row);
        latent_kv a boolean; a problem whose V differs from K's shape runs forward only."""
        if not isinstance(self.latent_kv, bool):
            raise ConfigError("latent_kv", f"must be true or false (got {self.latent_kv!r})")
        # head_dim_v stays None when not given, so that replacing head_dim moves dv with it
        if self.head_dim_v is not None:
            check_int("head_dim_v", self.head_dim_v, 1, MAX_HEAD_DIM)
        if self.latent_kv and self.dv > self.head_dim:
            raise ConfigError(
                "head_dim_v",
                f"must be at most head_dim ({self.head_dim}) with latent_kv, where V is K's "
                f"first head_dim_v columns (got {self.head_dim_v})",
            )
        if not self.plain_kv and self.pass_ != "fwd":
            raise ConfigError(
                "pass",
                f"must be fwd when head_dim_v ({self.dv}) differs from head_dim "
                f"({self.head_dim}) or K/V are latent: no backward is modelled for them "
                f"(got {self.pass_})",
            )

    def _check_window(self) -> None:
        """Each side -1 (unbounded) or 0..seq_k; a window wider than the keys is a mistake
        (it would change nothing), and every query row must still see a key."""
        for name in ("window_left", "window_right"):
            w = getattr(self, name)
            if isinstance(w, bool) or not isinstance(w, int) or not -1 <= w <= self.seq_k:
                raise ConfigError(
                    name,
                    f"must be -1 (unbounded) or from 0 to seq_k ({self.seq_k:,}) (got {w!r})",
                )
        if self.causal and self.window_right > 0:
            raise ConfigError(
                "window_right",
                f"must be 0 or -1 with causal attention, which sees no key after the diagonal "
                f"(got {self.window_right:,})",
            )
        need = self.seq_q - self.seq_k  # row 0 sees columns <= right - need
        if not self.causal and self.window_right >= 0 and self.window_right < need:
            raise ConfigError(
                "window_right",
                f"must be at least seq_q - seq_k ({need:,}) or -1, so that the first query "
                f"row sees a key (got {self.window_right:,})",
            )

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtype]

    @property
    def plain_kv(self) -> bool:
        """Whether K and V are two tensors of head_dim columns each (not MLA's latent row)."""
        return not self.latent_kv and self.dv == self.head_dim

    @property
    def dv(self) -> int:
        """V's and O's head dim: head_dim_v, or head_dim when none is given."""
        return self.head_dim if self.head_dim_v is None else self.head_dim_v

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

    @property
    def windowed(self) -> bool:
        """Whether a sliding window bounds either side (beyond what causal already does)."""
        return self.window_left >= 0 or (self.window_right >= 0 and not self.causal)

    @property
    def masked(self) -> bool:
        """Whether some (row, column) pair is hidden: causal, or a sliding window."""
        return self.causal or self.windowed

    @property
    def right_reach(self) -> int | None:
        """Keys past the diagonal a row sees: 0 if causal, the window's right side, or None."""
        if self.causal:
            return 0
        return self.window_right if self.window_right >= 0 else None

    @property
    def left_reach(self) -> int | None:
        """Keys before the diagonal a row sees, or None (unbounded)."""
        return self.window_left if self.window_left >= 0 else None

    def first_col(self, row: int) -> int:
        """The first key column row `row` attends to."""
        left = self.left_reach
        return 0 if left is None else max(0, row + self.causal_offset - left)

    def last_col(self, row: int) -> int:
        """The last key column row `row` attends to (>= first_col: Problem checks it)."""
        right = self.right_reach
        last = self.seq_k - 1
        return last if right is None else min(last, row + self.causal_offset + right)

    def visible_cols(self, row: int) -> int:
        """How many key columns query row `row` attends to."""
        return self.last_col(row) - self.first_col(row) + 1

    @property
    def pages(self) -> int:
        """Pages of one sequence's cache (its block table's columns); 0 without paging."""
        return 0 if self.page_size is None else -(-self.seq_k // self.page_size)

    def window_text(self) -> str:
        """The window as a reader says it ("window 4,096 left, causal"), or "" without one."""
        if not self.windowed:
            return ""
        side = lambda w: "all" if w < 0 else f"{w:,}"  # noqa: E731
        right = "0 (causal)" if self.causal else side(self.window_right)
        return f"window {side(self.window_left)} left, {right} right"

    def latent_text(self) -> str:
        """What a latent problem's K tensor holds ("" for plain K/V), said where bytes are."""
        if not self.latent_kv:
            return ""
        return f"latent K/V cache: {self.head_dim} columns per token for q.k, V its first {self.dv}"

    @property
    def attention_flops(self) -> int:
        """The FLOP count papers use for forward attention: 4·b·h·Nq·Nk·d (halved if causal),
        over the (row, column) pairs a mask or window leaves visible; with a value head dim
        dv of its own, 2·b·h·Nq·Nk·(d + dv) (Q Kᵀ over d, P V over dv, as FlashMLA's
        benchmark counts)."""
        width = self.head_dim + self.dv
        full = 2 * self.batch * self.heads * self.seq_q * self.seq_k * width
        if not self.masked:
            return full
        visible = sum_visible_pairs(self, 0, self.seq_q)
        return 2 * self.batch * self.heads * visible * width

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["pass"] = d.pop("pass_")
        if d["page_size"] is None:  # a contiguous cache: the dict (and files) as before paging
            del d["page_size"]
        if self.head_dim_v is None:  # the MLA fields appear only where they were given
            del d["head_dim_v"]
        if not self.latent_kv:
            del d["latent_kv"]
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


def _sum_min(r0: int, r1: int, c: int, cap: int) -> int:
    """Sum over i in [r0, r1) of min(cap, i + c). O(1)."""
    k = min(max(cap - c, r0), r1)  # rows below k are under the cap
    return (k - r0) * c + (r0 + k - 1) * (k - r0) // 2 + (r1 - k) * cap


def sum_visible_pairs(p: Problem, r0: int, r1: int) -> int:
    """Number of visible (row, col) pairs for rows [r0, r1) under p's mask and window. O(1).

    Row i sees [max(0, i + off - left), min(seq_k - 1, i + off + right)]; both ends are
    clipped arithmetic series, summed in closed form."""
    off, last = p.causal_offset, p.seq_k - 1
    right, left = p.right_reach, p.left_reach
    hi = (r1 - r0) * last if right is None else _sum_min(r0, r1, off + right, last)
    # max(0, i + c) = (i + c) - min(0, i + c)
    lo = (
        0
        if left is None
        else (
            (r1 - r0) * (off - left)
            + (r0 + r1 - 1) * (r1 - r0) // 2
            - _sum_min(r0, r1, off - left, 0)
        )
    )
    return hi - lo + (r1 - r0)
