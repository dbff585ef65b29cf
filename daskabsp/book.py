"""Per-partition bookkeeping of a fit: where each partition's scan starts, how it is chunked,
which worker it is asked to run on, and how long it went without being counted."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from . import cursors
from .policies import Policy
from .runtime import PartialResult


@dataclass
class PartitionBook:
    """The state the driver keeps per partition between rounds.

    Attributes
    ----------
    sizes : tuple of int
        Rows per partition.
    quotas : list of int
        Rows each partition should scan per round (the ``quota`` of the fit).
    owner : list of str
        Worker each partition's own task is asked to run on.
    cursor : list of int
        Row each partition's next scan starts at.
    chunk_rows : list of int or None
        Rows per chunk of each partition's scan (None: calibrate with a probe).
    staleness : list of int
        Rounds since each partition's statistics last counted (most stale submitted first).
    """

    sizes: tuple[int, ...]
    quotas: list[int]
    owner: list[str]
    cursor: list[int] = field(default_factory=list)
    chunk_rows: list[int | None] = field(default_factory=list)
    staleness: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.sizes)
        self.cursor = self.cursor or [0] * n
        self.chunk_rows = self.chunk_rows or [None] * n
        self.staleness = self.staleness or [0] * n

    def __len__(self) -> int:
        return len(self.sizes)

    def round_quotas(self, full: bool) -> list[int]:
        """Each partition's quota this round: every row for a ``full`` round."""
        return list(self.sizes) if full else list(self.quotas)

    def order(self) -> list[int]:
        """The partitions in submission order: those that got nothing last go first (workers
        start tasks in the order they arrive, so a partition queued behind another would
        otherwise starve)."""
        return sorted(range(len(self)), key=lambda p: -self.staleness[p])

    def leftover_start(self, p: int, rows: int) -> int:
        """The row after the first ``rows`` rows of partition ``p``'s scan this round."""
        return cursors.advance(self.cursor[p], rows, self.sizes[p])

    def record(self, policy: Policy, results: list[PartialResult], owned: list[PartialResult],
               counted: list[bool], *, probe_rows: int, chunk_target: float) -> None:
        """Advance after a round: ``results`` are what each partition counted (its own scan
        and its helpers'), ``owned`` its own task's result (whose speed sizes its chunks)."""
        for p, (res, own) in enumerate(zip(results, owned, strict=True)):
            self.cursor[p] = policy.next_cursor(self.cursor[p], res.rows, self.sizes[p],
                                                finished=not res.stopped)
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
            self.staleness[p] = 0 if counted[p] else self.staleness[p] + 1


def balance(assignment: list[str | None], nthreads: dict[str, int]) -> list[str]:
    """Assign partitions to live workers in proportion to their threads, moving as few as
    possible: a partition stays on its worker unless that worker is gone or over its share."""
    total = sum(nthreads.values())
    n = len(assignment)
    cap = {w: math.ceil(n * t / total) for w, t in nthreads.items()}
    load: Counter[str] = Counter()
    out: list[str | None] = [None] * n
    for p, w in enumerate(assignment):
        if w in cap and load[w] < cap[w]:
            out[p] = w
            load[w] += 1
    for p in range(n):
        if out[p] is None:
            w = min(sorted(nthreads), key=lambda w: (load[w] / nthreads[w], load[w]))
            out[p] = w
            load[w] += 1
    return out  # type: ignore[return-value]
