"""Mirror of the validation run's vendor baseline: naive attention with `cupy.matmul`.

kernels/runner.py `cublas_launcher` computes, for q, k, v on the GPU,

    cp.matmul(q * scale, k.swapaxes(-1, -2), out=s)    S = (Q · scale) Kᵀ
    softmax(s, pmat)                                    naive.cu's row softmax
    cp.matmul(pmat, v, out=o)                           O = P V

and CuPy's batched matmul (cupy/_core/_routines_linalg.pyx, `matmul`, the `ndim > 2` path)
does not multiply half-precision arrays in half precision:

    ret_dtype = numpy.promote_types(a.dtype, b.dtype)
    dtype = ret_dtype
    if dtype.char == 'e':            # float16
        dtype = numpy.dtype('f')     # computed in float32
    a = ascontiguousarray(a, dtype)  # a copy kernel: cast (and, for a view, gather)
    b = ascontiguousarray(b, dtype)
    ...
    cublas.gemmStridedBatchedEx(..., cuda_dtype, ..., batchCount, cuda_dtype, algo)
    if out is not c:
        elementwise_copy(c, out)     # the float32 product cast back into `out`

so each product is two casting copies into float32 (K's transposed view gathered by its copy),
a float32 GEMM with float32 compute (cuBLAS runs it on the FMA units: Nsight Compute on the
H200 run recorded `sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_..._ffma_...` for
S and `..._tilesize128x64x8_..._ffma_...` for O at head dim 64), and a cast of the float32
result into the half-precision output: ten kernels for fp16 (kernels/results/raw/
h200-2026-11-30-ncu-sections.csv lists all ten), five for fp32, where no cast is needed and the
products write `out` directly (it is contiguous and of the computed dtype).

cuBLAS's tile choice is closed source: the tiles are the ones Nsight Compute recorded
(128 x 128 x 8 for S, 128 x 64 x 8 for O = P V at head dim 64), and an output narrower than 128
columns takes the narrowest of 64 and 128 that covers it (an assumption where nothing was
recorded: head dim 128). The GEMM's registers are not known, so only its shared memory (three
stages of both chunks, `stage3` in the kernel name) limits its occupancy.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ...algorithms import kernel_naive, loop_costs
from ...algorithms.kernels import Operand, chunk_kernel, matmul_kernel
from ...algorithms.standard import head_region
from ...gpu.hardware import Hardware
from ...problem.attention import STAT_ITEMSIZE, Problem
from ...program.plan import Ctx, Kernel, Plan, TensorSpec, Tiles
from ..pytorch.kernels import copy_kernel, rows_kernel

NAME = "cupy-matmul"
FP32 = STAT_ITEMSIZE  # float32 bytes
GEMM_ROWS, GEMM_CHUNK, GEMM_STAGES = 128, 8, 3  # tilesize128xNx8, stage3 (Nsight Compute)
GEMM_COLS = (64, 128)  # the output widths Nsight Compute recorded (128x64x8, 128x128x8)
GEMM_THREADS = 128  # warpsize2x2x1 in the kernel name: 2 x 2 warps
# Host-side operations per call that launch no kernel (runner.cublas_launcher, CuPy's matmul):
# k.swapaxes, a view; and where the output is half precision, each product's float32 result
# array, `core.ndarray(out_shape, dtype)`, an allocation (two)
VIEW_OPS, HALF_OPS = 1, 2


def gemm_cols(n: int) -> int:
    """The output tile width for an output of n columns (see the module docstring)."""
    return next((c for c in GEMM_COLS if n <= c), GEMM_COLS[-1])


def _micro_tile_ipf(cols: int) -> float:
    """Instructions per FMA of the SIMT GEMM's inner loop: per chunk row a thread of the 128
    reads its 8 values of A and cols / 8 of B from shared memory in 16-byte vectors and does
    8 x cols / 8 FMAs (float32 operands: nothing to convert), counted as loop_costs counts the
    naive matmul's loop. cuBLAS's own thread layout is not published; any layout of 128
    threads over the tile gives each thread cols outputs, and a squarer one fewer loads."""
    rows, per = GEMM_ROWS // 16, cols // 8
    return (rows * per + loop_costs._loads(rows, FP32) + loop_costs._loads(per, FP32)) / (
        rows * per
    )


def _gemm(p: Problem, name: str, a: Operand, b: Operand, c: Operand, m, n, k, desc) -> Kernel:
    """A float32 cuBLAS GEMM on the FMA units: its tiles, three stages of float32 chunks."""
    cols = gemm_cols(n)
    p32 = dataclasses.replace(p, dtype="fp32")  # its buffers hold float32
    kernel = matmul_kernel(
        name,
        p32,
        Tiles(GEMM_ROWS, cols, GEMM_CHUNK),
        a,
        b,
        c,
        m,
        n,
        k,
        1.0,
        desc,
        stages=GEMM_STAGES,
        accumulate_in_registers=True,
        full_tile_buffers=True,
        tensor_cores=False,
        instructions_per_fma=_micro_tile_ipf(cols),
    )
    return dataclasses.replace(kernel, threads_per_cta=GEMM_THREADS)


def _scale_kernel(p: Problem) -> Kernel:
    """q * scale: CuPy's elementwise multiply into a new array of q's dtype."""
    d, s = p.head_dim, p.softmax_scale

    def body(ctx: Ctx, b, h, rows):
        x = ctx.load("X", "Q", (b, h, rows, (0, d)))
        x = ctx.compute(np.multiply, x, s, vector=(rows[1] - rows[0]) * d, out="X")
        ctx.store("X", "Qs", (b, h, rows, (0, d)), x)

    return rows_kernel(p, "scale_q", p.seq_q, body, {"X": p.itemsize}, "Qs = q * scale", "fwd")


def _table_cast(p: Problem, hw: Hardware, name: str, src: str, dst: str) -> Kernel:
    """dst = src cast, element by element, over a (b, h, seq_q, seq_k) table."""

    def body(ctx: Ctx, b, h, r, cols):
        x = ctx.load("X", src, (b, h, r, cols))
        ctx.store("X", dst, (b, h, r, cols), x)

    return chunk_kernel(name, p, hw, body, {"X": FP32}, f"{dst} = {src} cast (cupy copy)")


def _tensors(p: Problem, half: bool) -> dict[str, TensorSpec]:
    nq, nk, d, h = p.seq_q, p.seq_k, p.head_dim, p.heads

    def spec(name, shape, itemsize, role="intermediate", desc=""):
        return TensorSpec(name, (p.batch, *shape), itemsize, role, desc)

    out = {
        "Q": spec("Q", (h, nq, d), p.itemsize, "input"),
        "K": spec("K", (p.kv_heads, nk, d), p.itemsize, "input"),
        "V": spec("V", (p.kv_heads, nk, d), p.itemsize, "input"),
        "Qs": spec("Qs", (h, nq, d), p.itemsize, desc="q * scale"),
        "Ktf": spec("Ktf", (h, d, nk), FP32, desc="k.swapaxes(-1, -2) made contiguous, float32"),
        "S": spec("S", (h, nq, nk), p.itemsize, desc="scores (the runner's s)"),
        "P": spec("P", (h, nq, nk), p.itemsize, desc="softmax(S)"),
        "O": spec("O", (h, nq, d), p.itemsize, "output"),
    }
    if p.group_size > 1:  # cp.repeat(k, group, axis=1), cp.repeat(v, group, axis=1)
        out["Kr"] = spec("Kr", (h, nk, d), p.itemsize, desc="K repeated per query head")
        out["Vr"] = spec("Vr", (h, nk, d), p.itemsize, desc="V repeated per query head")
    if half:
        out["Qf"] = spec("Qf", (h, nq, d), FP32, desc="Qs as float32")
        out["Sf"] = spec("Sf", (h, nq, nk), FP32, desc="the float32 product Q Kᵀ")
        out["Pf"] = spec("Pf", (h, nq, nk), FP32, desc="P as float32")
        out["Vf"] = spec("Vf", (h, nk, d), FP32, desc="V as float32")
        out["Of"] = spec("Of", (h, nq, d), FP32, desc="the float32 product P V")
    return out


def forward(p: Problem, hw: Hardware) -> tuple[list[Kernel], dict[str, TensorSpec]]:
    """The kernels one call of the baseline launches, in order, and the tensors they touch."""
    nq, nk, d = p.seq_q, p.seq_k, p.head_dim
    half = p.itemsize < FP32
    grouped = p.group_size > 1
    k_src, v_src = ("Kr", "Vr") if grouped else ("K", "V")
    kernels: list[Kernel] = []
    if grouped:
        kernels += [
            copy_kernel(p, "repeat_k", "K", "Kr", nk, kv=True, transpose=False),
            copy_kernel(p, "repeat_v", "V", "Vr", nk, kv=True, transpose=False),
        ]
    kernels.append(_scale_kernel(p))
    a_qk = "Qs"
    if half:
        kernels.append(copy_kernel(p, "cast_q", "Qs", "Qf", nq, kv=False, transpose=False))
        a_qk = "Qf"
    kernels.append(copy_kernel(p, "cast_kt", k_src, "Ktf", nk, kv=False, transpose=True))
    s_out = "Sf" if half else "S"
    kernels.append(
        _gemm(
            p,
            "sgemm_qk",
            Operand(a_qk, head_region),
            Operand("Ktf", head_region),
            Operand(s_out, head_region),
            nq,
            nk,
            d,
            "S = Qs Kᵀ, float32 GEMM on the FMA units (cuBLAS)",
        )
    )
    if half:
        kernels.append(_table_cast(p, hw, "cast_s", "Sf", "S"))
    kernels.append(kernel_naive._softmax(p, hw))
    p_in, v_in, o_out = ("Pf", "Vf", "Of") if half else ("P", v_src, "O")
    if half:
        kernels += [
            _table_cast(p, hw, "cast_p", "P", "Pf"),
            copy_kernel(p, "cast_v", v_src, "Vf", nk, kv=False, transpose=False),
        ]
    kernels.append(
        _gemm(
            p,
            "sgemm_pv",
            Operand(p_in, head_region),
            Operand(v_in, head_region),
            Operand(o_out, head_region),
            nq,
            d,
            nk,
            "O = P V, float32 GEMM on the FMA units (cuBLAS)",
        )
    )
    if half:
        kernels.append(copy_kernel(p, "cast_o", "Of", "O", nq, kv=False, transpose=False))
    return kernels, _tensors(p, half)


def make_plan(p: Problem, hw: Hardware) -> Plan:
    """The baseline's plan: forward only, no dropout (what the runner computes)."""
    if p.pass_ != "fwd" or p.dropout > 0:
        raise ValueError("the cupy.matmul baseline is a forward pass without dropout")
    kernels, tensors = forward(p, hw)
    half = p.itemsize < FP32
    notes = (
        "cupy.matmul computes half precision in float32: each product casts its operands, "
        "multiplies on the FMA units and casts the result back"
        if half
        else "cupy.matmul multiplies float32 in float32 on the FMA units",
    )
    plan = Plan(
        NAME,
        p,
        hw,
        Tiles(GEMM_ROWS, gemm_cols(p.seq_k), GEMM_CHUNK),
        tensors,
        tuple(kernels),
        notes,
        framework_ops=VIEW_OPS + (HALF_OPS if half else 0),
        host_issued=True,
    )
    plan.check_fits()
    return plan
