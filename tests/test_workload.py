"""The fast workload builder (classkeys.py) against the full trace: the same ops and tile keys
for every CTA, with long loops traced at a few iterations and laid out from them."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hbmsim import Problem, get_hardware, make_plan, trace_plan
from hbmsim.algorithms.names import ALGOS
from hbmsim.engine.workload import recorder
from hbmsim.engine.workload.arrays import distinct
from hbmsim.engine.workload.classkeys import from_plan_fast
from hbmsim.engine.workload.one_cta import OneCta
from hbmsim.engine.workload.work import from_plan_exact
from hbmsim.libraries.registry import make_impl_plan
from hbmsim.program import symbolic as classsym
from hbmsim.program.plan import Buffer, CtaClass, Kernel, Plan, TensorSpec, Tiles

ALGO_NAMES = set(ALGOS)

A100 = get_hardware("a100-40gb")
H100 = get_hardware("h100-sxm")
SHAPE_FIELDS = ("op", "tensor", "buffer", "bytes", "matmul_flops", "vector_flops", "exp_ops")


def assert_same_workload(fast, exact):
    """Every CTA runs the same ops (its template) and touches the same tiles in both."""
    for kf, ke in zip(fast.kernels, exact.kernels, strict=True):
        assert kf.n_ctas == ke.n_ctas, kf.name
        every = np.arange(kf.n_ctas)
        assert np.array_equal(kf.keys.take(every), ke.acc_key), kf.name
        for cta in range(kf.n_ctas):
            tf = kf.templates[kf.cta_template[cta]]
            te = ke.templates[ke.cta_template[cta]]
            assert len(tf) == len(te), (kf.name, cta)
            for name in SHAPE_FIELDS:
                assert np.array_equal(tf[name], te[name]), (kf.name, cta, name)


@pytest.fixture
def laid_out(monkeypatch):
    """How many loop segments the fast builder laid out from sampled iterations."""
    calls = []
    real = recorder.checked_step

    def counted(blocks, picks):
        step = real(blocks, picks)
        calls.append(len(blocks))
        return step

    monkeypatch.setattr(recorder, "checked_step", counted)
    return calls


CASES = [
    ("algo", "fa2", H100, dict(bq=32, bk=32)),
    ("algo", "fa1", A100, dict(bq=32, bk=32)),
    ("algo", "standard", A100, dict(bq=32, bk=32)),
    ("algo", "split-kv", H100, dict(bq=32, bk=32, splits=2, pass_="fwd")),
    ("impl", "flash-attn-1", A100, {}),
    ("impl", "flash-attn-1@0.1", A100, {}),
    ("impl", "flash-attn-2", A100, dict(seq_q=1280, seq_k=1280)),
    ("impl", "torch-eager", A100, {}),
    ("impl", "flash-decoding", A100, dict(seq_q=1, seq_k=8192, pass_="fwd")),
]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("kind", "name", "hw", "tiles"), CASES, ids=[c[1] for c in CASES])
def test_sampled_loops_give_every_cta_the_traced_ops_and_tiles(
    kind, name, hw, tiles, causal, laid_out
):
    """Loops of five or more iterations are run at four and laid out from the first two; the
    result is the full trace's, op for op and tile for tile, forward and backward."""
    tiles, shape = dict(tiles), dict(seq_q=640, seq_k=640, pass_="fwd+bwd")
    shape.update((k, tiles.pop(k)) for k in ("seq_q", "seq_k", "pass_") if k in tiles)
    p = Problem(batch=1, heads=2, head_dim=32, causal=causal, **shape)
    plan = make_plan(name, p, hw, **tiles) if kind == "algo" else make_impl_plan(name, p, hw)
    fast = from_plan_fast(plan)
    assert_same_workload(fast, from_plan_exact(plan))
    assert laid_out, "no loop was long enough to be sampled: the case tests nothing"


def _toy_plan(program, n_ctas=2):
    tensors = {"X": TensorSpec("X", (4096, 4096), 2, "input")}
    kernel = Kernel("k", (CtaClass((range(n_ctas),)),), (Buffer("A", (64,), 2),), program, 32)
    return Plan("toy", Problem(), H100, Tiles(1, 1), tensors, (kernel,))


def _records(plan, cta):
    """The full trace's ops of one CTA, as the fast builder's runner returns them."""
    r = trace_plan(plan).records
    return r[r["cta"] == cta]


def _same_records(fast, traced):
    assert len(fast) == len(traced)
    for name in (*SHAPE_FIELDS, "start", "stop"):
        assert np.array_equal(fast[name], traced[name]), name


@settings(max_examples=60, deadline=None)
@given(
    outer=st.lists(st.integers(0, 9), min_size=1, max_size=3),
    inner=st.lists(st.integers(0, 9), min_size=1, max_size=3),
    steps=st.tuples(st.integers(0, 5), st.integers(-3, 3), st.integers(0, 4)),
    bend=st.sampled_from([None, "square", "mod", "last"]),
)
def test_laid_out_loops_equal_the_trace_whatever_the_loop(outer, inner, steps, bend):
    """Nested loops of any segment lengths, regions moving by any step per iteration (zero
    and negative included) or not evenly at all (a square, a period, a last iteration that
    differs): the fast builder's ops are the trace's."""
    a, b, c = steps

    def program(ctx, cta):
        (x,) = cta
        for j in ctx.loop([range(20 * k, 20 * k + n) for k, n in enumerate(outer)]):
            row = 100 + 7 * x + a * j
            ctx.load("A", "X", ((row, row + 1), (0, 64)))
            for i in ctx.loop([range(10 * k, 10 * k + n) for k, n in enumerate(inner)]):
                col = 200 + b * i + c * j
                if bend == "square":
                    col += i * i
                elif bend == "mod":
                    col += 5 * (i % 3)
                elif bend == "last" and i == 10 * (len(inner) - 1) + inner[-1] - 1:
                    col += 1
                ctx.compute(None, matmul=i % 2 if bend == "mod" else 2, out="A")
                ctx.store("A", "X", ((row, row + 1), (col + 1000, col + 1064)))
        ctx.load("A", "X", ((0, 1), (0, 64)))

    plan = _toy_plan(program)
    runner = OneCta(plan)
    for cta in range(2):
        _same_records(runner.run(0, (cta,)), _records(plan, cta))


def test_a_program_leaving_a_sampled_loop_early_is_run_again_in_full():
    """A loop left by `break` at its later iterations is seen only at the last sample: the
    CTA is run again with every iteration, and its ops are the trace's."""

    def program(ctx, cta):
        (x,) = cta
        for j in ctx.loop([range(12)]):
            if j >= 8:
                break
            ctx.load("A", "X", ((x, x + 1), (64 * j, 64 * j + 64)))

    plan = _toy_plan(program, n_ctas=1)
    fast = OneCta(plan).run(0, (0,))
    assert len(fast) == 8
    _same_records(fast, _records(plan, 0))


def _counting_runs(plan):
    """The plan with its first kernel's program counting the CTAs it is run for."""
    runs = []
    kernel = plan.kernels[0]

    def counted(ctx, cta, program=kernel.program):
        runs.append(cta)
        return program(ctx, cta)

    return dataclasses.replace(plan, kernels=(dataclasses.replace(kernel, program=counted),)), runs


def test_causal_classes_are_built_from_one_symbolic_run_each():
    """Causal fa2: each query block is a class over the heads. Its program only passes the
    head through to its regions, so one run with the head symbolic gives every head's keys:
    one run a class, and every CTA's keys and ops are the trace's."""
    p = Problem(batch=1, heads=8, seq_q=512, seq_k=512, head_dim=64, causal=True)
    plan, runs = _counting_runs(make_plan("fa2", p, H100, bq=64, bk=64))
    fast = from_plan_fast(plan)
    assert len(runs) == len(plan.kernels[0].grid) == 8
    assert all(isinstance(cta[1], classsym.Affine) for cta in runs)
    assert_same_workload(fast, from_plan_exact(plan))


def test_causal_classes_come_from_one_run_of_their_family():
    """Causal fa2 at 2,048 tokens: 32 query-block classes, one value each along the block
    axis, whose loops visit one more K/V block each. One run with the block symbolic too (its
    comparisons decided over the classes' box) stands for the family. Over all 32 it is not
    exact (the first classes' loops are too short to lay out, and the last one's visible
    blocks reach the sequence's end, where `min` ties): tried without them, it is, and they
    are run on their own (32 classes: 4 family runs, 3 refused, and 9 of their own). Every
    CTA's keys and ops are the trace's."""
    p = Problem(batch=1, heads=4, seq_q=2048, seq_k=2048, head_dim=64, causal=True)
    plan, runs = _counting_runs(make_plan("fa2", p, H100, bq=64, bk=64))
    fast = from_plan_fast(plan)
    family = [cta for cta in runs if isinstance(cta[2], classsym.Affine)]
    assert len(family) == 4 and len(runs) == 4 + 9
    assert_same_workload(fast, from_plan_exact(plan))


def test_causal_classes_reuse_the_head_steps_one_class_learned():
    """Causal fa2 learned from runs (no symbolic run): each query block is a class over the
    heads, whose step moves every tile of a tensor alike. The first class learns it from its
    second head; the others try it first and only check it at their last and middle heads:
    three runs a class, not four, and every CTA's keys stay the trace's."""
    p = Problem(batch=1, heads=8, seq_q=512, seq_k=512, head_dim=64, causal=True)
    plan, runs = _counting_runs(make_plan("fa2", p, H100, bq=64, bk=64))
    classes = len(plan.kernels[0].grid)
    assert classes == 8
    fast = from_plan_fast(plan, symbolic=False)
    assert len(runs) == 3 * classes + 1  # the first class also runs its second head
    assert_same_workload(fast, from_plan_exact(plan))


def test_gqa_head_shifts_are_learned_once_per_kernel():
    """Causal GQA: every query block is its own class, and a query head reads K/V head
    h // group, so the head axis is not affine. Its per-tensor shifts are sampled at every
    head once per kernel; the other classes check them at three heads instead of running
    every head. The keys stay exactly the trace's."""
    p = Problem(batch=1, heads=16, kv_heads=4, seq_q=1024, seq_k=1024, head_dim=64, causal=True)
    plan, runs = _counting_runs(make_plan("fa2", p, H100))
    fast = from_plan_fast(plan)
    classes = len(plan.kernels[0].grid)
    assert classes == 16  # one per 64-row query block
    assert len(runs) < 6 * classes  # every head of every class would be more than 16 each
    exact = from_plan_exact(plan)
    kf, ke = fast.kernels[0], exact.kernels[0]
    assert np.array_equal(kf.keys.take(np.arange(kf.n_ctas)), ke.acc_key)


def test_gqa_classes_are_built_from_symbolic_runs_with_the_head_axis_split():
    """Causal GQA: a query head reads K/V head h // group, no affine function of h. The first
    class's symbolic run is refused at that division, and run again with the head axis split
    into its quotient and remainder by the group (symbolic.split_coordinates); every later
    class starts split. No class is learned from runs, and every CTA's keys and ops are the
    trace's."""
    p = Problem(batch=2, heads=16, kv_heads=4, seq_q=1024, seq_k=1024, head_dim=64, causal=True)
    plan, runs = _counting_runs(make_plan("fa2", p, H100))
    classes = len(plan.kernels[0].grid)
    fast = from_plan_fast(plan)
    symbolic = [cta for cta in runs if isinstance(cta[1], classsym.Affine)]
    split = [cta for cta in symbolic if len(cta[1].co) == 3]  # batch, head quotient, remainder
    assert len(split) >= classes - 1 and len(runs) <= classes + 1 + 2
    assert_same_workload(fast, from_plan_exact(plan))


@settings(max_examples=300, deadline=None)
@given(
    st.integers(2, 6),
    st.integers(0, 23),
    st.lists(
        st.tuples(st.sampled_from(["+", "*", "//", "%", "//d", "%d"]), st.integers(1, 9)),
        max_size=6,
    ),
)
def test_a_split_coordinate_divides_exactly_or_refuses(d, rep, ops):
    """A coordinate split by d (its quotient and remainder, symbolic.split_coordinates): any
    sequence of additions, multiplications, floor divisions and modulos either raises
    NotSymbolic or equals the same operations on plain ints at every value of the axis."""
    coords, variables, fixed = classsym.split_coordinates((rep,), [0], {0: d})
    (h,) = coords
    sym = h
    plains = list(range(24))
    try:
        with classsym.remainders(fixed, []):
            for op, k in ops:
                k = d if op in ("//d", "%d") else k
                if op == "+":
                    sym, plains = sym + k, [x + k for x in plains]
                elif op == "*":
                    sym, plains = sym * k, [x * k for x in plains]
                elif op.startswith("//"):
                    sym, plains = sym // k, [x // k for x in plains]
                else:
                    sym, plains = sym % k, [x % k for x in plains]
    except classsym.NotSymbolic:
        return
    units = classsym.unit_values(variables, np.arange(24)[:, None], (rep,))
    for x, plain in enumerate(plains):
        got = sym if isinstance(sym, int) else sym.c0 + int(np.dot(sym.co, units[x]))
        assert got == plain, (x, plain, got)


def test_a_class_whose_steps_differ_from_the_learned_ones_learns_its_own():
    """Two classes along a head-like axis: the second moves its tiles twice as far per head.
    The step the first class taught fails the second's checks, so the second runs its own
    first step; both classes' keys are the trace's."""

    def program(ctx, cta):
        z, h = cta
        ctx.load("A", "X", ((h * (1 + z), h * (1 + z) + 1), (64 * z, 64 * z + 64)))

    tensors = {"X": TensorSpec("X", (4096, 4096), 2, "input")}
    grid = (CtaClass((range(0, 1), range(8))), CtaClass((range(1, 2), range(8))))
    kernel = Kernel("k", grid, (Buffer("A", (64,), 2),), program, 32)
    plan, runs = _counting_runs(Plan("toy", Problem(), H100, Tiles(1, 1), tensors, (kernel,)))
    fast = from_plan_fast(plan, symbolic=False)
    assert (1, 1) in runs  # the learned step failed: the second class ran its own second head
    assert_same_workload(fast, from_plan_exact(plan))


@pytest.mark.parametrize(
    "build",
    [
        lambda: make_plan("fa2", Problem(heads=4, seq_q=1000, seq_k=1000, causal=True), H100),
        lambda: make_impl_plan(
            "flash-attn-1", Problem(batch=2, heads=4, seq_q=1536, seq_k=1536), A100
        ),
        lambda: make_impl_plan(
            "torch-eager", Problem(heads=2, seq_q=256, seq_k=256, causal=True, dropout=0.1), A100
        ),
    ],
)
def test_templates_without_regions_group_and_time_as_the_full_ones(build):
    """Without a timeline the engine keeps templates without their regions: the same classes
    share a template (flash-attn 1.x's forward here: 29 split classes, two templates), the
    same ops, and the engine predicts the same time and bytes to the last bit."""
    from hbmsim.engine.simulation import simulate_workload
    from hbmsim.engine.workload.work import LEAN_TEMPLATE_DTYPE

    plan = build()
    full, lean = from_plan_fast(plan), from_plan_fast(plan, regions=False)
    for kf, kl in zip(full.kernels, lean.kernels, strict=True):
        assert np.array_equal(kf.cta_template, kl.cta_template), kf.name
        assert len(kf.templates) == len(kl.templates), kf.name
        for tf, tl in zip(kf.templates, kl.templates, strict=True):
            assert tl.dtype == LEAN_TEMPLATE_DTYPE
            assert all(np.array_equal(tf[name], tl[name]) for name in SHAPE_FIELDS)
    a, b = simulate_workload(full, plan.hardware), simulate_workload(lean, plan.hardware)
    assert a.time_s == b.time_s
    assert (a.dram_read_bytes, a.dram_write_bytes) == (b.dram_read_bytes, b.dram_write_bytes)


def test_classes_whose_ops_differ_only_in_region_shape_keep_their_own_templates():
    """Two classes with the same ops and bytes whose loads differ in shape (2 x 32 elements
    against 1 x 64): a trace keeps them apart, and so does the fast builder without regions,
    which compares the runs' extents."""

    def program(ctx, cta):
        (x,) = cta
        rows = (0, 2) if x == 0 else (0, 1)
        cols = (0, 32) if x == 0 else (0, 64)
        ctx.load("A", "X", (rows, cols))

    tensors = {"X": TensorSpec("X", (4096, 4096), 2, "input")}
    grid = (CtaClass((range(0, 1),)), CtaClass((range(1, 2),)))
    kernel = Kernel("k", grid, (Buffer("A", (64,), 2),), program, 32)
    plan = Plan("toy", Problem(), H100, Tiles(1, 1), tensors, (kernel,))
    exact = from_plan_exact(plan).kernels[0]
    for regions in (True, False):
        fast = from_plan_fast(plan, regions=regions).kernels[0]
        assert len(fast.templates) == len(exact.templates) == 2
        assert fast.cta_template.tolist() == exact.cta_template.tolist()


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([np.int16, np.int32, np.int64]), st.data())
def test_distinct_is_np_unique(dtype, data):
    """`distinct` (a sort, for speed) gives np.unique's values and dtype for any int array,
    repeats, negatives and empty arrays included."""
    info = np.iinfo(dtype)
    values = data.draw(st.lists(st.integers(int(info.min), int(info.max)), max_size=300))
    a = np.array(values, dtype=dtype)
    got, want = distinct(a), np.unique(a)
    assert got.dtype == want.dtype
    assert np.array_equal(got, want)


def _same_fast_workloads(a, b):
    """Two fast workloads alike: every kernel's templates, each CTA's template, every key."""
    for ka, kb in zip(a.kernels, b.kernels, strict=True):
        assert len(ka.templates) == len(kb.templates), ka.name
        for ta, tb in zip(ka.templates, kb.templates, strict=True):
            assert np.array_equal(ta, tb), ka.name
        assert np.array_equal(ka.cta_template, kb.cta_template), ka.name
        every = np.arange(ka.n_ctas)
        assert np.array_equal(ka.keys.take(every), kb.keys.take(every)), ka.name


SPREAD = [
    ("fa2", Problem(batch=2, heads=4, seq_q=1000, seq_k=1000, causal=True), H100),
    ("fa2", Problem(batch=2, heads=4, seq_q=512, seq_k=512, causal=True, pass_="fwd+bwd"), A100),
    ("fa2", Problem(heads=8, kv_heads=2, seq_q=768, seq_k=768, causal=True), H100),
    ("fa1", Problem(batch=2, heads=4, seq_q=512, seq_k=512, dropout=0.1), A100),
    ("standard", Problem(batch=2, heads=2, seq_q=384, seq_k=384, causal=True), H100),
    ("split-kv", Problem(batch=2, heads=4, seq_q=1, seq_k=4096), H100),
    ("flash-attn-1", Problem(batch=2, heads=4, seq_q=1536, seq_k=1536), A100),
    (
        "flash-attn-2",
        Problem(batch=2, heads=8, kv_heads=2, seq_q=1024, seq_k=1024, causal=True),
        H100,
    ),
    ("flash-attn-2", Problem(batch=1, heads=4, seq_q=512, seq_k=512, pass_="fwd+bwd"), H100),
    ("torch-eager", Problem(heads=2, seq_q=256, seq_k=256, causal=True, dropout=0.1), A100),
    ("flash-decoding", Problem(batch=2, heads=8, kv_heads=2, seq_q=1, seq_k=8192), H100),
    # families of query-block classes, each from one run (classkeys._families)
    ("fa2", Problem(batch=2, heads=4, seq_q=2048, seq_k=2048, causal=True), H100),
    ("fa2", Problem(heads=4, seq_q=2000, seq_k=2000, causal=True), H100),  # a ragged block
    ("flash-attn-2", Problem(heads=4, seq_q=4096, seq_k=4096, causal=True, dropout=0.1), A100),
    (
        "flash-attn-3",
        Problem(heads=4, seq_q=4096, seq_k=4096, head_dim=128, causal=True),
        get_hardware("h100-sxm"),
    ),
]


@pytest.mark.parametrize(("name", "p", "hw"), SPREAD, ids=lambda x: getattr(x, "name", str(x)))
def test_symbolic_runs_build_the_workload_runs_learn(name, p, hw):
    """Over textbook algorithms and library mirrors (causal, GQA, backward, split-kv,
    decoding, dropout): the classes built from one symbolic run and those learned from runs
    give the same templates and every CTA the same keys (where a program does something
    with a coordinate that is not exact for every CTA, the class is learned from runs in
    both)."""
    plan = make_plan(name, p, hw) if name in ALGO_NAMES else make_impl_plan(name, p, hw)
    _same_fast_workloads(from_plan_fast(plan), from_plan_fast(plan, symbolic=False))


def test_a_program_that_branches_on_a_coordinate_is_learned_from_runs():
    """A program that tests its head (a branch is not exact for every CTA symbolically) is
    learned from runs as before (here every head is run: its tiles are not affine in the
    head), and its keys are still the trace's."""

    def program(ctx, cta):
        (h,) = cta
        col = 0 if h < 3 else 32  # the same ops, tiles that are not affine in the head
        ctx.load("A", "X", ((h, h + 1), (col, col + 32)))

    tensors = {"X": TensorSpec("X", (64, 64), 2, "input")}
    kernel = Kernel("k", (CtaClass((range(8),)),), (Buffer("A", (64,), 2),), program, 32)
    plan, runs = _counting_runs(Plan("toy", Problem(), H100, Tiles(1, 1), tensors, (kernel,)))
    fast = from_plan_fast(plan)
    plain = [cta[0] for cta in runs if type(cta[0]) is int]
    assert 3 in plain  # run at plain heads after the symbolic run failed
    assert_same_workload(fast, from_plan_exact(plan))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["+", "-", "r-", "*", "//", "%", "+sym"]), st.integers(-9, 9)),
        max_size=8,
    ),
    st.integers(0, 20),
    st.integers(0, 20),
)
def test_affine_coordinates_are_exact_or_refuse(ops, x, y):
    """An expression of two symbolic coordinates, built by a random sequence of operations,
    either raises NotSymbolic or equals the same operations on plain ints at any point (its
    value at the representative, plus its coefficients times the coordinates' offsets)."""
    u = classsym.Affine(0, (1, 0))
    v = classsym.Affine(0, (0, 1))
    sym, plain = u, x  # the coordinates at the representative (0, 0) and at (x, y)
    try:
        for op, k in ops:
            if op == "+":
                sym, plain = sym + k, plain + k
            elif op == "-":
                sym, plain = sym - k, plain - k
            elif op == "r-":
                sym, plain = k - sym, k - plain
            elif op == "*":
                sym, plain = sym * k, plain * k
            elif op == "//":
                sym, plain = sym // k, plain // k
            elif op == "%":
                sym, plain = sym % k, plain % k
            else:
                sym, plain = sym + k * v, plain + k * y
    except (classsym.NotSymbolic, ZeroDivisionError):
        return
    if isinstance(sym, int):
        assert sym == plain
    else:
        assert sym.c0 + sym.co[0] * x + sym.co[1] * y == plain


@settings(max_examples=200, deadline=None)
@given(
    st.integers(-5, 5),
    st.integers(-5, 5),
    st.integers(-20, 20),
    st.integers(-20, 20),
    st.tuples(st.integers(-3, 3), st.integers(0, 4)),
    st.tuples(st.integers(-3, 3), st.integers(0, 4)),
)
def test_comparisons_inside_a_box_hold_at_every_point_or_refuse(a, b, c0, k, box_u, box_v):
    """Inside a run over a box of coordinates (classsym.within), a comparison of an affine
    expression with an int is decided where it is the same at every point of the box, and
    refused where it is not (an order: the expression's least and greatest values in the box
    decide it); equality, and what is built on comparisons (min), are, where decided, what
    they are at every point (they may refuse where the points agree: -2u never equals -1, yet
    its values straddle it)."""
    (lo_u, n_u), (lo_v, n_v) = box_u, box_v
    box = ((lo_u, lo_u + n_u), (lo_v, lo_v + n_v))
    e = classsym.Affine(c0, (a, b))
    points = [
        c0 + a * u + b * v
        for u in range(box[0][0], box[0][1] + 1)
        for v in range(box[1][0], box[1][1] + 1)
    ]
    for compare, plain, simple in (
        (lambda x: x < k, lambda x: x < k, True),
        (lambda x: x <= k, lambda x: x <= k, True),
        (lambda x: k < x, lambda x: k < x, True),
        (lambda x: x == k, lambda x: x == k, False),  # refused unless 0 lies outside its range
        (lambda x: min(x, k) == k, lambda x: min(x, k) == k, False),
    ):
        truths = {plain(x) for x in points}
        with classsym.within(box):
            try:
                got = compare(e)
            except classsym.NotSymbolic:
                assert len(truths) == 2 or not simple
                continue
        assert truths == {got}


def test_affine_coordinates_refuse_what_is_not_exact_for_every_cta():
    """Comparing, branching on, indexing with, hashing or converting a symbolic coordinate
    raises, so a program cannot silently take one CTA's path for all."""
    h = classsym.Affine(3, (1,))
    for attempt in (
        lambda: h < 4,
        lambda: h == 3,
        lambda: bool(h),
        lambda: [0, 1, 2, 3, 4][h],
        lambda: range(h),
        lambda: int(h),
        lambda: {h: 1},
        lambda: h // 2,
        lambda: h * 1.5,
        lambda: max(h, 0),
    ):
        with pytest.raises((classsym.NotSymbolic, TypeError)):
            attempt()
    halved = (2 * h) // 2  # exact: every coefficient divides
    assert (halved.c0, halved.co) == (3, (1,))
    assert (4 * h + 1) % 4 == 1  # 4 (3 + u) + 1 leaves 1 for every u
    assert h - h == 0 and isinstance(h - h, int)  # no coefficient left: a plain int


def test_a_box_decides_comparisons_only_in_the_thread_that_runs_over_it():
    """The app builds workloads in several sessions' threads at once: one thread's run over a
    box (classsym.within) must not decide another thread's comparisons, which stay refused."""
    import threading

    h = classsym.Affine(3, (1,))
    seen = []
    inside, checked = threading.Event(), threading.Event()

    def other():
        inside.wait()
        try:
            seen.append(h < 10)
        except classsym.NotSymbolic:
            seen.append("refused")
        checked.set()

    t = threading.Thread(target=other)
    t.start()
    with classsym.within([(0, 4)]):
        assert h < 10  # 3..7: decided here
        inside.set()
        checked.wait(10)
    t.join()
    assert seen == ["refused"]
