"""Mirror of PyTorch eager attention as the FlashAttention papers timed it.

The baseline is `attention_pytorch` of Dao-AILab/flash-attention
benchmarks/benchmark_flash_attention.py, on a packed qkv (batch, seqlen, 3, heads, d) with
requires_grad:

    q = rearrange(q, 'b t h d -> (b h) t d')     permute of a strided view: a copy kernel
    k = rearrange(k, 'b s h d -> (b h) d s')     a transposing copy kernel
    scores = torch.empty(...)                      allocation only
    scores = torch.baddbmm(scores, q, k, beta=0, alpha=softmax_scale)   one GEMM, scale fused
    if causal:                                     an additive float mask, built every call:
        causal_mask = torch.triu(torch.full((seqlen, seqlen), -10000.0), 1)   fill, triu
        scores = scores + causal_mask.to(dtype=scores.dtype)                cast, add
    attention = torch.softmax(scores, dim=-1)      one softmax kernel
    attention_drop = F.dropout(attention, dropout_p)   ATen returns the input when p == 0
    output = torch.einsum('bhts,bshd->bthd', attention_drop, v)   v's strided view is copied
                                                   to (b h) s d, then one bmm

Autograd's backward of that graph (torch/csrc/autograd derivatives.yaml): the einsum's bmm
backward (dO is copied to the bmm layout first; grad_self = dO Vᵀ, grad_mat2 = Pᵀ dO), the
dropout backward (native_dropout_backward), the softmax backward (_softmax_backward_data),
the add passes the gradient through, baddbmm's backward: `maybe_multiply(grad.bmm(batch2ᵀ),
alpha)` and `maybe_multiply(batch1ᵀ.bmm(grad), alpha)` (each a GEMM then a scaling kernel),
and UnbindBackward stacks dq, dk, dv into qkv's gradient (one kernel).

hbmsim keeps Q, K, V as (batch, heads, seq, d) tensors; the copies read them with the same
bytes the strided qkv views have. Grouped K/V heads (not in the benchmark): the copies of K and
V read each query head's K/V head (what `repeat_kv` then `.contiguous()` does), and the
backward sums the per-head gradients over each group. A causal mask with seq_q != seq_k is
the bottom-right aligned `triu(..., 1 + seq_k - seq_q)` of a (seq_q, seq_k) table.
"""

from __future__ import annotations

from dataclasses import astuple

from ...algorithms.kernels import Operand, gqa_reduce_kernel
from ...algorithms.kernels import matmul_kernel as gemm
from ...algorithms.registry import MATMUL_TILES
from ...algorithms.standard import (
    DEFAULT_TILES,
    dropout_bwd_kernel,
    dropout_kernel,
    softmax_kernel,
)
from ...gpu.hardware import Hardware
from ...problem.attention import MASK_ITEMSIZE, STAT_ITEMSIZE, Problem
from ...program.plan import Kernel, Plan, TensorSpec, Tiles
from ..common import assemble, override_note, refuse
from .kernels import copy_kernel, mask_kernels, scale_kernel, softmax_backward_kernels, stack_kernel

NAME = "torch-eager"

# Host-side operations per call that launch no kernel (each a dispatcher call), counted from
# attention_pytorch: unbind (1), the permutes inside the q and k rearranges (2), torch.empty
# (1), the scores rearrange view (1), the einsum's operand permutes and views and its output
# view (6); F.dropout with p == 0 returns its input (1).
FWD_OPS = 11
# Backward: autograd nodes that launch no kernel: the einsum's permute/view nodes (4), the add
# (1), the scores view (1), the q/k/v reshape and permute nodes (6), AccumulateGrad (1).
BWD_OPS = 13


def _head(bi, h, rows, cols):
    return (bi, h, rows, cols)


def _transposed(bi, h, rows, cols):
    return (bi, h, cols, rows)


def _table(p: Problem, name: str, desc: str, itemsize: int | None = None) -> TensorSpec:
    shape = (p.batch, p.heads, p.seq_q, p.seq_k)
    return TensorSpec(name, shape, itemsize or p.itemsize, "intermediate", desc)


def _rows(p: Problem, name: str, n: int, heads: int, role: str, desc: str = "") -> TensorSpec:
    return TensorSpec(name, (p.batch, heads, n, p.head_dim), p.itemsize, role, desc)


def tensors(p: Problem) -> dict[str, TensorSpec]:
    nq, nk, d, h = p.seq_q, p.seq_k, p.head_dim, p.heads
    out = {
        "Q": _rows(p, "Q", nq, h, "input"),
        "K": _rows(p, "K", nk, p.kv_heads, "input"),
        "V": _rows(p, "V", nk, p.kv_heads, "input"),
        "Qc": _rows(p, "Qc", nq, h, "intermediate", "q copied to (b h) t d"),
        "Kt": TensorSpec(
            "Kt", (p.batch, h, d, nk), p.itemsize, "intermediate", "k copied to (b h) d s"
        ),
        "Vc": _rows(p, "Vc", nk, h, "intermediate", "v copied to (b h) s d by the einsum"),
        "S": _table(p, "S", "baddbmm scores"),
        "P": _table(p, "P", "softmax"),
        "O": _rows(p, "O", nq, h, "output"),
    }
    if p.causal:
        shape = (p.seq_q, p.seq_k)
        out["mask_full"] = TensorSpec(
            "mask_full", shape, STAT_ITEMSIZE, "intermediate", "torch.full(..., -10000.0), fp32"
        )
        out["mask_triu"] = TensorSpec(
            "mask_triu", shape, STAT_ITEMSIZE, "intermediate", "torch.triu(mask, 1), fp32"
        )
        out["mask"] = TensorSpec(
            "mask", shape, p.itemsize, "intermediate", "causal_mask.to(scores.dtype)"
        )
    if p.dropout > 0:
        out["P_drop"] = _table(p, "P_drop", "dropout(P)")
        out["dropout_mask"] = _table(p, "dropout_mask", "keep-mask", MASK_ITEMSIZE)
    if "bwd" in p.pass_:
        out["dO"] = _rows(p, "dO", nq, h, "input")
        out["dOc"] = _rows(p, "dOc", nq, h, "intermediate", "dO copied to the bmm layout")
        if p.dropout > 0:
            out["dP_drop"] = _table(p, "dP_drop", "dO Vᵀ")
        out["dP"] = _table(p, "dP", "gradient of P")
        out["dP_P"] = _table(p, "dP_P", "tmp = grad * output in softmax's backward")
        out["dS"] = _table(p, "dS", "gradient of the scores")
        out["dQc"] = _rows(p, "dQc", nq, h, "intermediate")
        out["dKt"] = TensorSpec("dKt", (p.batch, h, d, nk), p.itemsize, "intermediate")
        out["dVc"] = _rows(p, "dVc", nk, h, "intermediate")
        out["dQ"] = _rows(p, "dQ", nq, h, "output")
        for n in ("dK", "dV"):
            out[n] = _rows(p, n, nk, p.kv_heads, "output")
            if p.group_size > 1:
                out[n + "_rep"] = _rows(p, n + "_rep", nk, h, "intermediate")
    return out


# --- the plan --------------------------------------------------------------------------------


def forward(p: Problem, hw: Hardware, t: Tiles) -> list[Kernel]:
    nq, nk, d = p.seq_q, p.seq_k, p.head_dim
    pd = "P_drop" if p.dropout > 0 else "P"
    kernels = [
        copy_kernel(p, "copy_q", "Q", "Qc", nq, False, False),
        copy_kernel(p, "copy_k", "K", "Kt", nk, True, True),
        gemm(
            "baddbmm",
            p,
            t,
            Operand("Qc", _head),
            Operand("Kt", _head),
            Operand("S", _head),
            nq,
            nk,
            d,
            p.softmax_scale,
            "S = baddbmm(S, q, k, beta=0, alpha=scale)",
        ),
    ]
    if p.causal:
        kernels += mask_kernels(p, hw)
    kernels.append(softmax_kernel(p, hw))
    if p.dropout > 0:
        kernels.append(dropout_kernel(p, hw))
    kernels += [
        copy_kernel(p, "copy_v", "V", "Vc", nk, True, False),
        gemm(
            "bmm",
            p,
            t,
            Operand(pd, _head),
            Operand("Vc", _head),
            Operand("O", _head),
            nq,
            d,
            nk,
            1.0,
            "O = einsum('bhts,bshd->bthd', P, v) as one bmm",
        ),
    ]
    return kernels


def backward(p: Problem, hw: Hardware, t: Tiles) -> list[Kernel]:
    nq, nk, d = p.seq_q, p.seq_k, p.head_dim
    pd = "P_drop" if p.dropout > 0 else "P"
    kernels = [
        copy_kernel(p, "copy_do", "dO", "dOc", nq, False, False, "bwd"),
        gemm(
            "bmm_dp",
            p,
            t,
            Operand("dOc", _head),
            Operand("Vc", _transposed, True),
            Operand("dP_drop" if p.dropout > 0 else "dP", _head),
            nq,
            nk,
            d,
            1.0,
            "grad_self = dO Vᵀ",
            "bwd",
        ),
        gemm(
            "bmm_dv",
            p,
            t,
            Operand(pd, _transposed, True),
            Operand("dOc", _head),
            Operand("dVc", _head),
            nk,
            d,
            nq,
            1.0,
            "grad_mat2 = Pᵀ dO",
            "bwd",
        ),
    ]
    if p.dropout > 0:
        kernels.append(dropout_bwd_kernel(p, hw))
    kernels += softmax_backward_kernels(p, hw)
    kernels += [
        gemm(
            "bmm_dq",
            p,
            t,
            Operand("dS", _head),
            Operand("Kt", _transposed, True),
            Operand("dQc", _head),
            nq,
            d,
            nk,
            1.0,
            "grad_batch1 = dS kᵀ",
            "bwd",
        ),
        scale_kernel(p, "mul_dq", "dQc", nq, False),
        gemm(
            "bmm_dk",
            p,
            t,
            Operand("Qc", _transposed, True),
            Operand("dS", _head),
            Operand("dKt", _head),
            d,
            nk,
            nq,
            1.0,
            "grad_batch2 = qᵀ dS",
            "bwd",
        ),
        scale_kernel(p, "mul_dk", "dKt", nk, True),
        stack_kernel(p),
    ]
    if p.group_size > 1:
        kernels.append(gqa_reduce_kernel(p))
    return kernels


def gemm_tiles(
    p: Problem, hw: Hardware, bq: int | None, bk: int | None
) -> tuple[Tiles, tuple[str, ...]]:
    """The GEMM tiles of the plan and how they were chosen. cuBLAS picks, per shape and GPU,
    a kernel whose shared memory fits the device (cublasLt's heuristics never return one that
    does not launch): a common fp16 CTA tile where it fits, else the largest of the textbook
    matmul's smaller tiles whose kernels fit (fp32 at head dim 64 on a 100 KiB block, e.g.).
    Tiles the user gives are taken as they are, and refused if they do not fit."""
    if bq is not None and bk is not None:
        return Tiles(bq, bk, DEFAULT_TILES.bd), ()
    cap = hw.sram_bytes_per_block
    for cq, ck, cd in (astuple(DEFAULT_TILES)[:3], *MATMUL_TILES):
        t = Tiles(bq or cq, bk or ck, cd)
        kernels = forward(p, hw, t) + (backward(p, hw, t) if "bwd" in p.pass_ else [])
        if max(k.sram_bytes for k in kernels) <= cap:
            break
    if (t.bq, t.bk, t.bd) == (bq or DEFAULT_TILES.bq, bk or DEFAULT_TILES.bk, DEFAULT_TILES.bd):
        return t, ()
    return t, (
        f"{DEFAULT_TILES.bq} x {DEFAULT_TILES.bk} x {DEFAULT_TILES.bd} GEMM tiles do not fit "
        f"{cap:,} bytes of shared memory per block at head_dim {p.head_dim} {p.dtype}; cuBLAS "
        f"picks a kernel that does: {t.bq} x {t.bk} x {t.bd} here",
    )


def make_plan(p: Problem, hw: Hardware, bq: int | None = None, bk: int | None = None) -> Plan:
    if p.dtype == "fp8":  # ATen's baddbmm dispatches floating and complex types, half, bf16
        raise refuse("dtype", "torch-eager: \"baddbmm_cuda\" not implemented for 'Float8_e4m3fn'")
    t, fitted = gemm_tiles(p, hw, bq, bk)
    notes = [
        "benchmark_flash_attention.py attention_pytorch: copies for the rearranges, baddbmm, "
        + ("the additive -10000 causal mask (full, triu, cast, add), " if p.causal else "")
        + "softmax, "
        + (
            "dropout, "
            if p.dropout > 0
            else "no dropout kernel (ATen returns the input at p = 0), "
        )
        + "the einsum's copy of v and its bmm",
        *(
            fitted
            or (
                f"cuBLAS GEMM tiles {t.bq} x {t.bk} x {t.bd} (a common fp16 CTA tile; cuBLAS "
                "picks its own per shape)",
            )
        ),
    ]
    if p.group_size > 1:
        notes.append(
            f"{p.group_size} query heads per K/V head (not in the benchmark): the K and V "
            "copies expand them per query head, as repeat_kv then .contiguous() does; the "
            "backward sums dK, dV over each group"
        )
    notes.extend(override_note(bq, bk, (t.bq, t.bk)))
    fwd = forward(p, hw, t)
    bwd = backward(p, hw, t) if "bwd" in p.pass_ else []
    ops = (FWD_OPS if "fwd" in p.pass_ else 0) + (BWD_OPS if "bwd" in p.pass_ else 0)
    ops -= 1 if p.dropout > 0 and "fwd" in p.pass_ else 0  # dropout launches its kernel
    return assemble(NAME, p, hw, t, fwd, bwd, tensors(p), tuple(notes), ops)
