"""Stitching the statistics of exactly one pass over every partition from A-BSP rounds.

Under A-BSP a round that is stopped covers an uneven sample: the fastest partition scans all
its rows, a straggler only the first part of its unprocessed rows. An update rule that uses only
the round's statistics therefore settles at the optimum of a re-weighted objective (the rows of
fast partitions count more), not at the optimum of the real one.

Partitions are scanned cyclically and contiguously (a stopped partition resumes at its first
unprocessed row), so the pieces a partition hands back round after round tile its rows in
order. With the engine's split of a round's statistics at the partition's last row
(:attr:`~daskabsp.programs.base.PartitionStats.stats_before_wrap`), the pieces from row 0 to
the last row add up to *one complete pass*: every row exactly once. :class:`CycleLedger` keeps,
per partition, the sum of its last complete pass and of the pass in progress. The sum over the
partitions of their last complete passes covers every row of the data exactly once, which is
what an update rule needs to converge to the real optimum.

The pieces of one pass were computed at different parameters (the rounds they came from), so
the ledger stores them in a form that is additive across parameters: for Newton programs a
quadratic (Taylor) model of each piece's loss around the parameters it was taken at, for Lloyd
the per-cluster sums and counts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .base import PartitionStats


@dataclass
class RoundStats:
    """What a cycle-aware program's :meth:`combine_round` returns: the sum over the round's
    counted partitions and the per-partition pieces.

    Attributes
    ----------
    total : ndarray
        The statistics summed over the round's counted partitions.
    parts : list of PartitionStats
        Each counted partition's statistics and the rows they cover.
    rows : int
        Rows counted in the round.
    cache : dict
        Per-round scratch space (e.g. an analysis shared by ``objective`` and ``update``).
    """

    total: np.ndarray
    parts: list[PartitionStats]
    rows: int
    #: Per-round scratch space (e.g. an analysis shared by ``objective`` and ``update``).
    cache: dict[Any, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, parts: list[PartitionStats], empty: np.ndarray) -> RoundStats:
        total = np.sum([p.stats for p in parts], axis=0) if parts else empty
        return cls(total=total, parts=list(parts), rows=sum(p.rows for p in parts))


@dataclass(frozen=True)
class _Track:
    """The pass statistics of one partition."""

    size: int
    #: Rows ``[0, open_rows)`` of the pass in progress are in ``open``; None: the pass in
    #: progress did not start at row 0 (its pieces cannot make a complete pass).
    open_rows: int | None = 0
    open: np.ndarray | None = None
    open_since: int = 0
    done: np.ndarray | None = None
    #: Oldest round whose statistics are in ``done``.
    done_since: int = -1


def _extend(t: _Track, start: int, rows: int, model: np.ndarray, rnd: int) -> _Track:
    """Add the piece ``[start, start + rows)`` (no wrap) to the pass in progress."""
    if start == 0:
        return replace(t, open_rows=rows, open=model, open_since=rnd)
    if t.open_rows == start and t.open is not None:
        return replace(t, open_rows=start + rows, open=t.open + model)
    return replace(t, open_rows=None, open=None)


@dataclass(frozen=True)
class CycleLedger:
    """Per partition: the statistics of its last complete pass and of the pass in progress.

    The ledger is immutable: :meth:`add` returns a new ledger, so a program can evaluate a
    round (e.g. its objective) before committing it to its state.

    Attributes
    ----------
    tracks : tuple of (int, track) pairs
        Per partition index, its pieces of the last complete pass and of the pass in
        progress (internal; build a ledger empty and :meth:`add` rounds to it).
    """

    tracks: tuple[tuple[int, _Track], ...] = ()

    def _get(self) -> dict[int, _Track]:
        return dict(self.tracks)

    def add(
        self,
        pieces: Iterable[PartitionStats],
        as_model: Callable[[np.ndarray], np.ndarray],
        rnd: int,
    ) -> CycleLedger:
        """Return the ledger with the round ``rnd``'s pieces added.

        ``as_model`` turns a piece's statistics into their additive form (e.g. a Taylor model
        at the round's parameters).
        """
        tracks = self._get()
        for ps in pieces:
            if ps.rows <= 0:
                continue
            t = tracks.get(ps.partition) or _Track(size=ps.size)
            n, c = ps.size, ps.start
            head = ps.stats_before_wrap
            if head is None:
                t = _extend(t, c, ps.rows, as_model(ps.stats), rnd)
            else:
                # The scan reached row n - 1 and went on from row 0: [c, n) closes a pass.
                t = _extend(t, c, n - c, as_model(head), rnd)
                if t.open_rows == n and t.open is not None:
                    t = replace(t, done=t.open, done_since=t.open_since)
                tail = c + ps.rows - n
                if tail > 0:
                    t = replace(t, open_rows=tail, open=as_model(ps.stats - head),
                                open_since=rnd)
                else:
                    t = replace(t, open_rows=0, open=None, open_since=rnd)
            tracks[ps.partition] = t
        return CycleLedger(tuple(sorted(tracks.items())))

    def complete(self, n_rows: int) -> tuple[np.ndarray, int] | None:
        """The sum of every partition's last complete pass and the oldest round in it.

        None while some partition has not completed a pass yet (the partitions' passes must
        cover ``n_rows`` rows).
        """
        tracks = self._get()
        covered = sum(t.size for t in tracks.values() if t.done is not None)
        if covered != n_rows or not tracks:
            return None
        total = sum(t.done for t in tracks.values())
        return total, min(t.done_since for t in tracks.values())

    def reset(self) -> CycleLedger:
        """An empty ledger (e.g. when the function being modelled changes)."""
        return CycleLedger()
