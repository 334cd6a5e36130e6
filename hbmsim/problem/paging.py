"""Where a paged K/V cache keeps its pages: the block table and the pool it points into.

A serving engine keeps every sequence's keys and values in fixed-size pages of one shared
pool and hands the attention kernel a block table (int32, batch x pages per sequence) whose
entry (b, j) names the pool page holding tokens [j * page_size, (j + 1) * page_size) of
sequence b (flash-attn's `flash_attn_with_kvcache(..., block_table=...)`, vLLM's
PagedAttention).

The placement modelled: pages handed out in order of arrival while the batch decodes in
lockstep, so every sequence's page j comes before any sequence's page j + 1: page j of
sequence b is pool page `j * batch + b`. A sequence's pages are therefore `batch` pages apart
(contiguous only at batch 1), the layout a first-free allocator gives a batch that grew
together; the pool holds exactly the batch's pages. What the model ignores: eviction and
reuse, which scatter pages further. Either way no two tiles share bytes, and the L2 model keys
a tile by the elements it holds, so where the pages lie moves no hit of K or V; only the
table's own entries, read again by every CTA of a sequence, hit.

The pool is laid out (page, kv_heads, page_size, head_dim), head-major inside a page as the
contiguous K and V of every mirror here are (batch, kv_heads, seq, head_dim); flash-attn's pool
is (num_blocks, page_block_size, nheads_k, headdim), which changes strides, not which bytes a
tile moves. The rows of a sequence's last page past its length are never read: the executor
fills them with NaN, so a program that read one would spoil its output.
"""

from __future__ import annotations

import numpy as np

from .attention import Problem

TABLE_ITEMSIZE = 4  # flash_api.cpp: "block_table must have dtype torch.int32"


def pool_page(p: Problem, b: int, j: int) -> int:
    """The pool page holding page j of sequence b (interleaved across the batch)."""
    return j * p.batch + b


def pool_pages(p: Problem) -> int:
    """Pages in the pool: every sequence's, no spare."""
    return p.batch * p.pages


def block_table(p: Problem) -> np.ndarray:
    """(batch, pages) int32: entry (b, j) is pool_page(p, b, j)."""
    j = np.arange(p.pages, dtype=np.int64)[None, :]
    b = np.arange(p.batch, dtype=np.int64)[:, None]
    return (j * p.batch + b).astype(np.int32)


def pool_shape(p: Problem) -> tuple[int, int, int, int]:
    """The K (and V) pool: (pool pages, kv_heads, page_size, head_dim)."""
    return (pool_pages(p), p.kv_heads, p.page_size, p.head_dim)


def to_pool(p: Problem, x: np.ndarray) -> np.ndarray:
    """K or V as (batch, kv_heads, seq_k, head_dim) values, scattered into the pool by the
    block table; slots past a sequence's length hold NaN."""
    ps, n = p.page_size, p.pages
    padded = np.full((p.batch, p.kv_heads, n * ps, p.head_dim), np.nan)
    padded[:, :, : p.seq_k] = x
    pages = padded.reshape(p.batch, p.kv_heads, n, ps, p.head_dim).transpose(2, 0, 1, 3, 4)
    pool = np.empty(pool_shape(p))
    pool[block_table(p).T.reshape(-1)] = pages.reshape(n * p.batch, p.kv_heads, ps, p.head_dim)
    return pool
