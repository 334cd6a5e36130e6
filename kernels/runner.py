"""Launch the kernels on a GPU through CuPy, and time them with CUDA events.

Shared memory per launch comes from the same functions the simulator's tile programs use
(hbmsim.algorithms.kernel_fa2 / kernel_naive). Inputs are float64 NumPy arrays (batch, heads,
seq, d); they are converted to the kernel's element type on the device. CuPy has no bfloat16
type, so bf16 travels as uint16 bit patterns (round to nearest even on the host).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from hbmsim import Problem
from hbmsim.algorithms.kernel_fa2 import smem_bytes as flash_smem_bytes
from hbmsim.algorithms.kernel_fa2 import threads_per_cta as flash_threads
from hbmsim.algorithms.kernel_naive import (
    REDUCE_FLOATS,
    matmul_smem_bytes,
    softmax_rows,
    softmax_smem_bytes,
)
from hbmsim.problem.attention import ITEMSIZE

from .nvrtc import cubin_path

ELEM = {"fp16": "half", "bf16": "bf16", "fp32": "float"}
NAIVE_THREADS = REDUCE_FLOATS  # one reduction slot per thread


def _cupy():
    import cupy

    return cupy


@functools.lru_cache(maxsize=64)
def module(source: str, defines: tuple[str, ...], arch_suffix: str = ""):
    """The compiled kernels of kernels/<source> for this GPU: NVRTC to a cubin (kernels/nvrtc.py,
    the path CI compiles for sm_80 and sm_90), loaded as it is. `arch_suffix` "a" asks for the
    architecture-specific target (sm_90a: wgmma) that pipes_probe.cu needs."""
    cp = _cupy()
    cc = cp.cuda.Device().compute_capability  # e.g. "90"
    return cp.RawModule(path=str(cubin_path(source, defines, f"sm_{cc}{arch_suffix}")))


def to_device(x: np.ndarray, dtype: str):
    cp = _cupy()
    x32 = np.ascontiguousarray(x, dtype=np.float32)
    if dtype == "fp16":
        return cp.asarray(x32.astype(np.float16))
    if dtype == "fp32":
        return cp.asarray(x32)
    bits = x32.view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even
    return cp.asarray(rounded.astype(np.uint16))


def to_host(x, dtype: str) -> np.ndarray:
    host = _cupy().asnumpy(x)
    if dtype == "bf16":
        return (host.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return host.astype(np.float64)


def poisoned(shape, dtype: str):
    """An output buffer full of NaN, so an element the kernel never writes is caught."""
    cp = _cupy()
    if dtype == "bf16":
        return cp.full(shape, 0x7FC0, dtype=cp.uint16)
    return cp.full(shape, np.nan, dtype=cp.float16 if dtype == "fp16" else cp.float32)


def _kernel(mod, name: str, smem: int):
    k = mod.get_function(name)
    if smem > 48 * 1024:  # above the default limit the kernel must opt in
        k.max_dynamic_shared_size_bytes = smem
    return k


def resources(kernels: dict) -> dict[str, dict]:
    """What the loaded cubin gives each kernel (by its CUDA name): registers per thread, which
    limit occupancy and which the prediction takes into account, and local memory per thread
    (spills; 0 unless the compiler ran out of registers). Metadata, so a kernel whose
    attributes cannot be read gets the reason instead, and the run goes on."""
    out: dict[str, dict] = {}
    for name, k in kernels.items():
        try:
            out[name] = {"registers": int(k.num_regs), "local_bytes": int(k.local_size_bytes)}
        except Exception as exc:  # noqa: BLE001 - recorded; the prediction then ignores it
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def flash_defines(p: Problem, bq: int, bk: int, dtype: str) -> tuple[str, ...]:
    """Compile-time parameters of the flash kernel for this problem and tiles."""
    return (
        f"-DBQ={bq}",
        f"-DBK={bk}",
        f"-DHEAD_DIM={p.head_dim}",
        f"-DCAUSAL={int(p.causal)}",
        f"-DELEM={ELEM[dtype]}",
    )


def naive_defines(p: Problem, hw, bm: int, bn: int, bd: int, dtype: str) -> tuple[str, ...]:
    """Compile-time parameters of the naive path's kernels."""
    return (
        f"-DBM={bm}",
        f"-DBN={bn}",
        f"-DBD={bd}",
        f"-DROWS={softmax_rows(p, hw)}",
        f"-DCAUSAL={int(p.causal)}",
        f"-DELEM={ELEM[dtype]}",
    )


def device_smem(hw) -> tuple[int, int]:
    """(shared memory per SM, the system's reserve per resident CTA) of this GPU in bytes, as
    its attributes give them; the preset `hw`'s (hbmsim.occupancy's rule) where the CuPy in
    use does not name them."""
    attrs = _cupy().cuda.Device().attributes
    per_sm = attrs.get("MaxSharedMemoryPerMultiprocessor", hw.sram_bytes_per_sm)
    reserve = attrs.get(
        "ReservedSharedMemoryPerBlock", hw.sram_bytes_per_sm - hw.sram_bytes_per_block
    )
    return int(per_sm), int(reserve)


def padded_smem_bytes(ctas_per_sm: int, own: int, per_sm: int, reserve: int) -> int:
    """The most dynamic shared memory a CTA may ask for so that an SM (`per_sm` bytes, of
    which `reserve` go to each resident CTA) holds exactly `ctas_per_sm` of them: shared
    memory then limits the SM to that many, whatever else would allow more. ValueError where
    the kernel's own `own` bytes do not fit that share."""
    smem = per_sm // ctas_per_sm - reserve
    if smem < own:
        raise ValueError(
            f"{ctas_per_sm} CTAs per SM leave {smem:,} bytes of shared memory each; "
            f"the kernel needs {own:,}"
        )
    assert per_sm // (smem + reserve) == ctas_per_sm  # one more would not fit
    return smem


def flash_launcher(
    p: Problem, bq: int, bk: int, dtype: str, wmma: bool = False, smem: int | None = None
):
    """A function (q, k, v, o, lse) -> None launching flash_fwd (or, with `wmma`, the
    tensor-core flash_fwd_wmma) for this problem and tiles. `smem`: the dynamic shared
    memory to ask for, at least what the kernel needs (more pads it, so that fewer CTAs share
    an SM: padded_smem_bytes)."""
    name = "flash_fwd_wmma" if wmma else "flash_fwd"
    defines = flash_defines(p, bq, bk, dtype)
    own = flash_smem_bytes(bq, bk, p.head_dim, ITEMSIZE[dtype], wmma)
    if smem is not None and smem < own:
        raise ValueError(f"{name} needs {own:,} bytes of shared memory; {smem:,} were given")
    smem = own if smem is None else smem
    kernel = _kernel(module(f"{name}.cu", defines), name, smem)
    grid = (math.ceil(p.seq_q / bq), p.batch * p.heads)
    threads = flash_threads(bq, wmma)

    def launch(q, k, v, o, lse):
        kernel(
            grid,
            (threads,),
            (
                q,
                k,
                v,
                o,
                lse,
                np.int32(p.seq_q),
                np.int32(p.seq_k),
                np.int32(p.heads),
                np.int32(p.kv_heads),
                np.float32(p.softmax_scale),
            ),
            shared_mem=smem,
        )

    launch.resources = resources({name: kernel})
    return launch


def _softmax_launcher(p: Problem, hw, mod, dtype: str):
    """A function (s, pmat) -> None launching naive.cu's row softmax from module `mod`."""
    rows = softmax_rows(p, hw)
    smem = softmax_smem_bytes(rows, p.seq_k, ITEMSIZE[dtype])
    kernel = _kernel(mod, "softmax_rows", smem)
    grid = (math.ceil(p.seq_q / rows), p.batch * p.heads)

    def launch(s, pmat):
        kernel(
            grid,
            (NAIVE_THREADS,),
            (s, pmat, np.int32(p.seq_q), np.int32(p.seq_k)),
            shared_mem=smem,
        )

    launch.resources = resources({"softmax_rows": kernel})
    return launch


def naive_launcher(p: Problem, hw, bm: int, bn: int, bd: int, dtype: str):
    """A function (q, k, v, s, pmat, o) -> None launching the naive path's three kernels."""
    mod = module("naive.cu", naive_defines(p, hw, bm, bn, bd, dtype))
    mm_smem = matmul_smem_bytes(bm, bn, bd, ITEMSIZE[dtype])
    nt, nn = _kernel(mod, "matmul_nt", mm_smem), _kernel(mod, "matmul_nn", mm_smem)
    softmax = _softmax_launcher(p, hw, mod, dtype)
    bh = p.batch * p.heads
    i32 = np.int32

    def launch(q, k, v, s, pmat, o):
        nt(
            (math.ceil(p.seq_k / bn), math.ceil(p.seq_q / bm), bh),
            (NAIVE_THREADS,),
            (
                q,
                k,
                s,
                i32(p.seq_q),
                i32(p.seq_k),
                i32(p.head_dim),
                i32(p.heads),
                i32(p.kv_heads),
                np.float32(p.softmax_scale),
            ),
            shared_mem=mm_smem,
        )
        softmax(s, pmat)
        nn(
            (math.ceil(p.head_dim / bn), math.ceil(p.seq_q / bm), bh),
            (NAIVE_THREADS,),
            (
                pmat,
                v,
                o,
                i32(p.seq_q),
                i32(p.head_dim),
                i32(p.seq_k),
                i32(p.heads),
                i32(p.kv_heads),
                np.float32(1.0),
            ),
            shared_mem=mm_smem,
        )

    launch.resources = {**resources({"matmul_nt": nt, "matmul_nn": nn}), **softmax.resources}
    return launch


CUBLAS_TILES = (128, 128, 32)  # naive.cu is compiled for its softmax only; these are unused


def cublas_launcher(p: Problem, hw, dtype: str):
    """A function (q, k, v, s, pmat, o) -> None: the vendor baseline of the naive path.
    S = (Q · scale) Kᵀ and O = P V by `cupy.matmul` (cuBLAS), naive.cu's row softmax between
    them. CuPy has no bfloat16 arrays, so this baseline runs fp16 and fp32 only."""
    if dtype not in ("fp16", "fp32"):
        raise ValueError(f"dtype: the cuBLAS baseline takes fp16 or fp32 (got {dtype})")
    cp = _cupy()
    softmax = _softmax_launcher(
        p, hw, module("naive.cu", naive_defines(p, hw, *CUBLAS_TILES, dtype)), dtype
    )
    group = p.heads // p.kv_heads

    def launch(q, k, v, s, pmat, o):
        if group > 1:  # GQA: cuBLAS wants one K/V head per query head
            k, v = cp.repeat(k, group, axis=1), cp.repeat(v, group, axis=1)
        cp.matmul(q * p.softmax_scale, k.swapaxes(-1, -2), out=s)
        softmax(s, pmat)
        cp.matmul(pmat, v, out=o)

    launch.resources = softmax.resources  # the products are cuBLAS's, not ours
    return launch


def run_flash(q, k, v, p: Problem, bq: int, bk: int, dtype: str = "fp16", wmma: bool = False):
    """O and lse (float64 on the host) from a flash kernel, outputs poisoned first."""
    cp = _cupy()
    dq, dk, dv = (to_device(x, dtype) for x in (q, k, v))
    o = poisoned(q.shape, dtype)
    lse = cp.full(q.shape[:3], np.nan, dtype=cp.float32)
    flash_launcher(p, bq, bk, dtype, wmma)(dq, dk, dv, o, lse)
    cp.cuda.Device().synchronize()
    return to_host(o, dtype), cp.asnumpy(lse).astype(np.float64)


def run_naive(q, k, v, p: Problem, hw, bm: int, bn: int, bd: int, dtype: str = "fp16"):
    """O (float64 on the host) from the naive path's own kernels, S, P and O poisoned first."""
    return _run_unfused(naive_launcher(p, hw, bm, bn, bd, dtype), q, k, v, p, dtype)


def run_cublas(q, k, v, p: Problem, hw, dtype: str = "fp16"):
    """O from the cuBLAS baseline, S, P and O poisoned first."""
    return _run_unfused(cublas_launcher(p, hw, dtype), q, k, v, p, dtype)


def _run_unfused(launch, q, k, v, p: Problem, dtype: str):
    cp = _cupy()
    dq, dk, dv = (to_device(x, dtype) for x in (q, k, v))
    nn = (p.batch, p.heads, p.seq_q, p.seq_k)
    s, pmat, o = poisoned(nn, dtype), poisoned(nn, dtype), poisoned(q.shape, dtype)
    launch(dq, dk, dv, s, pmat, o)
    cp.cuda.Device().synchronize()
    return to_host(o, dtype)


def time_median(
    fn, flush_bytes: int, reps: int = 20, warmup: int = 3, budget_s: float = 5.0
) -> float:
    """Median seconds of fn() by CUDA events, writing a buffer larger than L2 before each run
    so every run starts with a cold cache. Slow functions get fewer repetitions (at least 5)
    so one configuration takes about `budget_s` at most."""
    cp = _cupy()
    scratch = cp.empty(max(flush_bytes, 1) // 4 + 1, dtype=cp.float32)
    for _ in range(warmup):
        fn()
    times: list[float] = []
    for _ in range(reps):
        scratch.fill(1.0)
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) * 1e-3)
        if len(times) >= 5 and sum(times) > budget_s:
            break
    return float(np.median(times))
