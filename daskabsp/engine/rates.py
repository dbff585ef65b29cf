"""How fast each worker scans, how costly each partition's rows are, and when a copy pays.

A partition's scan takes ``rows x cost[p] / speed[w]`` seconds: ``cost`` is what a row of the
partition costs (dense rows, many non-zeros), ``speed`` what the worker delivers (its CPU
share, an emulated slowdown). The two cannot be told apart while each partition is only ever
scanned by its own worker, so until a worker has scanned two partitions in a round (its own
and a helper's piece, or two of its own) half of a partition's gap to the round's typical
rate is put on the partition and half on its worker. Once it has, the ratio of the two rates
is the ratio of the partitions' costs, whatever the worker's speed.

A copy of a partition, for helpers, costs its bytes once; not having one costs, in every
round, the time its owner alone spends on what it left. :class:`Rates` charges that time to
the partition as rent and says to copy once the rent paid exceeds the copy's price (the
ski-rental rule: never more than twice what knowing the fit's length in advance would cost).

Bookkeeping only (no Dask).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

#: Cross observations a partition's cost is averaged over (older ones fade out).
_MEMORY = 8


class Rates:
    """A fit's scan rates: worker speeds as last measured, partition costs as learnt.

    Parameters
    ----------
    n_partitions : int
        Partitions of the fit.
    """

    def __init__(self, n_partitions: int) -> None:
        self.log_cost: list[float | None] = [None] * n_partitions  # learnt (anchored)
        self._seen = [0] * n_partitions  # cross observations behind log_cost
        self._guess = [0.0] * n_partitions  # half the partition's gap, while not learnt
        self.speed: dict[str, float] = {}  # cost-1 rows per second per thread
        self.own: list[float | None] = [None] * n_partitions  # this round: rows/s at its owner
        self.rent = [0.0] * n_partitions

    def cost(self, p: int) -> float:
        """Relative cost of a row of partition ``p``."""
        lc = self.log_cost[p]
        return math.exp(self._guess[p] if lc is None else lc)

    def worker_speed(self, worker: str) -> float:
        """Rows of cost 1 per second per thread ``worker`` scans (not measured yet: the
        median of the others)."""
        s = self.speed.get(worker)
        return s if s is not None else (_median(list(self.speed.values())) or 1.0)

    def worker_speeds(self, workers: Iterable[str]) -> dict[str, float]:
        """:meth:`worker_speed` of each of ``workers``, the median of the measured speeds
        (for those not measured) taken once rather than per worker."""
        unmeasured = _median(list(self.speed.values())) or 1.0
        return {w: self.speed.get(w, unmeasured) for w in workers}

    def rate(self, worker: str, p: int) -> float:
        """Rows of partition ``p`` per second per thread that ``worker`` is expected to scan."""
        return self.worker_speed(worker) / self.cost(p)

    def observe(self, results: Sequence[Any]) -> None:
        """Take in a round's own scans (``results[p]`` of partition ``p``, with ``worker``,
        ``rows`` and ``compute_seconds``): the owners' rates, the partitions' cost guesses,
        the workers' speeds now, and cross observations of workers with several partitions."""
        scans = _scans(enumerate(results))
        self.own = [None] * len(self.own)
        for p, _, v in scans:
            self.own[p] = v
        if not scans:
            return
        typical = _median([math.log(v) for _, _, v in scans])
        for p, _, v in scans:
            self._guess[p] = (typical - math.log(v)) / 2
        self._cross(scans)
        by_worker: dict[str, list[float]] = {}
        for p, w, v in scans:
            by_worker.setdefault(w, []).append(v * self.cost(p))
        for w, vs in by_worker.items():
            self.speed[w] = _median(vs)

    def observe_pieces(self, own: Sequence[Any], pieces: Iterable[tuple[int, Any]]) -> None:
        """Take in a helper phase: ``pieces`` pairs a partition with its piece's result
        (``worker``, ``rows``, ``compute_seconds``); ``own`` are the round's own scans, whose
        rates on the same workers make each piece a cross observation."""
        self._cross(_scans(enumerate(own)) + _scans(pieces))

    def _cross(self, scans: list[tuple[int, str, float]]) -> None:
        """Relative costs from workers that scanned several partitions: each is compared
        with the worker's first scan (its own partition, when it scanned one), the anchor."""
        by_worker: dict[str, list[tuple[int, float]]] = {}
        for p, w, v in scans:
            by_worker.setdefault(w, []).append((p, v))
        for seen in by_worker.values():
            parts = {p for p, _ in seen}
            if len(parts) < 2:
                continue
            anchor, va = seen[0]
            if self.log_cost[anchor] is None:
                self.log_cost[anchor] = self._guess[anchor]
            base = self.log_cost[anchor]
            for p, v in seen[1:]:
                if p == anchor:
                    continue
                sample = base + math.log(va / v)
                n = min(self._seen[p], _MEMORY - 1)
                old = self.log_cost[p]
                self.log_cost[p] = sample if old is None else (n * old + sample) / (n + 1)
                self._seen[p] += 1

    def charge(self, left: dict[int, int], owner: Sequence[str], workers: Iterable[str], *,
               slack: float = 0.0, blocked: Iterable[str] = ()) -> dict[int, float]:
        """Charge a round's rent and return, for each partition in ``left`` (partition ->
        rows its owner left), the rent it has paid so far, in seconds.

        Alone, each owner would scan what its partitions left in ``T[w]`` seconds; shared
        among ``workers`` by speed, everything would be done by ``H``. What an owner needs
        beyond ``H + slack`` is the round's rent, charged to its partitions in proportion to
        their time (``slack`` keeps the noise of a round's few, short scans from renting
        copies for owners that are not slower). A partition whose owner is ``blocked``
        (silent, or its threads held by other work) pays infinite rent: a copy is its only
        way forward.
        """
        need = {p: rows / self.rate(owner[p], p) for p, rows in left.items() if rows > 0}
        alone: dict[str, float] = {}
        for p, t in need.items():
            alone[owner[p]] = alone.get(owner[p], 0.0) + t
        capacity = sum(self.worker_speed(w) for w in set(workers) | set(alone))
        work = sum(rows * self.cost(p) for p, rows in left.items() if rows > 0)
        horizon = work / capacity if capacity > 0 else 0.0
        for p, t in need.items():
            w = owner[p]
            self.rent[p] += max(alone[w] - horizon - slack, 0.0) * t / alone[w]
        blocked = set(blocked)
        return {p: (math.inf if owner[p] in blocked else self.rent[p]) for p in left}


def _scans(results: Iterable[tuple[int, Any]]) -> list[tuple[int, str, float]]:
    """``(partition, worker, rows per second)`` of the results that scanned something."""
    return [(p, r.worker, r.rows / r.compute_seconds) for p, r in results
            if r.rows > 0 and r.compute_seconds > 0 and r.worker]


def _median(values: list[float]) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    m = len(s) // 2
    return s[m] if len(s) % 2 else (s[m - 1] + s[m]) / 2
