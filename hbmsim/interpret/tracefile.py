"""The trace file (docs/trace-format.md): writing it, and reading it back as a hostile input.

A trace's checksum proves integrity, not sanity: a file with a valid checksum can still be
written by hand or by another program. So `load_trace` checks, before anything is built from
it, the size (the file, then the record count before decompressing, so a "zip bomb" is refused
unopened), every header field (type and range), and every record against the header: op codes,
kernel / tensor / buffer indices, regions inside their tensor, bytes equal to the region's size,
flops within bounds, CTAs grouped in launch order and every CTA of every kernel present. Each
failure is one TraceFileError naming the file, the field (or record) and what was expected.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import numpy as np

from ..algorithms.registry import ALGOS, make_plan
from ..errors import HbmsimError, TraceFileError
from ..files.reader import FileChecker, parse_json, read_bytes
from ..files.writer import write_atomic
from ..gpu.profile import check_hardware_fields
from ..libraries.registry import IMPLS, make_impl_plan
from ..problem.attention import MAX_SEQ, Problem
from .counts import count_plan
from .trace import MAX_AXES, MAX_TRACE_RECORDS, OP_COMPUTE, OPS, RECORD_DTYPE, Trace, plan_meta

FORMAT_VERSION = 1
MAGIC = b"HBMTRACE"
MAX_TRACE_FILE_BYTES = 128 * 1024 * 1024  # a full MAX_TRACE_RECORDS trace compresses far below
MAX_HEADER_BYTES = 1024 * 1024  # the header lists kernels and tensors: a few kilobytes
MAX_KERNELS = 64
MAX_TENSORS = 64
MAX_BUFFERS = 256
MAX_TENSOR_ELEMENTS = 1 << 53  # keeps every tile key (offset into a tensor) exact in int64
MAX_OP_FLOPS = (
    1 << 32
)  # a compute op works on tiles in SRAM: 2 x 256^3 = 3.4e7 flops at most in practice
MAX_THREADS_PER_CTA = 1024  # [CUDA-CC] the most threads a thread block may have

_PREFIX = struct.Struct("<8sII")  # magic, version, header length


def save_trace(trace: Trace, path: str | Path) -> int:
    """Write the trace file (whole, or not at all); returns its size in bytes."""
    payload = zlib.compress(trace.records.astype(RECORD_DTYPE, copy=False).tobytes(), 6)
    header = dict(trace.meta)
    header.update(
        {
            "record_dtype": RECORD_DTYPE.descr,
            "record_size": RECORD_DTYPE.itemsize,
            "n_records": int(len(trace.records)),
            "payload_bytes": len(payload),
            "compression": "zlib",
        }
    )
    head = json.dumps(header, separators=(",", ":")).encode()
    body = _PREFIX.pack(MAGIC, FORMAT_VERSION, len(head)) + head + payload
    return write_atomic(path, body + struct.pack("<I", zlib.crc32(body)), "output")


def load_trace(path: str | Path) -> Trace:
    """Read and check a trace file. Every failure is a TraceFileError saying what is wrong."""
    data = read_bytes(path, "trace", MAX_TRACE_FILE_BYTES, TraceFileError)
    chk = FileChecker("trace", path, TraceFileError)
    if len(data) < _PREFIX.size + 4:
        raise chk.error(None, f"is not an hbmsim trace file (only {len(data)} bytes)")
    magic, version, head_len = _PREFIX.unpack_from(data)
    if magic != MAGIC:
        raise chk.error(None, "is not an hbmsim trace file (wrong magic bytes)")
    if version != FORMAT_VERSION:
        raise chk.error(
            None, f"is format version {version}; this hbmsim reads version {FORMAT_VERSION} only"
        )
    if _PREFIX.size + head_len + 4 > len(data):
        raise chk.error(None, f"is truncated (its header alone needs {head_len:,} bytes)")
    if head_len > MAX_HEADER_BYTES:
        raise chk.error("header", f"is {head_len:,} bytes; at most {MAX_HEADER_BYTES:,}")
    view = memoryview(data)  # slices of a view copy nothing
    (crc,) = struct.unpack_from("<I", data, len(data) - 4)
    if zlib.crc32(view[:-4]) != crc:
        raise chk.error(None, "is corrupted or truncated (checksum mismatch)")
    try:
        text = bytes(view[_PREFIX.size : _PREFIX.size + head_len]).decode("utf-8")
    except UnicodeDecodeError:
        raise chk.error("header", "is not UTF-8 JSON") from None
    header = parse_json(text, "trace", path, TraceFileError)
    meta = _check_header(chk, header)
    payload = view[_PREFIX.size + head_len : -4]
    if len(payload) != header["payload_bytes"]:
        raise chk.error(
            None, f"is truncated ({len(payload):,} of {header['payload_bytes']:,} payload bytes)"
        )
    n = header["n_records"]
    want = n * RECORD_DTYPE.itemsize
    try:  # never inflate past what the header promised: a bomb stops at `want + 1` bytes
        inflate = zlib.decompressobj()
        raw = inflate.decompress(payload, want + 1)
    except zlib.error:
        raise chk.error("payload", "is corrupted (does not decompress)") from None
    if len(raw) != want or inflate.unconsumed_tail:
        got = (
            "more"
            if len(raw) > want or inflate.unconsumed_tail
            else f"{len(raw) / RECORD_DTYPE.itemsize:,.1f}"
        )
        raise chk.error("n_records", f"says {n:,} records but the payload holds {got}")
    records = np.frombuffer(raw, dtype=RECORD_DTYPE)  # read-only: a Trace is not edited
    _check_records(chk, meta, records)
    trace = Trace(meta, records)
    _check_program(chk, trace)
    return trace


MAX_FRAMEWORK_OPS = 1_000_000  # host-side operations a call declares (a few to a few dozen)
_HEADER_ONLY = ("record_dtype", "record_size", "n_records", "payload_bytes", "compression")
_PROBLEM_FIELDS = ("batch", "heads", "seq_q", "seq_k", "head_dim", "dtype", "causal")  # no defaults
_NEEDED = ("algo", "problem", "hardware", "tiles", "tensors", "buffers", "kernels") + _HEADER_ONLY


def _check_header(chk: FileChecker, header) -> dict:
    """Every header field by type and range; returns the trace's metadata."""
    chk.obj(header, "header", required=_NEEDED)
    chk.str(header["algo"], "algo", max_len=100)
    chk.int(header["record_size"], "record_size", RECORD_DTYPE.itemsize, RECORD_DTYPE.itemsize)
    expected = json.loads(json.dumps(RECORD_DTYPE.descr))
    if chk.list(header["record_dtype"], "record_dtype") != expected:
        raise chk.error("record_dtype", "is a record layout this hbmsim does not know")
    chk.str(header["compression"], "compression", choices=("zlib",))
    chk.int(header["n_records"], "n_records", 1, MAX_TRACE_RECORDS)
    chk.int(header["payload_bytes"], "payload_bytes", 0, MAX_TRACE_FILE_BYTES)
    problem = chk.obj(header["problem"], "problem", required=_PROBLEM_FIELDS)
    chk.str(problem["dtype"], "problem.dtype", max_len=20)  # Problem looks it up in a dict
    with chk.fields_of("problem"):
        Problem.from_dict(problem)
    check_hardware_fields(chk, chk.obj(header["hardware"], "hardware"), "hardware")
    tiles = chk.obj(header["tiles"], "tiles", required=("bq", "bk"))
    for key, value in tiles.items():
        chk.int(value, f"tiles.{key}", 1, MAX_SEQ)
    for i, t in enumerate(chk.list(header["tensors"], "tensors", 1, MAX_TENSORS)):
        f = f"tensors[{i}]"
        chk.obj(t, f, required=("name", "shape", "itemsize"))
        chk.str(t["name"], f"{f}.name", max_len=100)
        shape = chk.list(t["shape"], f"{f}.shape", 1, MAX_AXES)
        for j, n in enumerate(shape):
            chk.int(n, f"{f}.shape[{j}]", 1, MAX_TENSOR_ELEMENTS)
        if int(np.prod([float(n) for n in shape])) > MAX_TENSOR_ELEMENTS:
            raise chk.error(f"{f}.shape", f"holds more than {MAX_TENSOR_ELEMENTS:,} elements")
        chk.int(t["itemsize"], f"{f}.itemsize", 1, 8)
    for i, b in enumerate(chk.list(header["buffers"], "buffers", 0, MAX_BUFFERS)):
        chk.str(b, f"buffers[{i}]", max_len=100)
    framework_ops = 0
    if header.get("framework_ops") is not None:  # absent before it existed: none
        framework_ops = chk.int(header["framework_ops"], "framework_ops", 0, MAX_FRAMEWORK_OPS)
    if "host_issued" in header:  # likewise: false
        chk.bool(header["host_issued"], "host_issued")
    declared = 0  # framework ops the kernels say come before their launches
    for i, k in enumerate(chk.list(header["kernels"], "kernels", 1, MAX_KERNELS)):
        f = f"kernels[{i}]"
        chk.obj(k, f, required=("name", "ctas", "threads_per_cta", "stages", "sram_bytes"))
        if k.get("host_ops_before") is not None:  # at most the call's ops not yet placed
            declared += chk.int(
                k["host_ops_before"], f"{f}.host_ops_before", 0, framework_ops - declared
            )
        chk.str(k["name"], f"{f}.name", max_len=100)
        chk.int(k["ctas"], f"{f}.ctas", 1, MAX_TRACE_RECORDS)
        chk.int(k["threads_per_cta"], f"{f}.threads_per_cta", 1, MAX_THREADS_PER_CTA)
        chk.int(k["stages"], f"{f}.stages", 1, 64)
        chk.int(k["sram_bytes"], f"{f}.sram_bytes", 0, 1 << 40)
        if "tensor_cores" in k:  # absent in files written before it existed: true
            chk.bool(k["tensor_cores"], f"{f}.tensor_cores")
        if "instructions_per_fma" in k:  # likewise: 1
            chk.num(k["instructions_per_fma"], f"{f}.instructions_per_fma", 1, 64)
        if "cycles_per_fma_by_warps" in k:  # likewise: [] (every issue slot used)
            for j, c in enumerate(
                chk.list(k["cycles_per_fma_by_warps"], f"{f}.cycles_per_fma_by_warps", 0, 64)
            ):
                chk.num(c, f"{f}.cycles_per_fma_by_warps[{j}]", 1, 1024)
        if "warp_mma" in k:  # likewise: false
            chk.bool(k["warp_mma"], f"{f}.warp_mma")
        if "smem_bytes_per_flop" in k:  # likewise: 0
            chk.num(k["smem_bytes_per_flop"], f"{f}.smem_bytes_per_flop", 0, 1e6)
        if "overlap_warpgroups" in k:  # likewise: 0
            chk.int(k["overlap_warpgroups"], f"{f}.overlap_warpgroups", 0, 32)
        if "posted_atomics" in k:  # likewise: false
            chk.bool(k["posted_atomics"], f"{f}.posted_atomics")
        if "cluster" in k:  # likewise: 1
            chk.int(k["cluster"], f"{f}.cluster", 1, 16)
        if "multicast" in k:  # likewise: none
            names = {t["name"] for t in header["tensors"]}
            for j, name in enumerate(chk.list(k["multicast"], f"{f}.multicast", 0, MAX_AXES)):
                chk.str(name, f"{f}.multicast[{j}]", choices=tuple(sorted(names)))
        if k.get("registers_per_thread") is not None:
            chk.int(k["registers_per_thread"], f"{f}.registers_per_thread", 1, 255)
        if "description" in k:
            chk.str(k["description"], f"{f}.description", max_len=10_000)
    return {k: v for k, v in header.items() if k not in _HEADER_ONLY}


def _check_records(chk: FileChecker, meta: dict, r: np.ndarray) -> None:
    """Every record against the header, vectorised; the first bad record is named."""

    def refuse(bad: np.ndarray, field: str, expected: str) -> None:
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise chk.error(f"record {i:,}", f"{field} {expected}")

    kernels, tensors = meta["kernels"], meta["tensors"]
    refuse(r["op"] >= len(OPS), "op", f"must be 0 to {len(OPS) - 1} ({', '.join(OPS)})")
    refuse(r["kernel"] >= len(kernels), "kernel", f"must index the {len(kernels)} kernels")
    ctas = np.array([k["ctas"] for k in kernels], dtype=np.int64)
    refuse(r["cta"] >= ctas[r["kernel"]], "cta", "must be below its kernel's ctas")
    key = r["kernel"].astype(np.int64) << 32 | r["cta"].astype(np.int64)
    refuse(
        np.concatenate([[False], key[1:] < key[:-1]]),
        "cta",
        "is out of order: records must come kernel by kernel, CTAs in launch order",
    )
    starts = np.concatenate([[True], key[1:] != key[:-1]])
    per_kernel = np.bincount(r["kernel"][starts], minlength=len(kernels))
    missing = np.flatnonzero(per_kernel != ctas)
    if len(missing):
        k = int(missing[0])
        raise chk.error(
            f"kernels[{k}].ctas",
            f"says {int(ctas[k]):,} CTAs but the records hold {int(per_kernel[k]):,}",
        )
    compute = r["op"] == OP_COMPUTE
    refuse(compute & (r["tensor"] != -1), "tensor", "must be -1 for a compute op")
    refuse(
        ~compute & ((r["tensor"] < 0) | (r["tensor"] >= len(tensors))),
        "tensor",
        f"must index the {len(tensors)} tensors",
    )
    refuse((r["buffer"] < -1) | (r["buffer"] >= len(meta["buffers"])), "buffer", "is unknown")
    for name in ("matmul_flops", "vector_flops", "exp_ops"):
        refuse((r[name] < 0) | (r[name] > MAX_OP_FLOPS), name, f"must be 0 to {MAX_OP_FLOPS:,}")
        refuse(~compute & (r[name] != 0), name, "must be 0 for a load or store")
    refuse(compute & (r["bytes"] != 0), "bytes", "must be 0 for a compute op")
    shapes = np.zeros((len(tensors) + 1, MAX_AXES), dtype=np.int64)  # row -1: compute, all 0
    itemsize = np.zeros(len(tensors) + 1, dtype=np.int64)
    for i, t in enumerate(tensors):
        shapes[i, : len(t["shape"])] = t["shape"]
        itemsize[i] = t["itemsize"]
    t = np.where(compute, -1, r["tensor"].astype(np.int64))
    limit = shapes[t]  # (n, MAX_AXES); 0 past a tensor's rank: the region must be (0, 0) there
    rank = limit > 0
    bad_region = np.where(
        rank,
        (r["start"] < 0) | (r["stop"] <= r["start"]) | (r["stop"] > limit),
        (r["start"] != 0) | (r["stop"] != 0),
    )
    refuse(bad_region.any(axis=1), "start/stop", "must be a region inside its tensor")
    extent = np.where(rank, r["stop"] - r["start"], 1)
    size = np.prod(extent, axis=1) * itemsize[t]
    refuse(~compute & (r["bytes"] != size), "bytes", "must equal its region's size in bytes")


# what replay takes from each kernel of the header, with the value a file written before the
# field existed stands for (the description is words only)
_KERNEL_DEFAULTS = {
    "ctas": None,
    "threads_per_cta": None,
    "stages": None,
    "sram_bytes": None,
    "tensor_cores": True,
    "instructions_per_fma": 1,
    "cycles_per_fma_by_warps": [],
    "warp_mma": False,
    "smem_bytes_per_flop": 0,
    "registers_per_thread": None,
    "overlap_warpgroups": 0,
    "cluster": 1,
    "multicast": [],
    "buffers": None,
}


_COUNTED = ("trips", "read_bytes", "write_bytes", "matmul_flops", "vector_flops", "exp_ops")


def _check_program(chk: FileChecker, trace: Trace) -> None:
    """The header against the program it names: the plan `algo` makes for the header's
    problem, tiles and GPU must launch the kernels and lay out the tensors the header lists
    (and the records were checked against those), so an edited batch, length, dtype, algo or
    kernel field is refused instead of replayed as if it were true. A program this hbmsim does
    not know (a Plan built with the API) is checked against its records only, and `replay`
    says so. The records' totals per kernel are the program's exact counts: a causal flag
    set on records without a mask is refused too."""
    meta = trace.meta
    with chk.fields_of("problem"):
        problem = Problem.from_dict(meta["problem"])
    hw = check_hardware_fields(chk, meta["hardware"], "hardware")
    tiles = meta["tiles"]
    try:
        plan = _plan_of(meta["algo"], problem, hw, tiles)
        if plan is None:  # a program built by hand (the API's Plan): its records are checked
            return
    except HbmsimError as exc:
        raise chk.error(
            "algo",
            f"{meta['algo']} cannot have made this trace for its header's problem, tiles and GPU "
            f"({exc})",
        ) from None
    want = plan_meta(plan)
    made = f"{meta['algo']} with the header's problem, tiles and GPU"
    for key in ("tensors", "kernels"):
        if len(meta[key]) != len(want[key]):
            raise chk.error(
                key,
                f"lists {len(meta[key])} but {made} makes {len(want[key])}: the header does not "
                "match the program that made the records",
            )
    for i, (got, exp) in enumerate(zip(meta["tensors"], want["tensors"], strict=True)):
        for field in ("name", "shape", "itemsize"):
            _same(chk, f"tensors[{i}].{field}", got[field], exp[field], made)
    for i, (got, exp) in enumerate(zip(meta["kernels"], want["kernels"], strict=True)):
        _same(chk, f"kernels[{i}].name", got["name"], exp["name"], made)
        for field, default in _KERNEL_DEFAULTS.items():
            _same(chk, f"kernels[{i}].{field}", got.get(field, default), exp[field], made)
    _same(chk, "buffers", meta["buffers"], want["buffers"], made)
    _same(chk, "framework_ops", meta.get("framework_ops") or 0, want["framework_ops"], made)
    _same(chk, "host_issued", meta.get("host_issued", False), want["host_issued"], made)
    counted = count_plan(plan).kernels
    for i, (got, exp) in enumerate(zip(trace.totals()["by_kernel"], counted, strict=True)):
        for field in _COUNTED:
            if got[field] != getattr(exp, field):
                raise chk.error(
                    f"kernels[{i}]",
                    f"its records hold {got[field]:,} {field.replace('_', ' ')} but {made} "
                    f"counts {getattr(exp, field):,}: the header does not match the records",
                )


def known_program(algo: str) -> bool:
    """Whether `algo` names a program of this hbmsim (a textbook algorithm or a library
    mirror, `NAME@RELEASE` included), whose header load_trace checks against the program."""
    return algo in ALGOS or algo.partition("@")[0] in IMPLS


def _plan_of(algo: str, problem: Problem, hw, tiles: dict):
    """The plan `algo` (a textbook algorithm, or a library mirror with its own tiles) makes;
    a mirror whose tiles the trace overrode is made again with them."""
    tile = {k: tiles.get(k) for k in ("bq", "bk")}
    if algo in ALGOS:
        return make_plan(algo, problem, hw, **tile, bd=tiles.get("bd"), splits=tiles.get("splits"))
    if not known_program(algo):
        return None
    plan = make_impl_plan(algo, problem, hw)
    if plan.tiles.to_dict() != tiles:
        plan = make_impl_plan(algo, problem, hw, **tile)
    return plan


def _same(chk: FileChecker, field: str, got, expected, made: str) -> None:
    if got != expected:
        raise chk.error(
            field,
            f"says {_shown(got)} but {made} gives {_shown(expected)}: the header does not "
            "match the program that made the records",
        )


def _shown(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."
