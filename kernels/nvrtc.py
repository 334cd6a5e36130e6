"""Compile the kernel sources to cubins with NVRTC: the one compile path of GPU runs and of CI.

The runner loads the cubins this returns (`cupy.RawModule(path=...)`); CI compiles the same
sources with the same options for sm_80 and sm_90 on machines without a GPU and reads ptxas's
report from the log. CuPy's low-level NVRTC binding needs no driver, where its
`RawModule(code=...)` does (it asks the device for its architecture), so compiling here first
is what lets a machine without a GPU check exactly what a GPU run will load.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CUBIN_CACHE = HERE.parent / "build" / "kernels" / "cubin"


class NvrtcError(RuntimeError):
    """NVRTC is missing, or a kernel source failed to compile (the log is in the message)."""


@functools.lru_cache(maxsize=1)
def cuda_include_dirs() -> tuple[str, ...]:
    """Directories holding the CUDA headers the kernels include (cuda_fp16.h, mma.h): from
    CUDA_PATH / CUDA_HOME, where nvcc says its headers are, or the usual install location."""
    candidates = [
        Path(root) / "include"
        for root in (os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"))
        if root
    ]
    candidates += _nvcc_include_dirs()
    candidates.append(Path("/usr/local/cuda/include"))
    found: list[str] = []
    for inc in candidates:
        if (inc / "cuda_fp16.h").exists() and str(inc.resolve()) not in found:
            found.append(str(inc.resolve()))
    return tuple(found)


def _nvcc_include_dirs() -> list[Path]:
    """The -I directories of nvcc's own compile line (nvcc may be a wrapper script)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return []
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "empty.cu"
        src.write_text("")
        try:
            done = subprocess.run(
                [nvcc, "-v", "--dryrun", "-c", str(src), "-o", str(Path(tmp) / "empty.o")],
                capture_output=True,
                text=True,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired):
            return []
    return [Path(m) for m in re.findall(r'INCLUDES="-I([^"]+?)"', done.stderr + done.stdout)]


def options(defines: tuple[str, ...], arch: str) -> tuple[str, ...]:
    """NVRTC options for one kernel variant; `arch` like "sm_90"."""
    includes = cuda_include_dirs()
    if not includes:
        raise NvrtcError(
            "the CUDA headers (cuda_fp16.h) were not found: set CUDA_PATH to a CUDA toolkit"
        )
    return (
        "-std=c++17",
        f"-arch={arch}",
        "-Xptxas=-v",  # registers, shared memory and spills in the log
        f"-I{HERE}",
        *(f"-I{inc}" for inc in includes),
        *defines,
    )


def compile_cubin(source: str, defines: tuple[str, ...], arch: str) -> tuple[bytes, str]:
    """(cubin, log) of kernels/<source> compiled with `defines` for `arch`."""
    try:
        from cupy.cuda import nvrtc
    except ImportError as exc:
        raise NvrtcError(f"CuPy's NVRTC binding is not importable ({exc})") from exc
    code = (HERE / source).read_text()
    opts = options(tuple(defines), arch)
    prog = nvrtc.createProgram(code, source, (), ())
    try:
        try:
            nvrtc.compileProgram(prog, opts)
        except nvrtc.NVRTCError as exc:
            raise NvrtcError(
                f"NVRTC failed on {source} {' '.join(defines)} for {arch}:\n"
                f"{nvrtc.getProgramLog(prog)[-4000:]}"
            ) from exc
        return nvrtc.getCUBIN(prog), nvrtc.getProgramLog(prog)
    finally:
        nvrtc.destroyProgram(prog)


def cubin_path(source: str, defines: tuple[str, ...], arch: str) -> Path:
    """A cubin file for this variant, compiled once and cached by the sources' hash."""
    digest = hashlib.sha256()
    for path in sorted(HERE.glob("*.cu*")):
        digest.update(path.name.encode() + path.read_bytes())
    digest.update(" ".join((*defines, arch)).encode())
    out = CUBIN_CACHE / f"{Path(source).stem}-{digest.hexdigest()[:20]}.cubin"
    if not out.exists():
        cubin, _ = compile_cubin(source, defines, arch)
        CUBIN_CACHE.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(cubin)
        tmp.replace(out)
    return out
