"""Checks every program's tests share: a plan executes to naive attention and its counts are
what its trace adds up to; a plan's declared CTA classes hold CTAs that run alike."""

from hbmsim.interpret.counts import count_plan
from hbmsim.interpret.execute import execute_plan
from hbmsim.interpret.trace import trace_plan
from hbmsim.program.plan import launch_sequence


def assert_exact_and_counted(plan, fields=("matmul_flops",)) -> None:
    """Executed, the plan's output (and its gradients, for a backward) equals naive attention
    to 1e-9; counted, its bytes per tensor and `fields` equal what its trace adds up to."""
    e = execute_plan(plan)
    assert e.rel_err < 1e-9
    if e.grad_rel_err:
        assert max(e.grad_rel_err.values()) < 1e-9
    counted, traced = count_plan(plan).to_dict(), trace_plan(plan).totals()
    assert counted["by_tensor"] == traced["by_tensor"]
    for f in fields:
        assert counted[f] == traced[f], f


def assert_classes_hold_identical_ctas(plan, what=()) -> None:
    """Every CTA a plan puts in one class has the same op sequence up to offsets (the trace
    finds the classes on its own); `what` labels a failure."""
    found = trace_plan(plan).cta_classes()
    class_of = {cta: i for i, group in enumerate(found) for cta in group}
    for k, kernel in enumerate(plan.kernels):
        index_of = {cta: i for i, cta in enumerate(launch_sequence(kernel))}
        for cls in kernel.grid:
            seen = {class_of[(k, index_of[cta])] for cta in cls}
            assert len(seen) == 1, (*what, kernel.name, cls)
