"""Per-partition bookkeeping of a fit: where each partition's scan starts, how it is chunked,
and how long it went without being counted (pure, no Dask)."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..extension import PartialResult
from ..policies import advance


@dataclass
class PartitionBook:
    """The state the fit keeps per partition between rounds.

    Attributes
    ----------
    sizes : tuple of int
        Rows per partition.
    quotas : list of int
        Rows each partition should scan per round (the ``quota`` of the fit).
    cursor : list of int
        Row each partition's next scan starts at.
    chunk_rows : list of int or None
        Rows per chunk of each partition's scan (None: calibrate with a probe).
    staleness : list of int
        Rounds since each partition's statistics last counted (most stale submitted first).
    rate : list of float or None
        Rows per second of each partition's last own scan (None: not measured yet).
    recent : list of deque
        Rows per second of each partition's last :data:`RECENT` own scans, its first scan
        left out (it pays the worker's cold start: measured, 5-10x the next one's time).
    scans : list of int
        Own scans measured per partition.
    """

    sizes: tuple[int, ...]
    quotas: list[int]
    cursor: list[int] = field(default_factory=list)
    chunk_rows: list[int | None] = field(default_factory=list)
    staleness: list[int] = field(default_factory=list)
    rate: list[float | None] = field(default_factory=list)
    recent: list[deque] = field(default_factory=list)
    scans: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.sizes)
        self.cursor = self.cursor or [0] * n
        self.chunk_rows = self.chunk_rows or [None] * n
        self.staleness = self.staleness or [0] * n
        self.rate = self.rate or [None] * n
        self.recent = self.recent or [deque(maxlen=RECENT) for _ in range(n)]
        self.scans = self.scans or [0] * n

    def __len__(self) -> int:
        return len(self.sizes)

    def steady_rate(self) -> list[float | None]:
        """Each partition's best rate over its last :data:`RECENT` own scans after its
        first (None: not measured yet): a worker slowed for one round by a busy core or its
        cold start does not look like a straggler; one slow round after round does."""
        return [max(r) if r else None for r in self.recent]

    def order(self) -> list[int]:
        """The partitions in submission order: those that got nothing last go first (workers
        start tasks in the order they arrive, so a partition queued behind another would
        otherwise starve)."""
        return sorted(range(len(self)), key=lambda p: -self.staleness[p])

    def leftover_start(self, p: int, rows: int) -> int:
        """The row after the first ``rows`` rows of partition ``p``'s scan this round."""
        return advance(self.cursor[p], rows, self.sizes[p])

    def record(self, next_cursor: Sequence[int], counted: Sequence[bool],
               owned: Sequence[PartialResult], *, probe_rows: int,
               chunk_target: float) -> None:
        """Advance after a round: each partition resumes at ``next_cursor[p]``; its
        staleness resets if it ``counted``; ``owned[p]``, its own task's result, sizes its
        chunks from the speed it showed."""
        for p, own in enumerate(owned):
            self.cursor[p] = int(next_cursor[p])
            self.staleness[p] = 0 if counted[p] else self.staleness[p] + 1
            if own.rows > 0 and own.compute_seconds > 0:
                self.rate[p] = own.rows / own.compute_seconds
                self.scans[p] += 1
                if self.scans[p] > 1:
                    self.recent[p].append(self.rate[p])
            if own.chunk_rows and own.rows >= 4 * own.chunk_rows:
                # Refine from the whole scan's speed (the probe chunk is noisy). Not below the
                # probe's rows: a chunk's fixed cost (its share of statistics the size of the
                # model) would otherwise shrink chunks round after round (measured: 2 000
                # sparse rows x 200 000 features went from 2.4 s to 21 s a round as chunks
                # fell towards one row).
                self.chunk_rows[p] = max(min(probe_rows, self.sizes[p]),
                                         int(own.rows * chunk_target
                                             / max(own.compute_seconds, 1e-9)))
            elif own.chunk_rows:
                self.chunk_rows[p] = own.chunk_rows


#: Own scans per partition that :meth:`PartitionBook.steady_rate` takes the median of.
RECENT = 3


def quotas_of(quota: int | float | None, sizes: Sequence[int]) -> list[int]:
    """Each partition's rows per round for the fit's ``quota``: an int (rows, at most the
    partition), a float in (0, 1] (a fraction of the partition) or None (all of it)."""
    if quota is None:
        return list(sizes)
    if isinstance(quota, float):
        return [max(1, round(quota * n)) for n in sizes]
    return [min(int(quota), n) for n in sizes]
