"""A model's attention per step: one layer of each kind, times its number of layers, added up.

One simulation is one attention layer. A model answers "what does attention cost per step in
my model" with its layer kinds (problem/models.py, `Model.layer_kinds`): Gemma 2's local and
global layers, or all layers alike for the other presets. Each kind is simulated once (kinds
whose problems are equal share one simulation), and the per-model total is, for every count
and the time, the sum over kinds of layers x that kind's value. Layers run one after another
in a forward pass, so their times add; what one layer leaves in L2 for the next is not
modelled (each layer's simulation starts from a cold L2, as a single `simulate` does).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import fmt
from .problem.models import LayerKind, Model
from .result import Result

# what the per-model total adds up: counts (always there) and the engine's (when it ran)
TOTALLED = (
    "hbm_read_bytes",
    "hbm_write_bytes",
    "trips",
    "flops",
    "dram_read_bytes",
    "dram_write_bytes",
    "time_s",
)


@dataclass(frozen=True)
class ModelResult:
    """Each layer kind of a model with its one-layer result, and their per-model total."""

    model: Model
    kinds: tuple[tuple[LayerKind, Result], ...]  # local first, then global (or the one kind)

    @property
    def primary(self) -> Result:
        """The result a single-layer report shows: the global layer's, or the only kind's."""
        return self.kinds[-1][1]

    def _kind_dict(self, kind: LayerKind, result: Result) -> dict:
        d = result.to_dict()
        p = result.plan.problem
        return {
            "kind": kind.kind,
            "layers": kind.layers,
            "causal": p.causal,
            "window_left": p.window_left,
            **{k: d.get(k) for k in TOTALLED},
        }

    def totals(self) -> dict:
        """Every TOTALLED value summed over the model's layers (None where a kind lacks it,
        e.g. the time when the engine did not run)."""
        out = {}
        for key in TOTALLED:
            values = [(k.layers, r.to_dict().get(key)) for k, r in self.kinds]
            out[key] = None if any(v is None for _, v in values) else sum(n * v for n, v in values)
        return out

    def total_note(self) -> str:
        """What the total is, in one line."""
        m, pass_ = self.model, self.primary.plan.problem.pass_
        terms = " + ".join(f"{k.layers} x {k.kind}" for k, _ in self.kinds)
        return f"per model: the {pass_} pass over all {m.layers} layers = {terms}"

    def to_dict(self) -> dict:
        m = self.model
        out = {
            "name": m.name,
            "layers": m.layers,
            "source": m.source,
            "kinds": [self._kind_dict(k, r) for k, r in self.kinds],
            "total": self.totals(),
            "total_note": self.total_note(),
        }
        if m.alternating:
            out.update(local_window=m.local_window, layers_note=m.layers_note())
        if m.query_scale is not None:
            out.update(softmax_scale=m.query_scale, softmax_scale_source=m.query_scale_source)
        if m.softcap is not None:
            out.update(softcap=m.softcap, softcap_note=m.softcap_note())
        return out

    def lines(self) -> list[str]:
        """The text report's lines: each kind (for an alternating model), the total, notes."""
        out = []
        if self.model.alternating:
            out.append(f"model: {self.model.layers_note()}")
            for kind, r in self.kinds:
                p = r.plan.problem
                mask = p.window_text() or ("causal" if p.causal else "no mask")
                out.append(f"  {kind.kind:<6} x {kind.layers}, {mask}: {_summary(r.to_dict())}")
            out.append("  (the report above is the global layer's)")
        out.append(f"{self.total_note()}: {_summary(self.totals())}")
        if self.model.softcap is not None:
            out.append(f"soft-cap: {self.model.softcap_note()}")
        return out


def _summary(d: dict) -> str:
    """HBM read and write, DRAM read and write after L2, and time, where known."""
    parts = [
        f"HBM read {fmt.bytes_(d['hbm_read_bytes'])}",
        f"write {fmt.bytes_(d['hbm_write_bytes'])}",
        f"flops {fmt.count(d['flops'])}",
    ]
    if d.get("dram_read_bytes") is not None:
        parts.append(
            f"DRAM read {fmt.bytes_(d['dram_read_bytes'])}, "
            f"write {fmt.bytes_(d['dram_write_bytes'])}"
        )
    parts.append(f"time {fmt.seconds(d['time_s'])}" if d.get("time_s") is not None else "no time")
    return ", ".join(parts)
