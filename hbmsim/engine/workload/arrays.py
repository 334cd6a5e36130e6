"""NumPy helpers the workload builders and the L2 model share: runs of consecutive integers,
distinct values, and tile keys viewed as single 16-byte elements.
"""

from __future__ import annotations

import numpy as np


def ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenated aranges: starts[i], ..., starts[i] + counts[i] - 1 for each i."""
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(counts)
    shift = np.repeat(np.asarray(starts, dtype=np.int64) - (ends - counts), counts)
    return shift + np.arange(total, dtype=np.int64)


def distinct(values: np.ndarray) -> np.ndarray:
    """np.unique(values) of a 1-D int array, by a sort: numpy 2's np.unique without indices
    goes through a hash table, 5-10x slower than sorting here (measured at 10 k to 3 M
    ints), and the streams' arrays it dedupes are millions long."""
    out = np.sort(np.asarray(values).ravel())
    if len(out) > 1:
        out = out[np.concatenate([[True], out[1:] != out[:-1]])]
    return out


# A tile key (two int64s) as one 16-byte element: numpy moves rows of an (n, 2) array by
# fancy indexing four times slower than 16-byte elements of the same bytes
KEY_DTYPE = np.dtype((np.void, 16))


def key_elements(keys: np.ndarray) -> np.ndarray:
    """(..., 2) int64 tile keys (C-contiguous) as a view of 16-byte elements, shape (...):
    what numpy moves fastest (a transpose or a take of them, too, faster than of the int64
    pairs)."""
    return keys.view(KEY_DTYPE).reshape(keys.shape[:-1])


def put_keys(out: np.ndarray, at: np.ndarray, keys: np.ndarray) -> None:
    """out[at] = keys for (n, 2) int64 tile keys (C-contiguous), a key at a time."""
    key_elements(out)[at] = key_elements(np.ascontiguousarray(keys))
