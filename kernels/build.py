"""Compile the kernels: with nvcc for real GPUs (resource checks), with g++ for the CPU.

Every flash_fwd variant is instantiated in one translation unit per GPU architecture, so one
nvcc call reports ptxas's registers, static shared memory and spills for all of them. The CPU
build compiles the same kernel source against emu/cuda_emu.h (with AddressSanitizer, so a
kernel that touches shared memory past what the host allocated fails loudly).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hbmsim import get_hardware
from hbmsim.algorithms.kernel_fa2 import smem_bytes, threads_per_cta

HERE = Path(__file__).resolve().parent
BUILD = HERE.parent / "build" / "kernels"
ELEMS = {"half": ("__half", 2), "bf16": ("__nv_bfloat16", 2), "float": ("float", 4)}
ARCHS = ("sm_80", "sm_90")


@dataclass(frozen=True)
class Variant:
    bq: int
    bk: int
    head_dim: int
    causal: bool
    elem: str = "half"
    wmma: bool = False  # flash_fwd_wmma.cu (tensor cores) instead of flash_fwd.cu

    @property
    def kernel(self) -> str:
        return "flash_fwd_wmma" if self.wmma else "flash_fwd"

    @property
    def algo(self) -> str:
        """The simulator's mirror of this kernel."""
        return "fa2-wmma-kernel" if self.wmma else "fa2-kernel"

    @property
    def name(self) -> str:
        return (
            f"{self.kernel}_bq{self.bq}_bk{self.bk}_d{self.head_dim}_"
            f"{'causal' if self.causal else 'full'}_{self.elem}"
        )

    @property
    def itemsize(self) -> int:
        return ELEMS[self.elem][1]

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory a launch requests: the simulator's footprint function."""
        return smem_bytes(self.bq, self.bk, self.head_dim, self.itemsize, self.wmma)

    @property
    def threads(self) -> int:
        return threads_per_cta(self.bq, self.wmma)

    def defines(self) -> list[str]:
        """-D flags: tiles, mask, element type (the GPU build), and which kernel (the CPU
        build's driver runs either)."""
        return [
            f"-DBQ={self.bq}",
            f"-DBK={self.bk}",
            f"-DHEAD_DIM={self.head_dim}",
            f"-DCAUSAL={int(self.causal)}",
            f"-DWMMA={int(self.wmma)}",
            f"-DELEM={self.elem}",
        ]


def variants() -> list[Variant]:
    """The variants CI compiles: every tile pair and head dim in half with both masks, and the
    other element types at 64 x 64; for the tensor-core kernel the same in half where the tiles
    fit a Hopper block's shared memory, and bf16 at 64 x 64 (WMMA takes no fp32 inputs)."""
    out = [
        Variant(bq, bk, d, causal)
        for bq in (32, 64, 128)
        for bk in (32, 64, 128)
        for d in (64, 128)
        for causal in (False, True)
    ]
    out += [
        Variant(64, 64, d, causal, elem)
        for elem in ("bf16", "float")
        for d in (64, 128)
        for causal in (False, True)
    ]
    hopper_block = get_hardware("h100-sxm").sram_bytes_per_block
    out += [
        v
        for bq in (32, 64, 128)
        for bk in (32, 64, 128)
        for d in (64, 128)
        for causal in (False, True)
        if (v := Variant(bq, bk, d, causal, wmma=True)).smem_bytes <= hopper_block
    ]
    out += [
        Variant(64, 64, d, causal, "bf16", wmma=True) for d in (64, 128) for causal in (False, True)
    ]
    return out


def instantiation_source(vs: list[Variant]) -> str:
    lines = [
        '#include "cuda_compat.cuh"',
        '#include "flash_fwd.cuh"',
        '#include "flash_fwd_wmma.cuh"',
        "",
    ]
    for v in vs:
        t = ELEMS[v.elem][0]
        lines.append(
            f'extern "C" __global__ void __launch_bounds__({v.threads}, 1) '
            f"{v.name}("
            f"const {t}* Q, const {t}* K, const {t}* V, {t}* O, float* LSE, int nq, int nk, "
            f"int heads, int kv_heads, float scale) {{ {v.kernel}_body<{v.bq}, {v.bk}, "
            f"{v.head_dim}, {'true' if v.causal else 'false'}, {t}>(Q, K, V, O, LSE, nq, nk, "
            "heads, kv_heads, scale); }"
        )
    return "\n".join(lines) + "\n"


_ENTRY = re.compile(r"Compiling entry function '(\w+)'")
_USED = re.compile(r"Used (\d+) registers(?:, used \d+ barriers)?(?:, (\d+) bytes smem)?")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def parse_ptxas(log: str) -> dict[str, dict]:
    """Per kernel: registers, static shared memory, stack frame and spills from `ptxas -v`."""
    out: dict[str, dict] = {}
    current = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            current = out.setdefault(
                m.group(1),
                {
                    "registers": 0,
                    "static_smem": 0,
                    "stack_frame": 0,
                    "spill_stores": 0,
                    "spill_loads": 0,
                },
            )
        elif current is not None and (m := _FRAME.search(line)):
            current.update(
                stack_frame=int(m.group(1)),
                spill_stores=int(m.group(2)),
                spill_loads=int(m.group(3)),
            )
        elif current is not None and (m := _USED.search(line)):
            current.update(registers=int(m.group(1)), static_smem=int(m.group(2) or 0))
    return out


def nvcc() -> str | None:
    return shutil.which("nvcc")


def compile_with_nvcc(arch: str, vs: list[Variant]) -> dict[str, dict]:
    """Compile all variants for one architecture; returns ptxas's report per kernel."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "variants.cu"
        src.write_text(instantiation_source(vs))
        cmd = [
            nvcc(),
            f"-arch={arch}",
            "-cubin",
            "-o",
            str(Path(tmp) / "v.cubin"),
            "-Xptxas",
            "-v",
            "-I",
            str(HERE),
            "-std=c++17",
            str(src),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"nvcc failed for {arch}:\n{done.stderr[-4000:]}")
        return parse_ptxas(done.stderr + done.stdout)


def _cpu_defines(defines: list[str]) -> list[str]:
    """A variant's -D flags for the CPU build: all but the element type (the CPU runs float)."""
    return [d for d in defines if not d.startswith("-DELEM=")]


def _emu_build(name: str, main: str, sources: list[Path], defines: list[str]) -> Path:
    """Build (once, cached by a hash of the sources and flags) a CPU executable of a kernel
    driver in emu/, with AddressSanitizer."""
    digest = hashlib.sha256(
        b"".join(s.read_bytes() for s in sources) + " ".join(defines).encode()
    ).hexdigest()[:16]
    out = BUILD / f"{name}-{digest}"
    if out.exists():
        return out
    BUILD.mkdir(parents=True, exist_ok=True)
    cmd = [
        "g++",
        "-std=c++20",
        "-O1",
        "-g",
        "-pthread",
        "-fsanitize=address",
        "-fno-omit-frame-pointer",
        "-fno-strict-aliasing",  # tile_io.cuh copies float rows as uint4, as CUDA code does
        *defines,
        "-o",
        str(out),
        str(HERE / "emu" / main),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"g++ failed:\n{done.stderr[-4000:]}")
    return out


def emu_binary(v: Variant) -> Path:
    """The CPU executable of one flash variant (float elements)."""
    sources = [
        HERE / "flash_fwd.cuh",
        HERE / "flash_fwd_wmma.cuh",
        HERE / "tile_io.cuh",
        HERE / "emu" / "cuda_emu.h",
        HERE / "emu" / "flash_fwd_main.cpp",
    ]
    return _emu_build(v.name, "flash_fwd_main.cpp", sources, _cpu_defines(v.defines()))


def emu_run(v: Variant, q, k, v_, scale: float):
    """Run the CPU build on float32 arrays (batch, heads, seq, d); returns (O, lse)."""
    import numpy as np

    b, heads, nq, d = q.shape
    kv_heads, nk = k.shape[1], k.shape[2]
    with tempfile.TemporaryDirectory() as tmp:
        for name, arr in (("q", q), ("k", k), ("v", v_)):
            np.ascontiguousarray(arr, dtype=np.float32).tofile(Path(tmp) / f"{name}.f32")
        smem = smem_bytes(v.bq, v.bk, v.head_dim, 4, v.wmma)  # float elements on the CPU
        cmd = [
            str(emu_binary(v)),
            str(nq),
            str(nk),
            str(heads),
            str(kv_heads),
            str(b),
            repr(float(scale)),
            tmp,
            str(smem),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if done.returncode:
            raise RuntimeError(
                f"emulated kernel failed ({done.returncode}):\n{done.stderr[-4000:]}"
            )
        o = np.fromfile(Path(tmp) / "o.f32", dtype=np.float32).reshape(b, heads, nq, d)
        lse = np.fromfile(Path(tmp) / "lse.f32", dtype=np.float32).reshape(b, heads, nq)
    return o, lse


# --- the naive path --------------------------------------------------------------------------


@dataclass(frozen=True)
class NaiveVariant:
    bm: int
    bn: int
    bd: int
    rows: int
    causal: bool
    elem: str = "half"

    @property
    def name(self) -> str:
        return (
            f"naive_bm{self.bm}_bn{self.bn}_bd{self.bd}_rows{self.rows}_"
            f"{'causal' if self.causal else 'full'}_{self.elem}"
        )

    def defines(self) -> list[str]:
        return [
            f"-DBM={self.bm}",
            f"-DBN={self.bn}",
            f"-DBD={self.bd}",
            f"-DROWS={self.rows}",
            f"-DCAUSAL={int(self.causal)}",
            f"-DELEM={self.elem}",
        ]


def naive_variants() -> list[NaiveVariant]:
    return [
        NaiveVariant(128, 128, 32, 4, True),
        NaiveVariant(64, 64, 32, 4, False),
        NaiveVariant(128, 64, 16, 1, True, "bf16"),
        NaiveVariant(64, 64, 32, 2, False, "float"),
    ]


def compile_naive_with_nvcc(arch: str, v: NaiveVariant) -> dict[str, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            nvcc(),
            f"-arch={arch}",
            "-cubin",
            "-o",
            str(Path(tmp) / "n.cubin"),
            "-Xptxas",
            "-v",
            "-I",
            str(HERE),
            "-std=c++17",
            *v.defines(),
            str(HERE / "naive.cu"),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"nvcc failed for {arch} {v.name}:\n{done.stderr[-4000:]}")
        return parse_ptxas(done.stderr + done.stdout)


def naive_emu_run(v: NaiveVariant, q, k, v_, scale: float):
    """The naive path on the CPU (float), with the simulator's shared-memory sizes; returns O."""
    import numpy as np

    from hbmsim.algorithms.kernel_naive import matmul_smem_bytes, softmax_smem_bytes

    sources = [
        HERE / "naive.cuh",
        HERE / "tile_io.cuh",
        HERE / "emu" / "cuda_emu.h",
        HERE / "emu" / "naive_main.cpp",
    ]
    binary = _emu_build(v.name, "naive_main.cpp", sources, _cpu_defines(v.defines()))
    b, heads, nq, d = q.shape
    kv_heads, nk = k.shape[1], k.shape[2]
    with tempfile.TemporaryDirectory() as tmp:
        for name, arr in (("q", q), ("k", k), ("v", v_)):
            np.ascontiguousarray(arr, dtype=np.float32).tofile(Path(tmp) / f"{name}.f32")
        cmd = [
            str(binary),
            str(nq),
            str(nk),
            str(heads),
            str(kv_heads),
            str(b),
            str(d),
            repr(float(scale)),
            tmp,
            str(matmul_smem_bytes(v.bm, v.bn, v.bd, 4)),
            str(softmax_smem_bytes(v.rows, nk, 4)),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if done.returncode:
            raise RuntimeError(
                f"emulated naive path failed ({done.returncode}):\n{done.stderr[-4000:]}"
            )
        return np.fromfile(Path(tmp) / "o.f32", dtype=np.float32).reshape(b, heads, nq, d)
