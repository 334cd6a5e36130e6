"""The fast workload builder: one representative per CTA class, every CTA's keys extrapolated.

One representative per declared CTA class is run once (classes whose ops are identical share a
template, as `workload.from_trace` would find them), first with the coordinates the class
spans symbolic (program/symbolic.py): where its program only adds and multiplies them, that
run gives every CTA's tile keys, affine along each axis, for every CTA at once (a causal kernel's
query-block classes over the batch and the heads). Where it does more with them (GQA's query
head -> K/V head, a query block's ragged end), every CTA's tile keys are extrapolated from
the representative and its neighbours along each grid axis ("identical up to offsets": one term
per axis, affine where a step moves every tile alike, sampled at each value where not, as for
GQA's query head -> K/V head), and checked against the last and a middle CTA of the class; where
the check fails, that class's CTAs are run one by one. A run itself traces a long loop segment
at four of its iterations and lays out the rest from them, checked the same way (`OneCta`).

Consecutive classes that are one value each along one axis, alike along the others (a causal
kernel's query blocks), are a family: run once with that axis symbolic too, comparisons
decided over the box the family spans (classsym.within) and a loop's length affine in the
axis (its loop checked at its first three iterations and its last), each class is laid out
from that run by arithmetic (`OneCta.family`, `_families`); where the run is not exact for
the whole family, it is tried without its first and last classes, and whatever is left runs
class by class as above.

Keys are kept as that per-class formula, not as arrays: `PlanKeys.take(ctas)` computes the keys
of the CTAs asked for, so a kernel of millions of accesses costs only the CTAs the engine
looks at (see l2/fast.py). The formula also gives a kernel's translation periods (periods.py),
which the L2 model uses to compute a long kernel's hits from a few of its waves.
"""

from __future__ import annotations

import numpy as np

from ...interpret.trace import (
    plan_meta,
)
from ...program.plan import CtaClass, Plan
from .keys import ClassKeys, PlanKeys
from .layout import Layout
from .one_cta import OneCta
from .parts import (
    laid_out,
)
from .periods import periods, segments
from .templates import Templates
from .work import (
    Workload,
    kernel_work,
    tensor_strides,
)


def from_plan_fast(
    plan: Plan,
    learn_shifts: bool = True,
    learn_steps: bool = True,
    regions: bool = True,
    symbolic: bool = True,
) -> Workload:
    """The fast workload (see the module docstring); `learn_shifts=False` samples a non-affine
    axis in every class, as if no class had learned its per-tensor shifts, `learn_steps=False`
    runs every class's own first step of each affine axis, `symbolic=False` learns every
    class from runs, none from one symbolic run (the benchmark's comparisons);
    `regions=False`: templates without regions (LEAN_TEMPLATE_DTYPE), which only a timeline
    reads."""
    meta = plan_meta(plan)
    tensor_names = [t["name"] for t in meta["tensors"]]
    strides = tensor_strides(meta)
    runner = OneCta(plan)
    learn = (learn_shifts, learn_steps, regions, symbolic)
    kernels = [
        _fast_kernel(runner, k, kernel, meta["kernels"][k], tensor_names, strides, learn)
        for k, kernel in enumerate(plan.kernels)
    ]
    return Workload(meta, kernels)


def _fast_kernel(runner: OneCta, k: int, kernel, kmeta: dict, tensor_names, strides, learn):
    """One kernel's KernelWork: each class's template (shared with an earlier class whose ops
    are alike) and keys (from a symbolic run, its family's, or runs), its layout and periods.
    `learn`: from_plan_fast's (learn_shifts, learn_steps, regions, symbolic)."""
    learn_shifts, learn_steps, regions, symbolic = learn
    templates = _TemplateTable(regions)
    class_template, classes = [], []
    shifts: dict[tuple, np.ndarray] = {}  # (axis, values) -> per-tensor shifts, learned once
    steps: dict[tuple, np.ndarray] = {}  # (axis, stride) -> per-tensor affine steps
    untaught: list[tuple] = []  # (class, keys) found symbolically, not yet in `steps`
    families = _families(runner, k, kernel.grid, strides) if symbolic else {}
    for z, cls in enumerate(kernel.grid):
        runner.memo.clear()  # a class's runs are asked for again only within the class
        rep = cls.representative
        own = None
        if z in families:  # its parts and keys from its family's run
            parts, found, own = families.pop(z)
            runner.memo[(k, rep)] = parts
        else:
            found = runner.symbolic(k, cls, strides) if symbolic else None
        class_template.append(templates.match(runner, k, rep, runner.parts_of(k, rep)))
        learned = shifts if learn_shifts else None
        own = runner.transfers(k, rep, strides) if own is None else own
        taught = steps if learn_steps else None
        if found is not None:  # every CTA's keys, from the one symbolic run
            classes.append(_symbolic_keys(cls, own, found))
            untaught.append((cls, classes[-1]))
        else:  # learned from runs: first taught what the symbolic classes found
            if taught is not None:
                for done, keys in untaught:
                    _learn_steps(taught, done, keys.affine, keys.tensor)
            untaught = []
            classes.append(_class_keys(runner, k, cls, own, strides, learned, taught))
    layout = Layout(kernel.grid, kernel.launch_order)
    return kernel_work(
        kmeta,
        tensor_names,
        templates=templates.templates,
        cta_template=_cta_templates(class_template, len(templates.templates), layout),
        coords=layout,
        keys=PlanKeys(classes, layout),
        period=(period := periods(kernel, classes, templates.templates, layout)),
        segments=segments(kernel, classes, templates.templates, period),
    )


class _TemplateTable:
    """A kernel's templates as its classes find them: a class whose ops are alike an earlier
    template's in every field and in their regions' extents shares it (`_same_signature`)."""

    def __init__(self, regions: bool):
        self.regions = regions
        self.templates = Templates(regions)
        self.by_length: dict[int, list[int]] = {}  # ops -> the templates of that many ops
        self.owners: list[tuple[int, ...]] = []  # each template's first CTA, to compare extents
        self.extents: dict[int, np.ndarray] = {}  # a template's region extents, once compared

    def match(self, runner: OneCta, k: int, rep: tuple[int, ...], parts: list) -> int:
        """The template of the class whose representative `rep` ran as `parts`: an earlier
        one alike, or a new one."""
        templates, extents = self.templates, self.extents
        alike = self.by_length.setdefault(sum(len(p) for p in parts), [])
        t_id, mine = len(templates), None
        # laid out only to be compared with a template of as many ops
        template = laid_out(parts, self.regions) if alike else None
        for t in alike:
            if not _same_signature(templates[t], template):
                continue
            if t not in extents:  # its first CTA run again once (the memo is per class)
                extents[t] = runner.extents(k, self.owners[t])
            mine = runner.extents(k, rep) if mine is None else mine
            if np.array_equal(extents[t], mine):
                t_id = t
                break
        if t_id == len(templates):
            templates.append(parts)
            self.owners.append(rep)
            alike.append(t_id)
        return t_id


def _cta_templates(class_template: list[int], n_templates: int, layout: Layout) -> np.ndarray:
    """Each CTA's template, in launch order: a read-only view where one template serves all
    (standard attention's score kernel at 1M tokens x 16 heads has 1 G CTAs)."""
    kind = np.uint8 if n_templates < 256 else np.int32
    if len(set(class_template)) == 1:
        return np.broadcast_to(np.array(class_template[0], dtype=kind), (layout.n,))
    return np.array(class_template, dtype=kind)[layout.classes(np.arange(layout.n))]


def _families(runner: OneCta, k: int, grid: tuple, strides) -> dict[int, tuple]:
    """Classes of a kernel taken from one run of their family (`OneCta.family`): consecutive
    classes that are one value each along one axis, those values consecutive, and alike
    along every other axis. Where the whole family's run is not exact, its first classes
    (short loops) or its last (a ragged block) may be what differs: it is tried without them
    too. Returns {class index: (parts, found, transfers)}."""
    found = _family_axis(grid)
    if found is None:
        return {}
    axis, first, last = found
    for a, b in ((first, last), (first + 8, last), (first, last - 1), (first + 8, last - 1)):
        if b - a < 8:
            continue
        axes = list(grid[a].axes)
        axes[axis] = range(grid[a].axes[axis][0], grid[b].axes[axis][0] + 1)
        got = runner.family(k, CtaClass(tuple(axes)), axis, strides)
        if got is not None:
            return {z: got[grid[z].axes[axis][0]] for z in range(a, b + 1)}
    return {}


def _family_axis(grid: tuple) -> tuple[int, int, int] | None:
    """(axis, first class, last class) of the longest run of consecutive classes one value
    each along one axis, consecutive values, alike along every other axis; None if none."""
    if len(grid) < 16 or len({len(c.axes) for c in grid}) != 1:
        return None
    best = None
    for axis in range(len(grid[0].axes)):
        start = 0
        for z in range(1, len(grid) + 1):
            ok = z < len(grid)
            if ok:
                a, b = grid[z - 1].axes, grid[z].axes
                ok = (
                    len(a[axis]) == len(b[axis]) == 1
                    and b[axis][0] == a[axis][0] + 1
                    and all(a[x] == b[x] for x in range(len(a)) if x != axis)
                )
            if not ok:
                if best is None or z - 1 - start > best[2] - best[1]:
                    best = (axis, start, z - 1)
                start = z
    return best if best is not None and best[2] - best[1] >= 15 else None


def _same_signature(a: np.ndarray, b: np.ndarray) -> bool:
    """Two CTAs' ops alike in every field but their regions; with the same region extents
    (compared by from_plan_fast, from the runs: a lean template keeps none), they are alike
    but for positions, as `Trace.cta_classes` groups CTAs.

    Declared classes that run identical ops share one template, so the engine groups their CTAs
    launched together into one cohort exactly as a replay of the trace does; a template per
    declared class would split cohorts the trace keeps whole, and the timings would differ.
    """
    return len(a) == len(b) and all(np.array_equal(a[name], b[name]) for name in SIGNATURE_FIELDS)


SIGNATURE_FIELDS = ("op", "tensor", "buffer", "bytes", "matmul_flops", "vector_flops", "exp_ops")


def _class_coords(cls: CtaClass) -> np.ndarray:
    """All coordinates of a class in its product order, as an int array."""
    axes = [np.asarray(r, dtype=np.int64) for r in cls.axes]
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([m.reshape(-1) for m in mesh], axis=1)


def _class_member(cls: CtaClass, index: int) -> tuple[int, ...]:
    """The index-th CTA of a class in its product order."""
    out = []
    for r in reversed(cls.axes):
        out.append(r[index % len(r)])
        index //= len(r)
    return tuple(reversed(out))


def _symbolic_keys(cls: CtaClass, own, found) -> ClassKeys:
    """Tile keys of every CTA of a class from its symbolic run (`OneCta.symbolic`): the
    representative's, plus each symbolic axis's key step per unit of its coordinate, which
    holds for every CTA (no check needed). Its steps are taught to the kernel's learned steps
    (as a confirmed class's are) only once a later class is learned from runs and needs them
    (from_plan_fast), in the same order. An axis the run split by d (its quotient and
    remainder, symbolic.split_coordinates) takes, at each of its values, the two steps times
    that value's units: a per-tensor shift by value where every tile of a tensor moves alike
    (GQA's query head -> K/V head, as `_class_keys` learns it from runs), else a table."""
    shape, base = own
    out = ClassKeys(cls, base, shape[:, 2].copy())
    variables, deltas, *family = found
    split: dict[int, list] = {}
    for j, (axis, kind, d) in enumerate(variables):
        if kind == "unit":
            out.affine[axis] = deltas[j]
        else:
            split.setdefault(axis, []).append((kind, d, deltas[j]))
    for axis, terms in split.items():
        values = np.asarray(cls.axes[axis], dtype=np.int64)
        rep = cls.representative[axis]
        units = [
            values // d - rep // d if kind == "quotient" else values % d - rep % d
            for kind, d, _delta in terms
        ]
        per_tensor = [per_tensor_shift(delta[None], out.tensor) for _k, _d, delta in terms]
        if all(s is not None for s in per_tensor):  # (values, tensors, 2), NOT_LEARNED kept
            shift = sum(
                u[:, None, None] * s[0][None] for u, s in zip(units, per_tensor, strict=True)
            )
            shift[:, per_tensor[0][0][:, 0] == NOT_LEARNED] = NOT_LEARNED
            out.shifts[axis] = shift
        else:
            out.tables[axis] = sum(
                u[:, None, None] * t[2][None] for u, t in zip(units, terms, strict=True)
            )
    out.family = family[0] if family else None
    return out


def _class_keys(runner, k, cls: CtaClass, own, strides, shifts=None, steps=None) -> ClassKeys:
    """Tile keys of every CTA's transfers, as a formula (ClassKeys).

    A CTA's offsets are a sum of one term per grid axis (batch, head, block). Each axis's term
    is affine when one step along it moves every tile by the same amount; an axis that is not
    (GQA: query head h reads K/V head h // group) is sampled at every value instead. Where
    the sampled term moves every tile of a tensor alike (a shift per tensor: where the
    tensor's slice of that head starts), the shifts are kept in `shifts` for the kernel's
    other classes, which then check them at the axis's second, last and middle values
    instead of running every value (a class of a causal kernel, one per query block, would
    otherwise run its program once per head). The result is checked against the last and a
    middle CTA; if either differs, every CTA is run. Every axis affine is tried first, from
    each axis's first step and those two checks alone (a CTA of fa2 at 1M tokens runs 115,000
    ops: five runs instead of seven). An affine step that moves every tile of a tensor alike
    (one step per tensor: the head axis) is kept in `steps` for the kernel's other classes,
    which try it before running their own first step (a causal kernel's query-block classes:
    three runs each instead of four, the checks unchanged).
    """
    learner = _ClassLearner(runner, k, cls, own, strides)
    out = ClassKeys(cls, learner.base, learner.shape[:, 2].copy())
    if cls.size == 1:
        return out
    found = learner.every_axis_affine(out, steps)
    if found is not None:
        return found
    for axis, r in enumerate(cls.axes):
        if len(r) >= 2 and not learner.axis_term(out, axis, r, shifts):
            return learner.run_each(out)
    return out if learner.confirmed(out) else learner.run_each(out)


class _ClassLearner:
    """The runs that learn one class's formula (`_class_keys`): any CTA's keys along one axis
    from the representative, and the check of a formula at the last and a middle CTA."""

    def __init__(self, runner, k: int, cls: CtaClass, own, strides):
        self.runner, self.k, self.cls, self.strides = runner, k, cls, strides
        # the representative's transfers: (op, bytes, tensor) and tile keys
        self.shape, self.base = own

    def keys_at(self, axis: int, value: int) -> np.ndarray | None:
        """The keys of the representative moved to `value` along `axis`; None where that
        CTA's transfers are not the representative's (op, bytes and tensor)."""
        cta = list(self.cls.representative)
        cta[axis] = int(value)
        own, keys = self.runner.transfers(self.k, tuple(cta), self.strides)
        return keys if np.array_equal(own, self.shape) else None

    def confirmed(self, keys: ClassKeys) -> bool:
        """The formula gives the last and a middle CTA's own keys (runs memoised)."""
        size = self.cls.size
        for probe in {size - 1, size // 2}:
            cta = _class_member(self.cls, probe)
            own, found = self.runner.transfers(self.k, cta, self.strides)
            if not np.array_equal(own, self.shape) or not np.array_equal(
                found, keys.at(np.array([cta], dtype=np.int64))[0]
            ):
                return False
        return True

    def run_each(self, out: ClassKeys) -> ClassKeys:
        return _run_each(self.runner, self.k, self.cls, self.strides, out)

    def every_axis_affine(self, out: ClassKeys, steps) -> ClassKeys | None:
        """Most classes are affine along every axis: the steps per tensor another class of
        the kernel learned, then the first step of each axis, each confirmed at the last and
        a middle CTA (the first step's taught to `steps`). Every CTA run where a first step
        is not alike; None where neither formula is confirmed (some axis is not affine: each
        is then checked at its last value)."""
        cls, base, tensor = self.cls, self.base, out.tensor
        moved = [(axis, r) for axis, r in enumerate(cls.axes) if len(r) >= 2]
        known = [None if steps is None else steps.get((axis, r.step)) for axis, r in moved]
        if moved and all(s is not None and _learned(s[None], tensor) for s in known):
            trial = ClassKeys(cls, base, tensor)
            trial.affine = {axis: s[tensor] for (axis, _), s in zip(moved, known, strict=True)}
            if self.confirmed(trial):
                return trial
        first_steps = {}
        for axis, r in moved:
            step = self.keys_at(axis, r[1])
            if step is None:
                return self.run_each(out)
            first_steps[axis] = step - base
        trial = ClassKeys(cls, base, tensor)
        trial.affine = dict(first_steps)
        if self.confirmed(trial):
            if steps is not None:
                _learn_steps(steps, cls, trial.affine, tensor)
            return trial
        return None

    def axis_term(self, out: ClassKeys, axis: int, r: range, shifts) -> bool:
        """`out`'s term along `axis` (of range r): affine where its last value is where the
        first step puts it; else the per-tensor shifts another class learned, checked at
        three values; else one run per value (a table, kept as shifts where every tile of a
        tensor moves alike). False where a run's transfers are not alike."""
        base, tensor = self.base, out.tensor
        step = self.keys_at(axis, r[1])
        last = self.keys_at(axis, r[-1])
        if step is None or last is None:
            return False
        delta = step - base
        if np.array_equal(last, base + (len(r) - 1) * delta):
            out.affine[axis] = delta
            return True
        known = None if shifts is None else shifts.get((axis, tuple(r)))
        if (
            known is not None
            and _learned(known, tensor)
            and all(
                (term := self.keys_at(axis, v)) is not None
                and np.array_equal(term - base, known[r.index(v)][tensor])
                for v in (r[1], r[-1], r[len(r) // 2])
            )
        ):
            out.shifts[axis] = known
            return True
        terms = {}
        for value in r:  # not affine along this axis: one run per value
            term = self.keys_at(axis, value)
            if term is None:
                return False
            terms[value] = term - base
        table = np.stack([terms[v] for v in r])
        found = per_tensor_shift(table, tensor)
        if found is not None and shifts is not None:
            shifts[(axis, tuple(r))] = found
            out.shifts[axis] = found
        else:
            out.tables[axis] = table
        return True


NOT_LEARNED = np.iinfo(np.int64).min  # a shift row's mark for a tensor its class never moved


def _learn_steps(steps: dict, cls: CtaClass, affine: dict, tensor: np.ndarray) -> None:
    """Keep a confirmed class's affine steps that move every tile of a tensor alike, per
    (axis, the range's stride), as (tensors, 2) rows (NOT_LEARNED for tensors it never moved),
    merged with what earlier classes taught."""
    for axis, delta in affine.items():
        per_tensor = per_tensor_shift(delta[None], tensor)
        if per_tensor is None:
            continue
        key = (axis, cls.axes[axis].step)
        old = steps.get(key)
        new = per_tensor[0]
        if old is not None:
            width = max(len(old), len(new))
            merged = np.full((width, 2), NOT_LEARNED, dtype=np.int64)
            merged[: len(old)] = old
            fresh = new[:, 0] != NOT_LEARNED
            merged[: len(new)][fresh] = new[fresh]
            new = merged
        steps[key] = new


def _learned(shift: np.ndarray, tensor: np.ndarray) -> bool:
    """Whether `shift` was learned from a class that moved every tensor in `tensor` (tensor
    ids index the shift's rows: a lookup, where np.isin's set machinery costs far more)."""
    learned = shift[0, :, 0] != NOT_LEARNED
    return bool(len(tensor) == 0 or (int(tensor.max()) < len(learned) and learned[tensor].all()))


def per_tensor_shift(table: np.ndarray, tensor: np.ndarray) -> np.ndarray | None:
    """(values, tensors, 2) when every transfer of a tensor takes the same term at every value
    of `table` ((values, n, 2)), else None. Tensors the class does not move are marked
    NOT_LEARNED, so a class that moves them samples its own terms."""
    if not len(tensor):
        return None
    shift = np.full((len(table), int(tensor.max()) + 1, 2), NOT_LEARNED, dtype=np.int64)
    shift[:, tensor] = table  # one of each tensor's transfers lands last: check them all
    return shift if np.array_equal(shift[:, tensor], table) else None


def _run_each(runner, k, cls, strides, out: ClassKeys) -> ClassKeys:
    """Fallback for classes whose offsets are not affine: run every CTA."""
    grid = _class_coords(cls)
    out.affine, out.tables, out.shifts = {}, {}, {}
    out.explicit = np.stack(
        [runner.transfers(k, tuple(int(x) for x in c), strides)[1] for c in grid]
    )
    return out


__all__ = ["ClassKeys", "Layout", "PlanKeys", "from_plan_fast"]
