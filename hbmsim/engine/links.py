"""The memory system a group's transfers cross, and the timeline they write.

Why a module of its own: the simulation (simulation.py, launch.py) decides when CTAs run and
groups (groups.py) decide what they issue; how a batch of transfers turns into flows on the
SM-to-L2 path and DRAM (each a FluidLink, behind its latency) is one concern, with the timeline
rows ops leave behind. Every copy of a transfer crosses the L2 path, hits and misses alike;
misses also cross DRAM; a transfer is done when all its copies are (docs/engine-model.md
states the model).
"""

from __future__ import annotations

import simpy

from ..gpu.hardware import Hardware
from .fluid import FluidLink


class Links:
    """The L2 path and DRAM of one simulation, their latencies, and its timeline rows
    (`rows`, at most `max_timeline`; `truncated` once a row was refused). `share`: the
    fraction of each link's bandwidth these transfers get (a group timed alone in phase with
    the rest of the GPU, stretch.AloneRuns); 1 everywhere else."""

    def __init__(
        self,
        env: simpy.Environment,
        hw: Hardware,
        timeline: bool,
        max_timeline: int,
        share: float = 1.0,
    ):
        self.env = env
        self.dram = FluidLink(env, hw.hbm_bytes_per_s * share)
        self.l2 = FluidLink(env, hw.l2_bytes_per_s * share)
        self.hbm_latency_s, self.l2_latency_s = hw.hbm_latency_s, hw.l2_latency_s
        self.timeline_on = timeline
        self.max_timeline = max_timeline
        self.rows: list[list] = []
        self.truncated = False

    def note(self, start, *fields):
        """A timeline row: start, end (= start until the op completes), then TIMELINE_DTYPE's
        remaining fields in order; None once the timeline is full."""
        if len(self.rows) >= self.max_timeline:
            self.truncated = True
            return None
        row = [start, start, *fields]
        self.rows.append(row)
        return row

    def start(self, batch: list[tuple[int, int, int, list | None]], track=None) -> list:
        """Start transfers issued together: (bytes, DRAM copies, L2-hit copies, note) each.

        One latency wait per level for the whole batch, then the links; a transfer is done
        when all its copies are. `track`: a dict given each transfer's parts (issue time,
        [(link, latency, the part's event)]), for Group.state.
        """
        env = self.env
        dones = []
        dram_items, l2_items = [], []
        groups, which = merged(batch)
        for nbytes, m_dram, m_l2, note, copies in groups:
            m_dram, m_l2 = m_dram * copies, m_l2 * copies
            done = env.event()
            if note is not None:
                done.callbacks.append(lambda _e, note=note: note.__setitem__(1, env.now))
            # every copy crosses the SM-to-L2 path (hits and misses alike); misses also
            # cross DRAM. A transfer is done when all its parts are.
            parts = [(l2_items, m_dram + m_l2)] + ([(dram_items, m_dram)] if m_dram else [])
            if len(parts) == 2:
                left = [2]

                def part_done(_e, done=done, left=left):
                    left[0] -= 1
                    if not left[0]:
                        done.succeed()

                evs = []
                for items, mm in parts:
                    ev = env.event()
                    ev.callbacks.append(part_done)
                    items.append((nbytes, mm, ev))
                    evs.append(ev)
                if track is not None:
                    track[done] = (
                        env.now,
                        [
                            (self.l2, self.l2_latency_s, evs[0]),
                            (self.dram, self.hbm_latency_s, evs[1]),
                        ],
                    )
            else:
                l2_items.append((nbytes, m_l2, done))
                if track is not None:
                    track[done] = (env.now, [(self.l2, self.l2_latency_s, done)])
            dones.append(done)
        for link, latency, items in (
            (self.dram, self.hbm_latency_s, dram_items),
            (self.l2, self.l2_latency_s, l2_items),
        ):
            if not items:
                continue

            def after_latency(_e, link=link, items=items):
                link.start_all(items)

            env.timeout(latency).callbacks.append(after_latency)
        return [dones[g] for g in which]


def merged(batch: list[tuple[int, int, int, list | None]]) -> tuple[list[list], list[int]]:
    """Transfers issued together that are alike (bytes, DRAM copies, L2-hit copies, and no
    timeline row of their own), as one flow of all their copies: ([bytes, DRAM copies, L2
    copies, note, transfers], ...) and each transfer's group. Exact: alike flows started
    together get the same share of every link at every instant and end together, as one flow
    of their summed copies does (a K and a V tile of one step, or a GEMM's A and B tiles)."""
    if len(batch) == 1:
        return [[*batch[0], 1]], [0]
    groups: list[list] = []
    which: list[int] = []
    seen: dict[tuple[int, int, int], int] = {}
    for nbytes, m_dram, m_l2, note in batch:
        key = (nbytes, m_dram, m_l2)
        if note is None and key in seen:
            groups[seen[key]][4] += 1
        else:
            if note is None:
                seen[key] = len(groups)
            groups.append([nbytes, m_dram, m_l2, note, 1])
        which.append(seen[key] if note is None else len(groups) - 1)
    return groups, which
