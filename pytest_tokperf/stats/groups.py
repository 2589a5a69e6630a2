"""Samples grouped by version, one flat array: per-version figures are a few numpy calls."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Groups:
    """Log samples of consecutive versions: ``x`` flat, ``sizes`` per version (each >= 1)."""

    x: np.ndarray
    sizes: tuple[int, ...]

    @classmethod
    def of(cls, arrays: Sequence[np.ndarray]) -> Groups:
        x = np.concatenate(arrays) if arrays else np.zeros(0)
        return cls(x, tuple(len(a) for a in arrays))

    @property
    def ids(self) -> np.ndarray:
        return _layout(self.sizes)[0]

    def arrays(self) -> list[np.ndarray]:
        return np.split(self.x, _layout(self.sizes)[1][1:])

    def means(self) -> np.ndarray:
        means: np.ndarray = np.bincount(self.ids, self.x, len(self.sizes)) / np.array(
            self.sizes, dtype=float)
        return means

    def medians(self) -> np.ndarray:
        ids, starts, _, _ = _layout(self.sizes)
        ordered = self.x[np.lexsort((self.x, ids))]
        n = np.array(self.sizes, dtype=np.int64)
        medians: np.ndarray = (ordered[starts + (n - 1) // 2] + ordered[starts + n // 2]) / 2
        return medians

    def pair_differences(self) -> np.ndarray:
        """``|x_i - x_j|`` over every pair of samples of the same version."""
        _, _, i, j = _layout(self.sizes)
        diffs: np.ndarray = np.abs(self.x[i] - self.x[j])
        return diffs

    def keep(self, mask: np.ndarray) -> Groups:
        """The samples where ``mask`` is true; every version must keep one."""
        sizes = np.bincount(self.ids[mask], minlength=len(self.sizes))
        return Groups(self.x[mask], tuple(int(s) for s in sizes))


@functools.lru_cache(maxsize=512)
def _layout(sizes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Group id per sample, each group's first index, and the within-group pairs."""
    n = np.array(sizes, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(n)[:-1]]).astype(np.int64)
    ids = np.repeat(np.arange(len(sizes)), n)
    firsts, seconds = [], []
    for start, size in zip(starts.tolist(), sizes):
        a, b = np.triu_indices(size, k=1)
        firsts.append(a + start)
        seconds.append(b + start)
    empty = np.zeros(0, dtype=np.int64)
    i = np.concatenate(firsts) if firsts else empty
    j = np.concatenate(seconds) if seconds else empty
    return ids, starts, i, j
