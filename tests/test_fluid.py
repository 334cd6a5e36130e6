"""The shared-bandwidth link makes progress at any time scale and bandwidth.

Simulated time is a float: its step grows with it. These tests drive the link where a fixed
byte tolerance once stalled it (a sliver of bytes left, a wake-up below the clock's step,
re-armed forever): slow links, long latencies, flows starting seconds to hours in. Every run
is stepped by hand under a bound on events, so a stall fails the test instead of hanging it.
"""

import json
import math
import subprocess
import sys

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from hbmsim.engine.fluid import FluidLink
from hbmsim.engine.simulation import run_engine

GB = 1e9


def run_bounded(env: simpy.Environment, max_events: int) -> int:
    """Process events until none is left; fail if that takes more than max_events."""
    for n in range(max_events):
        if env.peek() == math.inf:
            return n
        env.step()
    pytest.fail(f"still busy after {max_events:,} events at t = {env.now!r} s: no progress")


def start_at(env, link, t_s, nbytes, weight, finished):
    def proc():
        yield env.timeout(t_s)
        done = env.event()
        link.start(nbytes, weight, done)
        yield done
        finished.append(env.now)

    env.process(proc())


def busy_end(flows, bytes_per_s):
    """The reference: a work-conserving link ends its last busy period here. Equal sharing
    with no per-transfer cap below the bandwidth is work-conserving."""
    end = 0.0
    for t_s, nbytes, weight in sorted(flows):
        end = max(end, t_s) + nbytes * weight / bytes_per_s
    return end


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0.0, 4 * 3600.0),  # start: from now to four hours in
            st.floats(1e-3, 1e7),  # bytes: slivers to 10 MB
            st.integers(1, 64),  # identical transfers in the flow
        ),
        min_size=1,
        max_size=12,
    ),
    st.sampled_from([1 * GB, 0.2 * GB, 3.35e12]),
)
def test_flows_finish_when_a_work_conserving_link_would(flows, bytes_per_s):
    """Whatever the time scale, every flow finishes, and the last one when the link has served
    all the bytes (to 1e-9 relative: far above the clock's resolution)."""
    env = simpy.Environment()
    link = FluidLink(env, bytes_per_s)
    finished: list[float] = []
    for t_s, nbytes, weight in flows:
        start_at(env, link, t_s, nbytes, weight, finished)
    run_bounded(env, 40 * len(flows) + 40)
    assert len(finished) == len(flows)
    assert max(finished) == pytest.approx(busy_end(flows, bytes_per_s), rel=1e-9, abs=1e-12)


def shared_ends(flows, bytes_per_s, cap):
    """The reference: each flow's end on a link shared equally by every transfer on it, each
    under the cap (rate min(cap, bandwidth / transfers)), stepped from one arrival or end to
    the next."""
    order = sorted(range(len(flows)), key=lambda i: flows[i][0])
    left = {}
    ends = [0.0] * len(flows)
    now, k = 0.0, 0
    while k < len(order) or left:
        weight = sum(flows[i][2] for i in left)
        rate = min(cap, bytes_per_s / weight) if weight else 0.0
        t_end = now + min(left.values()) / rate if left else math.inf
        t_arrive = flows[order[k]][0] if k < len(order) else math.inf
        t = min(t_end, t_arrive)
        for i in left:
            left[i] -= rate * (t - now)
        now = t
        for i in [i for i in left if left[i] <= 1e-9 * flows[i][1]]:
            ends[i] = now
            del left[i]
        while k < len(order) and flows[order[k]][0] <= now:
            left[order[k]] = flows[order[k]][1]
            k += 1
    return ends


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0.0, 1e-3),  # start
            st.floats(1e3, 1e7),  # bytes
            st.integers(1, 8),  # identical transfers in the flow
        ),
        min_size=1,
        max_size=10,
    ),
    st.sampled_from([1.0, 0.25, 0.05]),  # the cap, as a share of the bandwidth
)
def test_each_flow_ends_when_equal_sharing_under_the_cap_says(flows, cap_share):
    """Flows starting while the link is busy (one wake-up pending, the rate unchanged when
    the cap binds, or falling when the link is shared) each end when equal sharing under
    the per-transfer cap serves their bytes: the pending wake-up is neither late nor lost."""
    bytes_per_s = 3.35e12
    env = simpy.Environment()
    link = FluidLink(env, bytes_per_s)
    link.cap = cap_share * bytes_per_s
    ends: dict[int, float] = {}

    def proc(i, t_s, nbytes, weight):
        yield env.timeout(t_s)
        done = env.event()
        link.start(nbytes, weight, done)
        yield done
        ends[i] = env.now

    for i, flow in enumerate(flows):
        env.process(proc(i, *flow))
    run_bounded(env, 40 * len(flows) + 40)
    want = shared_ends(flows, bytes_per_s, link.cap)
    assert [ends[i] for i in range(len(flows))] == pytest.approx(want, rel=1e-7, abs=1e-15)


@pytest.mark.parametrize("t_s", [0.165, 1.0, 60.0, 3600.0, 10 * 3600.0])
def test_a_sliver_left_late_in_a_run_still_finishes(t_s):
    """The reported stall: a flow with ~1e-6 B left whose next wake-up, 1e-17 s away, fell
    below the clock's step. Flows of awkward sizes started together at time t_s, sharing a
    1 GB/s link, all finish, in order of size, when their bytes are served."""
    env = simpy.Environment()
    link = FluidLink(env, 1 * GB)
    sizes = [1.3e-6, 1e-3, 1.0 + 1.3e-6, 3.3e5 + 1.3e-6, 7e6 / 3]
    finished: list[float] = []
    for nbytes in sizes:
        start_at(env, link, t_s, nbytes, 1, finished)
    run_bounded(env, 200)
    assert len(finished) == len(sizes)
    assert finished == sorted(finished)
    assert finished[-1] == pytest.approx(t_s + sum(sizes) / GB, rel=1e-12)


def test_one_second_latency_on_a_one_gb_per_s_link_adds_up():
    """1 s of DRAM latency plus 1 MB at 1 GB/s: a CTA's load takes 1.001 s, fast and exact."""
    from test_engine import load_row, toy_gpu, toy_plan

    hw = toy_gpu(hbm_latency_s=1.0, hbm_bytes_per_s=1 * GB)
    plan = toy_plan(load_row(1_000_000), 8, hw)
    for exact in (False, True):
        r = run_engine(plan, l2=False, exact=exact)
        assert r.time_s == pytest.approx(1.0 + 8e6 / GB, rel=1e-12)


@pytest.mark.parametrize(
    "args",
    [
        ["--algo", "standard", "--seq", "3000", "--heads", "3", "--hbm-gbps", "1"],
        ["--algo", "fa2", "--seq", "256", "--hbm-gbps", "0.01"],
    ],
)
def test_the_reported_stalls_finish_within_seconds(args):
    """The command lines that once spun forever give a time (run as a user would, with a
    generous timeout so a stall fails rather than hangs)."""
    out = subprocess.run(
        [sys.executable, "-m", "hbmsim.cli", "simulate", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert json.loads(out)["time_s"] > 0


def test_a_profile_with_a_slow_link_and_a_long_latency_finishes(tmp_path):
    """Standard attention on an L4 profile slowed to 1 GB/s with 1 s of DRAM latency: tens of
    seconds of simulated time over several kernels, each paying at least the latency."""
    profile = tmp_path / "slow.json"
    profile.write_text(
        json.dumps({"base": "l4", "hbm_bytes_per_s": 1e9, "hbm_latency_s": 1.0}), "utf-8"
    )
    out = subprocess.run(
        [sys.executable, "-m", "hbmsim.cli", "simulate", "--gpu", str(profile), "--json"]
        + ["--algo", "standard", "--seq", "300", "--heads", "3", "--causal"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    d = json.loads(out)
    kernels = d["engine"]["kernels"]
    assert len(kernels) > 1
    assert all(k["time_s"] > 1.0 for k in kernels)
    assert d["time_s"] >= sum(k["time_s"] for k in kernels) * (1 - 1e-12)
