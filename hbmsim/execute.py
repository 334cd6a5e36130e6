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

from dataclasses import dataclass

import numpy as np

from .errors import HbmsimError, SramOverflowError, TooLargeToExecuteError
from .program import Ctx, Plan, run_plan
from .reference import (
    causal_visible,
    dropout_keep_mask,
    naive_attention,
    naive_grads,
    random_inputs,
)

MAX_EXECUTE_ELEMENTS = 1 << 26  # float64 elements over all tensors: 512 MiB
MAX_EXECUTE_TRIPS = 2_000_000  # loads + stores: about a minute of Python at worst


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


def check_executable(plan: Plan, trips: int | None = None) -> None:
    """Refuse sizes the executor cannot hold or finish; the message says what would fit."""
    elements = sum(int(np.prod(t.shape)) for t in plan.tensors.values())
    if plan.problem.dropout > 0:
        elements += int(np.prod(plan.tensors["Q"].shape[:3])) * plan.problem.seq_k
    if elements > MAX_EXECUTE_ELEMENTS:
        raise TooLargeToExecuteError(
            f"verify: this problem needs {elements:,} float64 elements in memory to execute; "
            f"the executor holds at most {MAX_EXECUTE_ELEMENTS:,}: use a smaller batch, heads "
            "or seq"
        )
    if trips is not None and trips > MAX_EXECUTE_TRIPS:
        raise TooLargeToExecuteError(
            f"verify: executing this plan takes {trips:,} loads and stores; the executor runs "
            f"at most {MAX_EXECUTE_TRIPS:,}: use a smaller problem or larger tiles"
        )


def execute_plan(
    plan: Plan, seed: int = 0, inputs: dict[str, np.ndarray] | None = None
) -> Execution:
    """Run every CTA of every kernel on float64 values and compare with naive attention."""
    from .counts import count_plan  # counting is cheap and tells how long execution would take

    p = plan.problem
    check_executable(plan, count_plan(plan).trips)
    inputs = random_inputs(p, seed) if inputs is None else inputs
    keep = dropout_keep_mask(p, seed)
    arrays: dict[str, np.ndarray] = {}
    for name, spec in plan.tensors.items():
        if name in inputs:
            arrays[name] = np.array(inputs[name], dtype=np.float64)
            if arrays[name].shape != spec.shape:
                raise HbmsimError(
                    f"inputs: {name} has shape {arrays[name].shape}, expected {spec.shape}"
                )
        elif name == "causal_mask":
            arrays[name] = causal_visible(p).astype(np.float64)
        else:
            arrays[name] = np.full(spec.shape, np.nan)  # poisoned until a program writes it
    # a backward-only plan first runs the forward (uncounted) to make what it saved
    run_plan(ExecuteCtx(plan, arrays, keep), every_cta=True, kernels=plan.prologue + plan.kernels)
    ref, ref_lse = naive_attention(arrays["Q"], arrays["K"], arrays["V"], p, keep)
    out = arrays["O"]
    max_abs, rel = _errors(out, ref)
    lse_err = None
    if "lse" in arrays:
        lse_err = _errors(arrays["lse"], ref_lse)[0]
    grads = None
    if "bwd" in p.pass_:
        ref_grads = naive_grads(arrays["Q"], arrays["K"], arrays["V"], arrays["dO"], p, keep)
        grads = {
            name: _errors(arrays[name], r)[1]
            for name, r in zip(("dQ", "dK", "dV"), ref_grads, strict=True)
        }
    return Execution(out, ref, max_abs, rel, lse_err, grads)
