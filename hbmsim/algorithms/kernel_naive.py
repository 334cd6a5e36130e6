"""The tile programs of kernels/naive.cuh: the naive path the validation run times.

S = Q Kᵀ · scale and O = P V are the tiled matmul kernel (output tile bq x bk, chunks of bd,
single-buffered A and B in shared memory, accumulators in registers); the softmax holds
`rows_per_cta` rows in shared memory with a 256-float reduction scratch and applies the causal
mask by index (no stored mask). Shared-memory sizes are the functions the CUDA runner uses.
"""

from __future__ import annotations

from ..gpu.hardware import Hardware
from ..problem.attention import STAT_ITEMSIZE, Problem
from ..program.plan import Buffer, CtaClass, Ctx, Kernel, Tiles
from . import loop_costs
from . import tilemath as tm
from .blocks import block_classes, span
from .kernel_fa2 import ROW_PAD_BYTES
from .kernels import THREADS, Operand, matmul_kernel
from .standard import head_region, kv_region, transposed_region

REDUCE_FLOATS = 256  # one float per thread for the block reductions
CUDA_NAMES = {"qk": "matmul_nt", "softmax": "softmax_rows", "pv": "matmul_nn"}  # in naive.cu


def matmul_smem_bytes(bm: int, bn: int, bd: int, itemsize: int) -> int:
    """A's chunk transposed and B's chunk, bd rows each, every row padded by 16 bytes."""
    pad = ROW_PAD_BYTES // itemsize
    return bd * (bm + pad + bn + pad) * itemsize


def softmax_rows(p: Problem, hw: Hardware) -> int:
    """Rows per softmax CTA: 4, or fewer when 4 rows do not fit the block's shared memory."""
    for rows in (4, 2, 1):
        if softmax_smem_bytes(rows, p.seq_k, p.itemsize) <= hw.sram_bytes_per_block:
            return rows
    return 1


def softmax_smem_bytes(rows: int, nk: int, itemsize: int) -> int:
    return rows * nk * itemsize + REDUCE_FLOATS * STAT_ITEMSIZE


def forward(p: Problem, hw: Hardware, t: Tiles) -> list[Kernel]:
    nq, nk, d = p.seq_q, p.seq_k, p.head_dim
    # scalar FMA products, as naive.cuh computes them (no tensor cores)
    mm = dict(
        stages=1,
        accumulate_in_registers=True,
        full_tile_buffers=True,
        row_pad=ROW_PAD_BYTES // p.itemsize,
        tensor_cores=False,
    )

    def costs(kind: str) -> dict:  # each matmul's loops as compiled (kernels/sass_mix.py)
        n_dim = nk if kind == "qk" else d  # the product's N: S's columns, O's
        ipf, curve = loop_costs.naive_matmul_compiled(
            CUDA_NAMES[kind], t.bq, t.bk, t.bd, p.dtype, p.itemsize, n_dim
        )
        return dict(instructions_per_fma=ipf, cycles_per_fma_by_warps=curve)

    return [
        matmul_kernel(
            "qk",
            p,
            t,
            Operand("Q", head_region),
            Operand("K", transposed_region(kv_region(p)), True),
            Operand("S", head_region),
            nq,
            nk,
            d,
            p.softmax_scale,
            "S = Q Kᵀ · scale (naive.cuh matmul)",
            **mm,
            **costs("qk"),
        ),
        _softmax(p, hw),
        matmul_kernel(
            "pv",
            p,
            t,
            Operand("P", head_region),
            Operand("V", kv_region(p)),
            Operand("O", head_region),
            nq,
            d,
            nk,
            1.0,
            "O = P V (naive.cuh matmul)",
            **mm,
            **costs("pv"),
        ),
    ]


def _softmax(p: Problem, hw: Hardware) -> Kernel:
    nk, rows_per_cta = p.seq_k, softmax_rows(p, hw)

    def program(ctx: Ctx, cta):
        b, h, i = cta
        rows = span(i, rows_per_cta, p.seq_q)
        n = (rows[1] - rows[0]) * nk
        x = ctx.load("rows", "S", (b, h, rows, (0, nk)))
        if p.causal:
            x = ctx.compute(
                lambda x_: tm.mask_scores(x_, tm.causal_visible(rows, (0, nk), p.causal_offset)),
                x,
                vector=n,
                out="rows",
            )
        x = ctx.compute(tm.softmax_rows, x, vector=4 * n, exp=n, out="rows")
        ctx.store("rows", "P", (b, h, rows, (0, nk)), x)

    grid = tuple(
        CtaClass((range(p.batch), range(p.heads), r)) for r in block_classes(p.seq_q, rows_per_cta)
    )
    buffers = (
        Buffer("rows", (rows_per_cta, nk), p.itemsize),
        Buffer("red", (REDUCE_FLOATS,), STAT_ITEMSIZE),
    )
    return Kernel(
        "softmax",
        grid,
        buffers,
        program,
        THREADS,
        description=f"P = softmax(S), {rows_per_cta} rows per CTA in shared memory, "
        "causal mask by index",
    )
