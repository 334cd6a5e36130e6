"""What one algorithm's tiles are doing at given moments, from the engine's exact timeline.

The walkthrough's pictures are read off the simulated timeline, never scripted separately. For
each requested moment this module says, for every displayed tile of Q, K, V, S, P, O (and the
backward's tensors), where it is:

- *moving* while a transfer of it is in flight during the interval since the previous moment
  (so that a transfer shorter than a frame still shows): *L2 hit* when most of the copies of
  that tile asked for at the same moment (by a cohort of CTAs) are served by the L2, else
  *to/from DRAM*;
- *in SRAM* from the end of its load until its CTA loads something else into that buffer or
  finishes;
- *written* once a store of it has completed, and *in HBM only* otherwise.

It also gives the running totals (DRAM bytes, L2 hits, trips), the kernel running and the SRAM
held on SM 0. `figure.py` draws two of these on one clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...engine.result import EngineResult
from ...interpret.trace import OP_ATOMIC, OP_COMPUTE, OP_LOAD, OP_STORE
from ...program.plan import Plan

STATES = ("in HBM only", "written to HBM", "in SRAM", "moving to/from DRAM", "L2 hit")
STATE_COLORS = ("#e8e8e8", "#d9b26f", "#2ca02c", "#111111", "#17becf")
MAX_GRID = 32  # tiles per grid side: larger problems show coarser display tiles
# tensor -> the grid it is drawn on. S and P are separate grids (the eager path writes and
# re-reads both); fp32 accumulators and per-head copies share their result's grid.
GRID_TENSORS = {
    "Q": "Q",
    "K": "K",
    "V": "V",
    "S": "S",
    "P": "P",
    "P_drop": "P",
    "O": "O",
    "dO": "dO",
    "dQ": "dQ",
    "dQ_accum": "dQ",
    "dK": "dK",
    "dK_rep": "dK",
    "dV": "dV",
    "dV_rep": "dV",
    "dS": "dS",
    "dP": "dP",
    "dP_drop": "dP",
}
SQUARE_GRIDS = ("S", "P", "dS", "dP")  # query rows x key columns
KEY_GRIDS = ("K", "V", "dK", "dV")  # grids whose rows are key positions
GRID_ORDER = ("Q", "K", "V", "S", "P", "O", "dO", "dS", "dP", "dQ", "dK", "dV")


@dataclass(frozen=True)
class Grids:
    shapes: dict[str, tuple[int, int]]  # name -> (rows, cols) of displayed tiles
    row_block: int  # query rows per displayed tile (at most seq_q)
    col_block: int  # key rows per displayed tile (at most seq_k)


@dataclass(frozen=True)
class SideFrames:
    """One algorithm at each requested moment: states[name][f] is a (rows, cols) int array."""

    grids: Grids
    times_s: np.ndarray  # the moments
    states: dict[str, np.ndarray]  # name -> (frames, rows, cols) of STATES indices
    kernel: list[str]  # the kernel running at each moment ("" before launch, "done" after)
    hbm_bytes: np.ndarray  # every load and store completed so far (the paper's HBM accesses)
    dram_bytes: np.ndarray  # DRAM traffic (reads that missed L2, and writes) completed so far
    l2_hit_bytes: np.ndarray
    trips: np.ndarray
    sram_sm0_bytes: np.ndarray  # SRAM held by the CTAs resident on SM 0
    time_s: float  # the algorithm's simulated end
    kernels: tuple[str, ...]
    sram_per_sm_bytes: int  # the SRAM an SM has (what SM 0's share is out of)


def grids_of(plan: Plan) -> Grids:
    """Displayed grids and the rows/cols each tile stands for (coarser past MAX_GRID tiles)."""
    p = plan.problem
    rb = min(p.seq_q, max(plan.tiles.bq, math.ceil(p.seq_q / MAX_GRID)))
    cb = min(p.seq_k, max(plan.tiles.bk, math.ceil(p.seq_k / MAX_GRID)))
    tr, tc = math.ceil(p.seq_q / rb), math.ceil(p.seq_k / cb)
    present = {GRID_TENSORS[n] for n in plan.tensors if n in GRID_TENSORS}
    shapes = {}
    for name in GRID_ORDER:
        if name not in present:
            continue
        if name in SQUARE_GRIDS:
            shapes[name] = (tr, tc)
        else:
            shapes[name] = (tc if name in KEY_GRIDS else tr, 1)
    return Grids(shapes, rb, cb)


def side_frames(result: EngineResult, plan: Plan, times_s: np.ndarray) -> SideFrames:
    """The state of every displayed tile of head 0, batch 0 at each of `times_s`."""
    if result.timeline is None:
        raise ValueError("side_frames needs an engine run with timeline=True")
    grids = grids_of(plan)
    names = list(grids.shapes)
    tensor_names = [t["name"] for t in result.meta["tensors"]]
    t = result.timeline
    transfers = t[t["op"] != OP_COMPUTE]
    totals = _running_totals(transfers, times_s)
    rows = transfers[(transfers["start"][:, 0] == 0) & (transfers["start"][:, 1] == 0)]
    grid_name = [GRID_TENSORS.get(tensor_names[x], "") for x in rows["tensor"].tolist()]
    grid_of = np.array([names.index(g) if g in names else -1 for g in grid_name], dtype=np.int64)
    keep = grid_of >= 0
    rows, grid_of = rows[keep], grid_of[keep]
    is_sq = np.isin(grid_of, [names.index(n) for n in names if n in SQUARE_GRIDS])
    is_kv = np.isin(grid_of, [names.index(n) for n in names if n in KEY_GRIDS])
    row_unit = np.where(is_kv, grids.col_block, grids.row_block)
    r0 = rows["start"][:, 2] // row_unit
    r1 = (rows["stop"][:, 2] - 1) // row_unit + 1
    c0 = np.where(is_sq, rows["start"][:, 3] // grids.col_block, 0)
    c1 = np.where(is_sq, (rows["stop"][:, 3] - 1) // grids.col_block + 1, 1)
    held_until = _held_until(t, rows)
    loads = rows["op"] == OP_LOAD
    stores = (rows["op"] == OP_STORE) | (rows["op"] == OP_ATOMIC)
    starts, ends = rows["start_s"], rows["end_s"]
    w_dram, w_hit = _fetch_weights(rows, grid_of, r0, c0)

    states = {n: np.zeros((len(times_s),) + grids.shapes[n], np.int8) for n in names}
    written = {n: np.zeros(grids.shapes[n], np.int8) for n in names}
    done_store = np.zeros(len(rows), bool)
    prev = -np.inf
    for f, ft in enumerate(times_s.tolist()):
        newly = stores & (ends <= ft) & ~done_store
        for i in np.flatnonzero(newly).tolist():
            written[names[grid_of[i]]][r0[i] : r1[i], c0[i] : c1[i]] = 1
        done_store |= newly
        z = {n: written[n].copy() for n in names}
        held = loads & (ends <= ft) & (held_until > ft)
        moving = (starts <= ft) & (ends > prev)  # in flight at any time since the last frame
        for i in np.flatnonzero(held).tolist():
            z[names[grid_of[i]]][r0[i] : r1[i], c0[i] : c1[i]] = 2
        # a tile in flight shows how most of the copies asked for together travel: one CTA's
        # DRAM fill and seven cohort-mates' L2 hits on that tile show as an L2 hit
        via = {n: np.zeros(grids.shapes[n] + (2,)) for n in names}
        for i in np.flatnonzero(moving).tolist():
            via[names[grid_of[i]]][r0[i] : r1[i], c0[i] : c1[i]] += (w_dram[i], w_hit[i])
        for n in names:
            dram, hit = via[n][..., 0], via[n][..., 1]
            z[n][(dram > 0) & (dram >= hit)] = 3
            z[n][hit > dram] = 4
            states[n][f] = z[n]
        prev = ft

    kernels = tuple(k.name for k in result.kernels)
    running = []
    for ft in times_s.tolist():
        if ft >= result.time_s:
            running.append("done")
            continue
        now = [k.name for k in result.kernels if k.start_s <= ft < k.end_s]
        running.append(now[0] if now else "")
    return SideFrames(
        grids,
        times_s,
        states,
        running,
        totals["hbm"],
        totals["dram"],
        totals["l2"],
        totals["trips"],
        _sram_on_sm0(t, result, times_s),
        result.time_s,
        kernels,
        plan.hardware.sram_bytes_per_sm,
    )


def _fetch_weights(rows, grid_of, r0, c0) -> tuple[np.ndarray, np.ndarray]:
    """Per transfer: the copies to or from DRAM and the copies served by L2 among all the
    transfers of the same tile issued at the same moment (CTAs of a cohort ask together)."""
    reads = (rows["op"] == OP_LOAD) | (rows["op"] == OP_ATOMIC)
    hit = np.where(reads, rows["l2_hits"], 0).astype(np.float64)
    dram = rows["ctas"] - hit
    keys = np.stack([grid_of, r0, c0, np.round(rows["start_s"] * 1e15)], axis=1)
    _, group = np.unique(keys, axis=0, return_inverse=True) if len(rows) else (None, grid_of)
    group = np.asarray(group).ravel()
    n = int(group.max()) + 1 if len(rows) else 0
    return np.bincount(group, dram, n)[group], np.bincount(group, hit, n)[group]


def _running_totals(transfers: np.ndarray, times_s: np.ndarray) -> dict[str, np.ndarray]:
    """HBM accesses, DRAM bytes, L2-hit bytes and trips of the transfers completed by each
    moment.

    A timeline row stands for `ctas` CTAs, `l2_hits` of which found the tile in L2; loads and
    atomic adds read, stores and atomic adds are charged as DRAM writes (as the engine does),
    so the last moment's totals are the engine's.
    """
    op, ctas = transfers["op"], transfers["ctas"].astype(np.float64)
    nbytes = transfers["bytes"].astype(np.float64)
    reads = (op == OP_LOAD) | (op == OP_ATOMIC)
    writes = op != OP_LOAD
    hit_frac = np.where(ctas > 0, transfers["l2_hits"] / np.maximum(ctas, 1), 0.0)
    l2 = np.where(reads, nbytes * hit_frac, 0.0)
    dram = np.where(reads, nbytes - l2, 0.0) + np.where(writes, nbytes, 0.0)
    order = np.argsort(transfers["end_s"], kind="stable")
    ends = transfers["end_s"][order]
    upto = np.searchsorted(ends, times_s, side="right")

    def cum(x):
        c = np.concatenate([[0.0], np.cumsum(x[order])])
        return c[upto]

    hbm = np.where(reads, nbytes, 0.0) + np.where(writes, nbytes, 0.0)
    return {"hbm": cum(hbm), "dram": cum(dram), "l2": cum(l2), "trips": cum(ctas)}


def _held_until(t: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """For each load: when its tile leaves SRAM (next load into that buffer, or CTA end)."""
    cta_end: dict[tuple[int, int], float] = {}
    for k, c, e in zip(t["kernel"].tolist(), t["cta"].tolist(), t["end_s"].tolist(), strict=True):
        cta_end[(k, c)] = max(cta_end.get((k, c), 0.0), e)
    out = np.zeros(len(rows))
    last: dict[tuple[int, int, int], int] = {}
    order = np.argsort(rows["start_s"], kind="stable")
    for i in order.tolist():
        r = rows[i]
        out[i] = cta_end[(int(r["kernel"]), int(r["cta"]))]
        if r["op"] != OP_LOAD:
            continue
        key = (int(r["kernel"]), int(r["cta"]), int(r["buffer"]))
        if key in last:
            out[last[key]] = min(out[last[key]], float(r["start_s"]))
        last[key] = i
    return out


def _sram_on_sm0(t: np.ndarray, result: EngineResult, times_s: np.ndarray) -> np.ndarray:
    """Bytes of SRAM the CTAs resident on SM 0 declare, at each moment."""
    footprint = [k["sram_bytes"] for k in result.meta["kernels"]]
    spans: dict[tuple[int, int], list] = {}
    for k, c, s, e, sm in zip(
        t["kernel"].tolist(),
        t["cta"].tolist(),
        t["start_s"].tolist(),
        t["end_s"].tolist(),
        t["sm"].tolist(),
        strict=True,
    ):
        if sm != 0:
            continue
        v = spans.setdefault((k, c), [s, e])
        v[0], v[1] = min(v[0], s), max(v[1], e)
    out = np.zeros(len(times_s))
    for (k, _c), (s, e) in spans.items():
        out += np.where((times_s >= s) & (times_s < e), footprint[k], 0)
    return out
