"""flash-attn 2.x reading a paged K/V cache (`flash_attn_with_kvcache(..., block_table=...)`).

What the library does with a block table (Dao-AILab/flash-attention, csrc/flash_attn/):
- flash_api.cpp mha_fwd_kvcache refuses pages that are not whole multiples of 256 tokens
  (`TORCH_CHECK(!paged_KV || page_block_size % 256 == 0, "Paged KV cache block size must be
  divisible by 256")`), so a K/V block (kBlockN <= 256) never crosses a page;
- it takes the cache's length as whole pages, `seqlen_k = max_num_blocks_per_seq *
  page_block_size`, which is what set_params_splitkv's num_splits_heuristic and the kernel's
  `n_blocks_per_split` see; the keys a sequence holds (`seqlens_k`, here seq_k) bound the
  blocks each split visits (`n_block_max = min(cute::ceil_div(binfo.actual_seqlen_k, kBlockN),
  ...)`);
- it runs the split-KV kernel whatever the split count (`run_mha_fwd(params, stream,
  /*force_split_kernel=*/... || paged_KV)`), as the contiguous path already does;
- the query-group packing (seqlenq_ngroups_swapped) does not look at paging: it still applies;
- the kernel (flash_fwd_kernel.h compute_attn_1rowblock_splitkv) reads the table from global
  memory: `block_table[block_table_idx]` twice at the start (the K and the V pointer of the
  last block it visits), then, walking the blocks backwards, `block_table[block_table_idx_next]
  - block_table[block_table_idx_cur]` for V before each block but the first (2 reads) and for
  K before each block but the last (2 reads): 2 + 4 (n - 1) int32 reads for n blocks.

Each of those reads is one 4-byte load of the table here, counted as its own tensor
(`block_table`); repeated reads of one entry are L2 hits in the engine like any repeated
tile. The loop over K/V blocks is cut at page boundaries (and at a page's last block, whose
V read reaches the next page's entry), so each segment's blocks move by one affine step.
"""

from __future__ import annotations

from ...problem.attention import Problem
from ...problem.paging import TABLE_ITEMSIZE, pool_page, pool_shape
from ...program.plan import Buffer, Ctx, TensorSpec
from ..common import refuse

PAGE_MULTIPLE = 256  # flash_api.cpp mha_fwd_kvcache: page_block_size % 256 == 0


def check(p: Problem, name: str) -> None:
    """The library's page-size rule, and the longest page that is not only padding."""
    ps = p.page_size
    if ps % PAGE_MULTIPLE:
        raise refuse(
            "page_size",
            f"{name}: must be a multiple of {PAGE_MULTIPLE} (flash_api.cpp mha_fwd_kvcache: "
            f'"Paged KV cache block size must be divisible by 256"); got {ps:,}',
        )
    top = -(-p.seq_k // PAGE_MULTIPLE) * PAGE_MULTIPLE
    if ps > top:
        raise refuse(
            "page_size",
            f"{name}: must be at most {top:,} (seq_k {p.seq_k:,} rounded up to a multiple of "
            f"{PAGE_MULTIPLE}): a longer page holds only padding; got {ps:,}",
        )


def share_k(p: Problem) -> int:
    """The cache length the library sees: whole pages (mha_fwd_kvcache `seqlen_k =
    max_num_blocks_per_seq * page_block_size`)."""
    return p.pages * p.page_size


def tensors(p: Problem) -> dict[str, TensorSpec]:
    """The K and V pools in place of the contiguous K and V, and the block table."""
    pool = pool_shape(p)
    return {
        "K": TensorSpec("K", pool, p.itemsize, "input", "paged K: (pool page, kv head, slot, d)"),
        "V": TensorSpec("V", pool, p.itemsize, "input", "paged V: (pool page, kv head, slot, d)"),
        "block_table": TensorSpec(
            "block_table",
            (p.batch, p.pages),
            TABLE_ITEMSIZE,
            "input",
            "pool page of each sequence's page, int32",
        ),
    }


TABLE_BUFFER = Buffer("bt", (1, 1), TABLE_ITEMSIZE, registers=True)  # one entry per read


def kv_at(p: Problem):
    """Where the tile of key columns `cols` of sequence b, K/V head kvh lies in the pool (a
    block never crosses a page: check)."""
    ps, d = p.page_size, p.head_dim

    def at(b: int, kvh: int, cols: tuple[int, int]):
        j = cols[0] // ps
        off = j * ps
        return (pool_page(p, b, j), kvh, (cols[0] - off, cols[1] - off), (0, d))

    return at


def entry(ctx: Ctx, b: int, block: int, bn: int, ps: int) -> None:
    """One read of the table: the entry of the page holding K/V block `block`."""
    j = block * bn // ps
    ctx.load("bt", "block_table", (b, (j, j + 1)))


def cut_at_pages(segments: list[range], bn: int, ps: int) -> list[range]:
    """The segments cut at every page's first and last block and after the first block
    visited and before the last, so that within a segment the table reads are alike and
    the pool pages move by one step."""
    if not segments:
        return segments
    per = ps // bn
    first, last = segments[0][0], segments[-1][-1]
    out = []
    for seg in segments:
        cuts = {seg[0], seg[-1] + 1, first + 1, last}
        cuts |= {c for c in range(seg[0] - seg[0] % per, seg[-1] + 2, per)}
        cuts |= {c - 1 for c in range(seg[0] - seg[0] % per + per, seg[-1] + 2, per)}
        edges = sorted(c for c in cuts if seg[0] <= c <= seg[-1] + 1)
        out.extend(range(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a)
    return out


def first_reads(ctx: Ctx, b: int, segments: list[range], bn: int, ps: int) -> None:
    """The start: the K and the V pointer of the last block visited (2 reads)."""
    if segments:
        last = segments[-1][-1]
        entry(ctx, b, last, bn, ps)
        entry(ctx, b, last, bn, ps)


def step_reads(ctx: Ctx, b: int, j: int, first: int, last: int, bn: int, ps: int) -> None:
    """Block j's pointer moves: V's onto it from block j + 1 (all but the last block, which
    the kernel visits first), K's from it to block j - 1 (all but the first block)."""
    if j != last:
        entry(ctx, b, j, bn, ps)
        entry(ctx, b, j + 1, bn, ps)
    if j != first:
        entry(ctx, b, j - 1, bn, ps)
        entry(ctx, b, j, bn, ps)
