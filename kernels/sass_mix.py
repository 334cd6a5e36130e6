"""The instruction mix of our kernels' inner loops, counted from the compiled code (SASS).

    python -m kernels.sass_mix            # rewrite hbmsim/data/kernel_sass.json
    python -m kernels.sass_mix --check    # compare with the cached file, write nothing

Each kernel variant the validation runs time is compiled with NVRTC for sm_90 exactly as a
GPU run compiles it (kernels/nvrtc.py) and disassembled with `nvdisasm` (PyPI
`nvidia-cuda-nvdisasm`, in the dev extra). A loop is a backward branch and the instructions
from its target up to it; per loop the instructions are sorted into classes (FFMA, HMMA,
shared loads and stores, global loads and stores, conversions, integer and address
arithmetic, branches, barriers, ...). The loops are named by what they hold: the products
(FFMA: the score loop and, with an exp (MUFU), the P V loop of flash_fwd; the k-step loop of
naive.cu's matmul) and the tile copies (global loads into shared stores). flash_fwd_wmma's K/V
loop (the one holding its HMMAs) is recorded with its mix under "wmma"; the model does not use
it (its matmuls run at the calibrated WMMA rate).

Per variant the cache keeps each loop's mix per source iteration and two numbers the tile
program uses (hbmsim/algorithms/loop_costs.py):
- `instructions_per_fma`: every instruction of one K/V step (or one k-chunk of the matmul)
  over its FMAs: the products' loops and the tile copies, as compiled;
- `cycles_per_fma_by_warps`: scheduler cycles per FMA instruction with 1..8 warps on a
  scheduler, the products and the tile copies replayed through hbmsim/gpu/issue.py (the
  compiler's stall counts and scoreboard waits, cited latencies and pipe rates). A copy
  loop waits for each round of its global loads (an L2 hit) before storing them and
  starting the next: rounds x latency the engine's one latency per tile load leaves out.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hbmsim.gpu.issue import LATENCY, PIPES, Instr, cycles_per_iteration  # noqa: E402

CACHE = ROOT / "hbmsim" / "data" / "kernel_sass.json"
ARCH = "sm_90"
MAX_WARPS = 8  # per scheduler: 32 warps per SM; more issue as 8 do (the loops are full by then)
ELEM = {"fp16": "half", "bf16": "bf16", "fp32": "float"}


def flash_variants() -> list[dict]:
    """flash_fwd as the recorded runs launch it (kernels/validate.py SWEEP): fp16, 64 x 64
    at head dim 64 and 128 with and without the causal mask, and every tile pair at d 64."""
    out = []
    for d in (64, 128):
        for causal in (False, True):
            out.append(dict(bq=64, bk=64, d=d, causal=causal, dtype="fp16"))
    for bq in (32, 64, 128):
        for bk in (32, 64, 128):
            if (bq, bk) != (64, 64):
                out.append(dict(bq=bq, bk=bk, d=64, causal=False, dtype="fp16"))
    return out


def naive_variants() -> list[dict]:
    """naive.cu's matmuls as the runs launch them: 128 x 128 tiles, 32-deep chunks, fp16."""
    return [dict(bm=128, bn=128, bd=32, dtype="fp16")]


def flash_key(bq: int, bk: int, d: int, causal: bool, dtype: str) -> str:
    return f"flash_fwd bq{bq} bk{bk} d{d} {'causal' if causal else 'full'} {dtype}"


def _flash_defines(v: dict) -> tuple[str, ...]:
    """The -D flags a flash variant compiles with (both the scalar and the WMMA kernel)."""
    return (
        f"-DBQ={v['bq']}",
        f"-DBK={v['bk']}",
        f"-DHEAD_DIM={v['d']}",
        f"-DCAUSAL={int(v['causal'])}",
        f"-DELEM={ELEM[v['dtype']]}",
    )


def matmul_key(name: str, bm: int, bn: int, bd: int, dtype: str) -> str:
    return f"{name} bm{bm} bn{bn} bd{bd} {dtype}"


# --- disassembling ------------------------------------------------------------------------


def nvdisasm() -> str | None:
    """nvdisasm on PATH, or the one the nvidia-cuda-nvdisasm wheel installs."""
    found = shutil.which("nvdisasm")
    if found:
        return found
    try:
        import nvidia  # the namespace package the CUDA wheels install into
    except ImportError:
        return None
    for root in getattr(nvidia, "__path__", []):
        for cand in sorted(Path(root).glob("cu*/bin/nvdisasm")):
            return str(cand)
    return None


def disassemble(cubin: bytes, tool: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin + b"\0")  # nvrtc.getCUBIN drops the trailing NUL byte
        done = subprocess.run([tool, "-c", "-hex", str(path)], capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"nvdisasm failed: {done.stderr[-2000:]}")
        return done.stdout


def versions(tool: str) -> dict:
    from cupy.cuda import nvrtc

    out = subprocess.run([tool, "--version"], capture_output=True, text=True).stdout
    release = re.search(r"release ([\d.]+), V([\d.]+)", out)
    return {
        "compiler": "NVRTC {}.{}".format(*nvrtc.getVersion()),
        "disassembler": f"nvdisasm {release.group(2) if release else out.strip()[-40:]}",
        "arch": ARCH,
    }


_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\* (0x[0-9a-f]+) \*/")
_HIGH = re.compile(r"^\s*/\* (0x[0-9a-f]+) \*/\s*$")
_LABEL = re.compile(r"^(\.L_x_\d+):")
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")


def functions(sass: str) -> dict[str, list[tuple[str, str | None]]]:
    """Per kernel: its instructions in order, each (text, label starting here or None).
    The text ends with the instruction's control bits as ` #ctrl=0x...` (the high 64 bits
    of its encoding, `control`)."""
    out: dict[str, list] = {}
    current, label = None, None
    lines = sass.splitlines()
    for n, line in enumerate(lines):
        if m := re.match(r"\s*\.text\.(\w+):", line):
            current = out.setdefault(m.group(1), [])
            continue
        if current is None:
            continue
        if m := _LABEL.match(line.strip()):
            label = m.group(1)
            continue
        if m := _LINE.search(line):
            high = _HIGH.match(lines[n + 1]) if n + 1 < len(lines) else None
            ctrl = f" #ctrl={high.group(1)}" if high else ""
            current.append((m.group(2).strip() + ctrl, label))
            label = None
    return out


def loops(code: list[tuple[str, str | None]]) -> list[tuple[int, int]]:
    """(first, last) instruction indices of every loop: a branch back to a label at or before
    it; innermost first."""
    where = {lab: i for i, (_, lab) in enumerate(code) if lab}
    found = []
    for i, (text, _) in enumerate(code):
        if "BRA" in text.split()[0:2] or re.match(r"(@!?U?P\w+\s+)?BRA\b", text):
            m = _TARGET.search(text)
            if m and m.group(1) in where and where[m.group(1)] <= i:
                found.append((where[m.group(1)], i))
    return sorted(found, key=lambda r: r[1] - r[0])


# --- classifying --------------------------------------------------------------------------

CLASSES = (
    "ffma",  # FFMA (the scalar products' FMAs)
    "hmma",  # HMMA (warp-level tensor-core MMA)
    "fp32",  # other FP32 arithmetic: FADD, FMUL, FMNMX, FSETP, FSEL
    "convert",  # element conversions: HADD2.F32 (fp16 to fp32), F2F, F2FP, I2F, F2I, PRMT
    "lds",  # shared-memory loads (LDS, LDSM)
    "sts",  # shared-memory stores
    "ldg",  # global loads
    "stg",  # global stores
    "mufu",  # special functions (exp2)
    "int",  # integer and address arithmetic, moves, predicates
    "branch",  # BRA, BSSY, BSYNC, EXIT
    "barrier",  # BAR
    "other",
)


def strip(text: str) -> str:
    """The instruction without its control-bits suffix."""
    return text.split(" #ctrl=")[0]


def control(text: str) -> dict:
    """The scheduling control bits of a Volta-and-later instruction (bits 105-125 of its 128,
    Jia et al. arXiv:1804.06826 Sec. 2.1): stall cycles, yield, write and read scoreboard
    barrier (7: none), wait mask, operand reuse."""
    m = re.search(r"#ctrl=(0x[0-9a-f]+)", text)
    hi = int(m.group(1), 16) if m else 0
    return {
        "stall": hi >> 41 & 0xF,
        "yield": hi >> 45 & 1,
        "write": hi >> 46 & 7,
        "read": hi >> 49 & 7,
        "wait": hi >> 52 & 0x3F,
    }


def opcode(text: str) -> str:
    t = re.sub(r"^@!?U?P[T\d]+\s+", "", strip(text))
    return t.split()[0]


def classify(text: str) -> str:
    op = opcode(text)
    base = op.split(".")[0]
    if base == "FFMA":
        return "ffma"
    if base == "HMMA":
        return "hmma"
    if base in ("FADD", "FMUL", "FMNMX", "FSETP", "FSEL", "FCHK", "FMUL32I", "FADD32I"):
        return "fp32"
    if op.startswith("HADD2.F32") or base in ("F2F", "F2FP", "I2F", "F2I", "PRMT", "I2FP"):
        return "convert"
    if base in ("LDS", "LDSM"):
        return "lds"
    if base == "STS":
        return "sts"
    if base in ("LDG", "LD"):
        return "ldg"
    if base in ("STG", "ST"):
        return "stg"
    if base == "MUFU":
        return "mufu"
    if base in ("BRA", "BSSY", "BSYNC", "EXIT", "RET", "CALL", "WARPSYNC"):
        return "branch"
    if base in ("BAR", "DEPBAR"):
        return "barrier"
    if base in ("HADD2", "HFMA2", "HMUL2"):
        return "fp32"  # FP16x2 arithmetic on the FMA pipe (HFMA2.MMA also zeroes registers)
    if base in (
        "IADD3", "IMAD", "LOP3", "SHF", "LEA", "ISETP", "MOV", "SEL", "IABS", "IMNMX",
        "PLOP3", "CS2R", "S2R", "S2UR", "LDC", "ULDC", "UMOV", "UIADD3", "ULEA", "USHF",
        "ULOP3", "UISETP", "VIADD", "VIADDMNMX", "P2R", "R2P", "SHFL", "POPC", "FLO",
        "UIMAD", "USEL", "R2UR", "IMNMX", "LEA.HI", "NOP",
    ):  # fmt: skip
        return "int"
    return "other"


def instr(text: str) -> Instr:
    """The issue model's view of one SASS line: its pipe (from the opcode), its stall count
    and scoreboard barriers (from its control bits) and what releases its write barrier."""
    cls = classify(text)
    op = opcode(text)
    base = op.split(".")[0]
    c = control(text)
    pipe = {
        "ffma": "fma",
        "hmma": "fma",
        "fp32": "fma",
        "convert": "convert",
        "lds": "shared",
        "sts": "shared",
        "ldg": "shared",
        "stg": "shared",
        "mufu": "mufu",
        "int": "alu",
        "branch": "branch",
        "barrier": "branch",
        "other": "alu",
    }[cls]
    if op.startswith("HADD2.F32") or base == "IMAD":
        pipe = "fma_half"
    elif base in ("MOV", "CS2R"):
        pipe = "alu"
    if base.startswith("U") or base == "S2UR":
        pipe = "uniform"
    latency = {"lds": "shared", "ldg": "global", "mufu": "mufu"}.get(cls, "special")
    return Instr(
        pipe,
        stall=c["stall"],
        wait_mask=c["wait"],
        write_barrier=-1 if c["write"] == 7 else c["write"],
        read_barrier=-1 if c["read"] == 7 else c["read"],
        latency=latency,
    )


def mix(texts: list[str]) -> dict[str, int]:
    """Instructions per class (CLASSES)."""
    out = {c: 0 for c in CLASSES}
    for t in texts:
        out[classify(t)] += 1
    return out


# --- per kernel ---------------------------------------------------------------------------


def _loop_bodies(code) -> list[list[str]]:
    """Each innermost loop's instructions (loops holding no other loop)."""
    spans = loops(code)
    inner = [
        (a, b)
        for a, b in spans
        if not any(a <= c and d <= b and (c, d) != (a, b) for c, d in spans)
    ]
    return [[code[i][0] for i in range(a, b + 1)] for a, b in inner]


def analyse_flash(sass: str, v: dict) -> dict:
    """flash_fwd: the score loop (FFMA, no MUFU), the P V loop (FFMA and MUFU) and the K, V
    tile copies (LDG into STS), per K/V tile of one warp."""
    code = functions(sass)["flash_fwd"]
    bodies = _loop_bodies(code)
    bq, bk, d = v["bq"], v["bk"], v["d"]
    itemsize = {"fp16": 2, "bf16": 2, "fp32": 4}[v["dtype"]]
    kj = 8 if bk % 8 == 0 else (4 if bk % 4 == 0 else 1)
    with_fma = [b for b in bodies if mix(b)["ffma"]]
    pv = max((b for b in with_fma if mix(b)["mufu"]), key=lambda b: mix(b)["ffma"])
    qk = max((b for b in with_fma if not mix(b)["mufu"]), key=lambda b: mix(b)["ffma"])
    copy = [b for b in bodies if mix(b)["ldg"] and mix(b)["sts"] and not mix(b)["ffma"]]
    copy_main = max(copy, key=lambda b: mix(b)["sts"]) if copy else []
    vec = 16 // itemsize
    per_thread_stores = bk * d / vec / bq  # load_tile: 16-byte vectors, BQ threads
    qk_iter = mix(qk)["ffma"] / (kj * d)  # source iterations (j0 steps) per body
    pv_iter = mix(pv)["ffma"] / d  # keys per body
    qk_trips, pv_trips = bk / kj / qk_iter, bk / pv_iter
    copy_trips = 2 * per_thread_stores / max(1, mix(copy_main)["sts"]) if copy_main else 0.0
    fmas = 2 * bk * d  # both products, per thread, per K/V tile
    loops_out = {
        "qk": _loop_entry(qk, qk_iter, qk_trips),
        "pv": _loop_entry(pv, pv_iter, pv_trips),
    }
    if copy_main:
        loops_out["copy"] = _loop_entry(copy_main, mix(copy_main)["sts"], copy_trips)
    issued = sum(e["instructions"] * e["trips_per_step"] for e in loops_out.values())
    # per step: both product loops and the tile copies replayed
    qk_body, pv_body = [instr(t) for t in qk], [instr(t) for t in pv]
    copy_body = [instr(t) for t in copy_main]
    curve = []
    for w in range(1, MAX_WARPS + 1):
        cyc = qk_trips * cycles_per_iteration(qk_body, w) + pv_trips * cycles_per_iteration(
            pv_body, w
        )
        if copy_body:
            cyc += copy_trips * cycles_per_iteration(copy_body, w)
        curve.append(round(cyc / (w * fmas), 4))
    return {
        "loops": loops_out,
        "fmas_per_step": fmas,
        "instructions_per_fma": round(issued / fmas, 4),
        "cycles_per_fma_by_warps": curve,
    }


def analyse_matmul(sass: str, name: str, v: dict) -> dict:
    """naive.cu's matmul (matmul_nt or matmul_nn): the k-step product loop and the A and B
    chunk copies (element by element), per k-chunk of one warp."""
    code = functions(sass)[name]
    bodies = _loop_bodies(code)
    tm, tn, bd = v["bm"] // 16, v["bn"] // 16, v["bd"]
    prod = max((b for b in bodies if mix(b)["ffma"]), key=lambda b: mix(b)["ffma"])
    prod_iter = mix(prod)["ffma"] / (tm * tn)
    copies = [b for b in bodies if mix(b)["sts"] and not mix(b)["ffma"]]
    loops_out = {"product": _loop_entry(prod, prod_iter, bd / prod_iter)}
    # each copy loop moves a BM x BD (A) or BD x BN (B) chunk, one element per store, over
    # 256 threads; the loops that store most per iteration are the main bodies (the rest are
    # remainders the trip counts here never reach)
    elems = {"copy_a": v["bm"] * bd / 256, "copy_b": bd * v["bn"] / 256}
    mains = sorted(copies, key=lambda b: -mix(b)["sts"])[:2]
    mains = sorted(mains, key=lambda b: code_index(code, b))
    for key, body in zip(("copy_a", "copy_b"), mains, strict=False):
        loops_out[key] = _loop_entry(body, mix(body)["sts"], elems[key] / mix(body)["sts"])
    fmas = bd * tm * tn
    issued = sum(e["instructions"] * e["trips_per_step"] for e in loops_out.values())
    replayed = [([instr(t) for t in prod], loops_out["product"]["trips_per_step"])]
    replayed += [
        ([instr(t) for t in body], loops_out[key]["trips_per_step"])
        for key, body in zip(("copy_a", "copy_b"), mains, strict=False)
    ]
    by_warps = [[cycles_per_iteration(b, w) for w in range(1, MAX_WARPS + 1)] for b, _ in replayed]
    for entry, cycles in zip(loops_out.values(), by_warps, strict=True):
        # one iteration of every warp on a scheduler, by warps (loop_costs uses them for
        # tiles whose last columns leave some warps without a product)
        entry["cycles_by_warps"] = [round(c, 3) for c in cycles]
    curve = [
        round(sum(n * by_warps[i][w - 1] for i, (_, n) in enumerate(replayed)) / (w * fmas), 4)
        for w in range(1, MAX_WARPS + 1)
    ]
    return {
        "loops": loops_out,
        "fmas_per_step": fmas,
        "instructions_per_fma": round(issued / fmas, 4),
        "cycles_per_fma_by_warps": curve,
    }


def analyse_wmma(sass: str, v: dict) -> dict:
    """flash_fwd_wmma, recorded for its mix (its matmuls run on tensor cores; the tile program
    takes their rate from the calibrated WMMA loop): the K/V loop's body as compiled (the loop
    holding the HMMAs; its softmax row loops inside it counted once each) and each inner loop's
    mix."""
    code = functions(sass)["flash_fwd_wmma"]
    spans = loops(code)
    step = max(
        (r for r in spans if mix([c[0] for c in code[r[0] : r[1] + 1]])["hmma"]),
        key=lambda r: r[1] - r[0],
    )
    inner = [r for r in spans if step[0] <= r[0] and r[1] <= step[1] and r != step]
    return {
        "step": _loop_entry([c[0] for c in code[step[0] : step[1] + 1]], 1, 1),
        "inner_loops": [
            _loop_entry([c[0] for c in code[a : b + 1]], 1, 0) for a, b in sorted(inner)
        ],
    }


def wmma_key(bq: int, bk: int, d: int, causal: bool, dtype: str) -> str:
    return f"flash_fwd_wmma bq{bq} bk{bk} d{d} {'causal' if causal else 'full'} {dtype}"


def code_index(code, body: list[str]) -> int:
    texts = [c[0] for c in code]
    for i in range(len(texts)):
        if texts[i : i + len(body)] == body:
            return i
    return -1


def _loop_entry(body: list[str], source_iterations: float, trips: float) -> dict:
    return {
        "instructions": len(body),
        "source_iterations": source_iterations,
        "trips_per_step": round(trips, 4),
        "mix": {k: n for k, n in mix(body).items() if n},
    }


def generate(only: set[str] | None = None) -> dict:
    """The cache's document: versions, the issue model's constants and every variant's
    counts (`only`: just the variants with those keys, for a quick check)."""
    from kernels.nvrtc import compile_cubin

    tool = nvdisasm()
    if tool is None:
        raise RuntimeError("nvdisasm is not installed (pip install nvidia-cuda-nvdisasm)")
    doc = {
        **versions(tool),
        "latency_cycles": LATENCY,
        "pipe_cycles": PIPES,
        "max_warps_per_scheduler": MAX_WARPS,
        "kernels": {},
        "wmma": {},
    }
    for v in flash_variants():
        if only is not None and flash_key(**v) not in only:
            continue
        cubin, _ = compile_cubin("flash_fwd.cu", _flash_defines(v), ARCH)
        doc["kernels"][flash_key(**v)] = analyse_flash(disassemble(cubin, tool), v)
    for v in flash_variants():  # the WMMA kernel at the same variants: its mix, for the record
        if only is not None and wmma_key(**v) not in only:
            continue
        cubin, _ = compile_cubin("flash_fwd_wmma.cu", _flash_defines(v), ARCH)
        doc["wmma"][wmma_key(**v)] = analyse_wmma(disassemble(cubin, tool), v)
    for v in naive_variants():
        names = [
            n for n in ("matmul_nt", "matmul_nn") if only is None or matmul_key(n, **v) in only
        ]
        if not names:
            continue
        defines = (
            f"-DBM={v['bm']}",
            f"-DBN={v['bn']}",
            f"-DBD={v['bd']}",
            "-DROWS=4",
            "-DCAUSAL=0",
            f"-DELEM={ELEM[v['dtype']]}",
        )
        cubin, _ = compile_cubin("naive.cu", defines, ARCH)
        sass = disassemble(cubin, tool)
        for name in names:
            doc["kernels"][matmul_key(name, **v)] = analyse_matmul(sass, name, v)
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the cache, write nothing")
    ap.add_argument("--out", type=Path, default=CACHE, help="where to write (default: the cache)")
    args = ap.parse_args(argv)
    doc = generate()
    if args.check:
        cached = json.loads(CACHE.read_text())
        same = cached["kernels"] == doc["kernels"] and cached.get("wmma") == doc["wmma"]
        print("same as the cache" if same else "differs from the cache")
        return 0 if same else 1
    from hbmsim.files.writer import write_atomic

    write_atomic(args.out, json.dumps(doc, indent=1, sort_keys=True) + "\n", "--out")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
