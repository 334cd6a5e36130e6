"""Execute tile programs on real NumPy values, with the SRAM capacity enforced.

Why: a trace is only trustworthy if the program it came from computes attention. Executing
every CTA on float64 values and comparing with naive attention proves the program loads every
tile it uses (tensors start poisoned with NaN, so a tile read before it was written spoils the
output) and that its math is exact. Every tile loaded or computed must fit the SRAM buffer the
kernel declared, and the declared buffers must fit one thread block: the footprint the counts
and the engine use is the one the executor checked.

Values are float64 whatever the problem dtype; the dtype sets bytes and math rates, not
precision here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import HbmsimError, SramOverflowError, TooLargeToExecuteError
from ..program.plan import Ctx, Plan, run_plan
from .counts import count_plan
from .reference import (
    causal_visible,
    dropout_keep_mask,
    naive_attention,
    naive_grads,
    random_inputs,
)

MAX_EXECUTE_ELEMENTS = 1 << 26  # float64 elements, tensors and reference together: 512 MiB
# The executor's time, estimated before it starts: a fixed cost per op (Python and NumPy
# call overhead), per flop and per element moved, each rounded up from runs of fa1, fa2 and
# standard on one core (docs/benchmarks.md, "The engine's bounds").
EXECUTE_S_PER_OP = 6e-6
EXECUTE_S_PER_FLOP = 0.5e-9
EXECUTE_S_PER_ELEMENT = 50e-9
MAX_EXECUTE_S = 20.0  # refuse --verify runs estimated to take longer
# score-sized (b, h, seq_q, seq_k) arrays naive attention holds at once: S, exp(S - m), P and a
# temporary; the closed-form gradients add P∘Z, dP, dS and their temporaries
REFERENCE_COPIES = {"fwd": 4, "bwd": 8}


class ProgramError(HbmsimError):
    """A tile program broke the rules of its own declaration (a bug in a schedule)."""


class ExecuteCtx(Ctx):
    def __init__(self, plan: Plan, arrays: dict[str, np.ndarray], keep: np.ndarray | None):
        super().__init__(plan)
        self.arrays = arrays
        self.keep = keep

    def begin_kernel(self, index, kernel):
        super().begin_kernel(index, kernel)
        cap = self.plan.hardware.sram_bytes_per_block
        if kernel.sram_bytes > cap:
            raise SramOverflowError(kernel.name, kernel.sram_bytes, cap, self.plan.tiles.describe())
        self.capacity = {b.name: b for b in kernel.buffers}

    def _fit(self, buf: str, shape: tuple[int, ...]) -> None:
        """A tile must fit the SRAM buffer it is placed in, element for element."""
        if buf not in self.capacity:
            raise ProgramError(f"kernel {self.kernel.name!r} uses undeclared SRAM buffer {buf!r}")
        b = self.capacity[buf]
        need = int(np.prod(shape)) * b.itemsize
        if need > b.nbytes:
            raise SramOverflowError(
                f"{self.kernel.name}/{buf}",
                need,
                b.nbytes,
                f"a tile of shape {tuple(shape)} in buffer {buf!r} declared {b.shape}",
            )

    @staticmethod
    def _index(arr: np.ndarray, region):
        lead = 2 if arr.ndim >= 3 else 0  # (batch, head) axes lead every rank-3+ tensor
        for a, b in region[:lead]:
            if b - a != 1:
                raise ProgramError(f"region {region} spans several batch/head indices")
        return tuple(slice(a, b) for a, b in region), lead

    def _on_transfer(self, kind, buf, tensor, region, value):
        arr = self.arrays[tensor]
        if len(region) != arr.ndim:
            raise ProgramError(f"region {region} does not match {tensor} of rank {arr.ndim}")
        index, lead = self._index(arr, region)
        view = arr[index]
        tile_shape = view.shape[lead:]
        self._fit(buf, tile_shape)
        if kind == "load":
            return view.reshape(tile_shape).copy()
        value = np.asarray(value, dtype=np.float64)
        if value.size != view.size:
            raise ProgramError(f"{self.kernel.name}: storing {value.shape} into {tensor}{region}")
        if kind == "atomic":
            arr[index] = view + value.reshape(view.shape)
        else:
            arr[index] = value.reshape(view.shape)
        return None

    def _on_compute(self, fn, args, matmul, vector, exp, out):
        result = fn(*args)
        if out is not None:
            self._fit(out, np.shape(result))
        return result

    def dropout_keep(self, b, h, rows, cols):
        return self.keep[b, h, rows[0] : rows[1], cols[0] : cols[1]].astype(np.float64)


def _errors(out: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """(max |out - ref|, ||out - ref||_F / ||ref||_F); inf when out holds NaN or inf."""
    if not np.all(np.isfinite(out)):
        return float("inf"), float("inf")
    max_abs = float(np.max(np.abs(out - ref))) if out.size else 0.0
    norm = float(np.linalg.norm(ref))
    return max_abs, float(np.linalg.norm(out - ref) / norm) if norm > 0 else max_abs


@dataclass(frozen=True)
class Execution:
    """Outputs of the executed tile programs next to naive attention on the same inputs."""

    output: np.ndarray  # O, (b, h, Nq, d)
    reference: np.ndarray
    max_abs_err: float
    rel_err: float  # ||O - ref||_F / ||ref||_F
    lse_max_abs_err: float | None  # FA2 and split-kv save the log-sum-exp: checked too
    grad_rel_err: dict[str, float] | None = None  # backward: dQ, dK, dV against closed forms

    def to_dict(self) -> dict:
        d = {"max_abs_err": self.max_abs_err, "rel_err": self.rel_err}
        if self.lse_max_abs_err is not None:
            d["lse_max_abs_err"] = self.lse_max_abs_err
        if self.grad_rel_err is not None:
            d["grad_rel_err"] = self.grad_rel_err
        return d


def execute_elements(plan: Plan) -> int:
    """float64 elements the executor and its naive reference hold at once: every tensor of
    the plan, the dropout mask, and the reference's (batch, heads, seq_q, seq_k) score-sized
    arrays (REFERENCE_COPIES of them alive at its peak)."""
    p = plan.problem
    elements = sum(int(np.prod(t.shape)) for t in plan.tensors.values())
    scores = p.batch * p.heads * p.seq_q * p.seq_k
    if p.dropout > 0:
        elements += scores
    copies = REFERENCE_COPIES["bwd" if "bwd" in p.pass_ else "fwd"]
    return elements + copies * scores


def execute_seconds(counts) -> float:
    """The executor's estimated time for a plan with these counts (a counts.Result)."""
    elements = sum(
        (k.read_bytes + k.write_bytes) // max(1, counts.plan.problem.itemsize)
        for k in counts.kernels
    )
    flops = counts.matmul_flops + counts.vector_flops + counts.exp_ops
    return (
        counts.ops * EXECUTE_S_PER_OP
        + flops * EXECUTE_S_PER_FLOP
        + elements * EXECUTE_S_PER_ELEMENT
    )


def check_executable(plan: Plan, counts=None) -> None:
    """Refuse sizes the executor cannot hold (memory, checked from shapes alone) or finish
    (time, estimated from `counts` when given); the message says what would fit."""
    p = plan.problem
    elements = execute_elements(plan)
    if elements > MAX_EXECUTE_ELEMENTS:
        per_score = -(-elements // (p.seq_q * p.seq_k))
        seq = math.isqrt(MAX_EXECUTE_ELEMENTS // per_score)
        seq = seq // 256 * 256 if seq > 256 else seq
        raise TooLargeToExecuteError(
            f"verify: this problem needs {elements:,} float64 elements in memory to execute "
            f"and check against naive attention; the executor holds at most "
            f"{MAX_EXECUTE_ELEMENTS:,} ({MAX_EXECUTE_ELEMENTS * 8 >> 20} MiB): at this batch "
            f"and heads use seq <= {seq:,}, or drop --verify (counts and timing work at any size)"
        )
    if counts is not None and (seconds := execute_seconds(counts)) > MAX_EXECUTE_S:
        raise TooLargeToExecuteError(
            f"verify: executing this plan would take about {seconds:,.0f} s ({counts.ops:,} "
            f"ops); the executor runs at most {MAX_EXECUTE_S:.0f} s: use a smaller problem, "
            "or drop --verify (counts and timing work at any size)"
        )


def execute_plan(
    plan: Plan, seed: int = 0, inputs: dict[str, np.ndarray] | None = None
) -> Execution:
    """Run every CTA of every kernel on float64 values and compare with naive attention."""
    p = plan.problem
    check_executable(plan, count_plan(plan))
    inputs = random_inputs(p, seed) if inputs is None else inputs
    keep = dropout_keep_mask(p, seed)
    arrays: dict[str, np.ndarray] = {}
    for name, spec in plan.tensors.items():
        if name in plan.stored_inputs:  # e.g. a paged cache: K scattered by its block table
            arrays[name] = np.asarray(plan.stored_inputs[name](inputs), dtype=np.float64)
            if arrays[name].shape != spec.shape:
                raise ProgramError(f"{name}: stored as {arrays[name].shape}, spec {spec.shape}")
        elif name in inputs:
            arrays[name] = np.array(inputs[name], dtype=np.float64)
            if arrays[name].shape != spec.shape:
                raise HbmsimError(
                    f"inputs: {name} has shape {arrays[name].shape}, expected {spec.shape}"
                )
        elif name in ("causal_mask", "window_mask"):
            arrays[name] = causal_visible(p).astype(np.float64)
        else:
            arrays[name] = np.full(spec.shape, np.nan)  # poisoned until a program writes it
    # a backward-only plan first runs the forward (uncounted) to make what it saved
    run_plan(ExecuteCtx(plan, arrays, keep), every_cta=True, kernels=plan.prologue + plan.kernels)
    q, k, v = (
        np.asarray(inputs[n], dtype=np.float64) if n in plan.stored_inputs else arrays.get(n)
        for n in ("Q", "K", "V")
    )
    ref, ref_lse = naive_attention(q, k, v, p, keep)
    out = arrays["O"]
    max_abs, rel = _errors(out, ref)
    lse_err = None
    if "lse" in arrays:
        lse_err = _errors(arrays["lse"], ref_lse)[0]
    grads = None
    if "bwd" in p.pass_:
        ref_grads = naive_grads(q, k, v, arrays["dO"], p, keep)
        grads = {
            name: _errors(arrays[name], r)[1]
            for name, r in zip(("dQ", "dK", "dV"), ref_grads, strict=True)
        }
    return Execution(out, ref, max_abs, rel, lse_err, grads)
