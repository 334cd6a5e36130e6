"""Hit tables: what the L2 model answers for each access of a kernel, asked for by CTA."""

from __future__ import annotations

import numpy as np

from ..workload.arrays import ranges
from ..workload.work import KernelWork


class HitTable:
    """One kernel's L2 hits for any of its CTAs: computed rows for the CTAs of the waves that
    were computed, and the reference wave's rows for a skipped CTA."""

    def __init__(self, kw: KernelWork, ctas: np.ndarray, hits: np.ndarray, skip=None):
        """`ctas`: computed CTAs, sorted; `hits`: their accesses' hits, CTA by CTA.
        `skip`: None, or per skipped stretch (first, end, ref_first, period) CTAs: CTA c in
        [first, end) behaves as ref_first + (c - ref_first) % period."""
        self.kw = kw
        self.ctas = ctas
        self.hits = hits
        counts = kw.transfers(ctas)
        self.starts = np.cumsum(counts) - counts
        self.skip = skip
        self._skip_cols = skip_columns(skip)
        # the computed CTAs a run of CTAs (each the run's first plus its place): their place
        # among them is a subtraction, not a search (the standard algorithm's kernels decide
        # every CTA of thousands of waves)
        self._first = (
            int(ctas[0]) if len(ctas) and int(ctas[-1] - ctas[0]) + 1 == len(ctas) else None
        )
        # where each of a block of consecutive CTAs' hits lie (first, length): a stretched
        # kernel asks for one CTA at a time, tens of thousands of times (`counts`)
        self._span_first, self._span_starts, self._span_lens = 0, [], []

    def referenced(self, ctas: np.ndarray) -> np.ndarray:
        """Each CTA, or for a skipped one the CTA of its reference wave whose hits it takes."""
        return referenced(self._skip_cols, ctas)

    def _rows(self, members: np.ndarray) -> np.ndarray:
        """Positions in `hits` of the members' accesses, (m, n) for members of one template."""
        ref = self.referenced(members)
        j = ref - self._first if self._first is not None else np.searchsorted(self.ctas, ref)
        n = int(self.kw.transfers(members[:1])[0]) if len(members) else 0
        return self.starts[j][:, None] + np.arange(n)[None, :]

    def counts(self, members: np.ndarray) -> np.ndarray:
        """Per transfer, how many of the members (CTAs of one template) hit."""
        if len(members) == 1:  # one CTA: its hits are a slice
            first, n = self._span(int(members[0]))
            return self.hits[first : first + n].astype(np.int64)
        return self.hits[self._rows(members)].sum(axis=0)

    def _span(self, cta: int, block: int = 4096) -> tuple[int, int]:
        """(first, length) of one CTA's hits in `hits`, looked up for `block` CTAs at once."""
        i = cta - self._span_first
        if not 0 <= i < len(self._span_starts):
            ctas = np.arange(cta, min(cta + block, self.kw.n_ctas), dtype=np.int64)
            ref = self.referenced(ctas)
            j = ref - self._first if self._first is not None else np.searchsorted(self.ctas, ref)
            self._span_first, i = cta, 0
            self._span_starts = self.starts[j].tolist()
            self._span_lens = self.kw.transfers(ctas).tolist()
        return self._span_starts[i], self._span_lens[i]

    def wave_counts(self, slots: int, chunk: int = 1 << 20):
        """`counts` of every wave of a one-template kernel, in order: (first CTA, CTAs, counts)
        each. A skipped wave that takes a computed wave's hits CTA for CTA takes its counts;
        the others are counted from one lookup per `chunk` accesses (a kernel of small CTAs
        runs thousands of waves: the standard algorithm's mask, 3,972 at 16k tokens, batch 4
        x 16 heads; the FlashAttention paper's configuration 7,070 in all, most skipped)."""
        n_ctas = self.kw.n_ctas
        n = int(self.kw.transfers(np.arange(1))[0]) if n_ctas else 0
        firsts = np.arange(0, n_ctas, max(1, slots), dtype=np.int64)
        sizes = np.minimum(slots, n_ctas - firsts)
        ref = self.referenced(firsts)
        taken = (ref != firsts) & (self.referenced(firsts + sizes - 1) - ref == sizes - 1)
        own = np.flatnonzero(~taken | ~np.isin(ref, firsts[~taken]))
        computed: dict[int, tuple[int, np.ndarray]] = {}
        per = max(1, chunk // max(1, n * slots))  # whole waves per lookup
        for a in range(0, len(own), per):
            idx = own[a : a + per]
            hit = self.hits[self._rows(ranges(firsts[idx], sizes[idx]))]
            at = np.concatenate([[0], np.cumsum(sizes[idx])[:-1]])
            sums = np.add.reduceat(hit, at, axis=0, dtype=np.int64)
            for w, row in zip(idx.tolist(), sums, strict=True):
                computed[int(firsts[w])] = (int(sizes[w]), row)
        for w in range(len(firsts)):
            first, m = int(firsts[w]), int(sizes[w])
            size, row = computed.get(first) or computed.get(int(ref[w]), (None, None))
            if size != m:  # a skipped wave whose reference is not a computed wave of its size
                row = self.counts(np.arange(first, first + m))
            yield first, m, row

    def rows(self, members: np.ndarray) -> np.ndarray:
        """(m, n) bool: each member's own hits."""
        return self.hits[self._rows(members)]

    def every_access(self) -> np.ndarray:
        """A bool per access of the kernel, in its access order (what the plain LRU answers;
        for comparisons: it builds the arrays of every access that skipping avoids)."""
        kw = self.kw
        out = np.zeros(len(kw.acc_op), dtype=bool)
        starts = np.searchsorted(kw.acc_cta, np.arange(kw.n_ctas + 1))
        for t in range(len(kw.templates)):
            members = np.flatnonzero(kw.cta_template == t)
            if len(members):
                lengths = starts[members + 1] - starts[members]
                out[ranges(starts[members], lengths)] = self.rows(members).ravel()
        return out


def skip_columns(skip) -> np.ndarray:
    """HitTable's skipped stretches (first, end, ref, period) as four columns, by first CTA:
    they never overlap, and a skipped CTA's reference lies before its stretch's first skipped
    CTA, outside every stretch."""
    return np.array(sorted(skip or ()), dtype=np.int64).reshape(-1, 4).T


def referenced(columns: np.ndarray, ctas: np.ndarray) -> np.ndarray:
    """Each CTA, or for one in a skipped stretch (skip_columns) the CTA of its reference wave
    whose hits it takes: one lookup of its stretch (a kernel skipped by local periods has one
    per run of the launch order, dozens)."""
    c = np.asarray(ctas, dtype=np.int64)
    first, end, ref, period = columns
    if not len(first):
        return c
    at = np.maximum(np.searchsorted(first, c, side="right") - 1, 0)
    inside = (c >= first[at]) & (c < end[at])
    return np.where(inside, ref[at] + (c - ref[at]) % period[at], c)


def full_table(kw: KernelWork, part, flat: np.ndarray) -> HitTable:
    ctas, _wave, order = part
    hits = np.empty(len(flat), dtype=bool)
    hits[order] = flat
    return HitTable(kw, ctas, hits)
