"""The round plan and its settlement: what a round asks, and what its results count for.

This is where the sync model decides (pure, no Dask): :func:`plan_round` turns the policy,
the book's quotas and the program's wish for a full round into a :class:`RoundPlan` (the
quorum that ends the round, each partition's quota, whether helpers cover the leftovers);
:func:`settle` turns a round's merged outcomes into a :class:`Settlement` (which statistics
count, where each partition resumes, the counted rows per worker).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..policies import Policy
from ..programs.base import PartitionStats


@dataclass(frozen=True, slots=True)
class RoundPlan:
    """What one round asks of the partitions.

    Attributes
    ----------
    quorum : int
        Partitions (or workers, see ``unit``) that must finish their quota to stop the
        others (0: nobody is stopped).
    quotas : tuple of int
        Rows each partition's own task is asked to scan.
    full : bool
        The program asked for every row at these parameters.
    helped : bool
        What stopped partitions leave of their quotas is scanned by helpers in this round.
    unit : {"partitions", "workers"}
        What the quorum counts.
    grace : tuple of int
        Per partition, the rows a stopped task may have left and still finish.
    copies : bool
        Copies of the partitions whose workers fall behind are made (as in a helped round),
        though this round has no helper phase: for the helped rounds to come.
    patience : float
        Once the quorum has finished, the others are stopped only after a further
        ``patience`` times the quorum's time (0: at once; see :class:`~daskabsp.ABSP`).
    """

    quorum: int
    quotas: tuple[int, ...]
    full: bool
    helped: bool
    unit: str = "partitions"
    grace: tuple[int, ...] = ()
    copies: bool = False
    patience: float = 0.0


def expected_scans(quotas: Sequence[int], rates: Sequence[float | None],
                   owner: Sequence[str]) -> tuple[float, ...] | None:
    """How long each worker is expected to scan this round, relative to the least busy one
    (ratios, ascending from 1, from each partition's measured rate, e.g.
    :meth:`~daskabsp.engine.book.PartitionBook.steady_rate`); None while a rate is
    unknown."""
    if any(r is None or r <= 0 for r in rates):
        return None
    busy: dict[str, float] = {}
    for q, r, w in zip(quotas, rates, owner, strict=True):
        busy[w] = busy.get(w, 0.0) + q / r
    low = min(busy.values())
    return tuple(sorted(b / low for b in busy.values())) if low > 0 else None


def plan_round(policy: Policy, quotas: Sequence[int], sizes: Sequence[int], *, full: bool,
               helpers: bool, expected: Sequence[float] | None = None,
               help_wanted: bool = True,
               copied: Sequence[bool] | None = None) -> RoundPlan:
    """The plan of a round under ``policy``.

    ``quotas`` are the fit's per-partition quotas, ``sizes`` the partitions' rows; ``full``
    whether the program asks for every row this round, ``help_wanted`` whether it wants
    helpers to cover what stopped partitions leave otherwise
    (:meth:`~daskabsp.programs.Program.help_round`); ``helpers`` whether copies for helpers
    may be made at all (``daskabsp.replicas`` > 0); ``expected`` the workers' scans expected
    this round (:func:`expected_scans`). A full round is helped when the policy is
    (stopped at the quorum, the helpers covering the rest), and run as BSP otherwise: every
    partition scans all its rows, nobody stopped. A round the program does not want helped
    is A-BSP as published: one wave, the partial rows counted. A round whose workers are
    expected to finish within the policy's grace of each other is not stopped either
    without patience: there is no straggler to leave behind, and a stop would only cut rows
    short (with patience, it keeps its quorum and waits). The grace (a
    stopped partition with at most that share of its quota left finishes it) applies only
    while at least half the workers are expected within it of the least busy, or nothing is
    measured yet. In a full round, a partition without a copy elsewhere (``copied[p]``
    False) is not cut short once it has started: its helpers could only be its own worker,
    scanning the same rows after a stop and a second task (its grace is then its quota less
    one row, so a task still queued at the stop still returns at once).

    A stopped round waits the policy's patience past its quorum unless a worker is expected
    to take longer than ``1 + patience`` times the least busy one: no known straggler, no
    stop at the quorum's time (a round whose tasks finish a little apart then costs what
    BSP's does), while a known straggler is left behind at once.
    """
    quorum = policy.round_quorum(len(sizes)) if policy.stops else 0
    full = full and quorum > 0  # with quorum 0 every round covers every quota anyway
    within = 1 + policy.grace
    balanced = policy.grace > 0 and expected is not None and max(expected) <= within
    helped = helpers and policy.helped
    if full and (balanced or not helped):
        return RoundPlan(0, tuple(sizes), True, False)
    if not quorum or (balanced and not policy.patience):
        return RoundPlan(0, tuple(quotas), False, False)
    # The grace spares rows that are about to be counted, at the price of every worker
    # waiting up to its share of a scan: worth it while most workers are near the end with
    # the first (one straggler among them), not under a heavy tail of task times, where a
    # quarter of 100 workers are within 10% of the first each round.
    near = expected is None or 2 * sum(e <= within for e in expected) >= len(expected)
    grace = tuple(int(policy.grace * q) if near else 0 for q in quotas)
    if full and helped and copied is not None:
        grace = tuple(g if c else max(q - 1, 0)
                      for g, q, c in zip(grace, quotas, copied, strict=True))
    straggler = expected is not None and max(expected) > 1 + policy.patience
    return RoundPlan(quorum, tuple(quotas), full, helped and (full or help_wanted),
                     policy.quorum_unit, grace, copies=helped,
                     patience=0.0 if straggler else policy.patience)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one partition's round came to: its own scan merged with its helpers' pieces.

    Attributes
    ----------
    rows : int
        Rows covered from the partition's cursor, without a gap.
    stats : object
        Their statistics (None when ``rows`` is 0).
    stats_before_wrap : object
        For programs with ``split_at_wrap``: the statistics up to the partition's last row
        when the rows wrapped; None otherwise.
    stopped : bool
        The round's stop ended the partition's scan before its quota was covered.
    scanned : int
        Of ``rows``, those the partition's own task scanned (the rest: ``rows - scanned``,
        helpers).
    worker : str
        The worker that ran the partition's own task ("" if it ran nowhere).
    """

    rows: int
    stats: Any
    stats_before_wrap: Any
    stopped: bool
    scanned: int
    worker: str

    @classmethod
    def own(cls, result: Any) -> Outcome:
        """The outcome of a partition scanned by its own task alone (a
        :class:`~daskabsp.extension.PartialResult`)."""
        return cls(result.rows, result.stats, result.stats_before_wrap, result.stopped,
                   result.rows, result.worker)

    @property
    def helped(self) -> int:
        """Rows of the partition that helpers scanned and that count."""
        return self.rows - self.scanned


@dataclass(frozen=True, slots=True)
class Settlement:
    """What a round's outcomes count for.

    Attributes
    ----------
    counted : tuple of bool
        Per partition, whether its statistics are used in the update.
    pieces : list of PartitionStats
        The counted statistics, in partition order, with the rows they cover.
    rows : int
        Rows counted in all (the update's ``n_rows``).
    cursors : tuple of int
        Per partition, where its next round starts.
    worker_rows : dict
        Counted rows per worker: each partition's own scan on its worker, and the helpers'
        pieces on theirs; adds up to ``rows``. Every worker in ``workers`` is listed, with 0
        if it scanned nothing that counts.
    """

    counted: tuple[bool, ...]
    pieces: list[PartitionStats]
    rows: int
    cursors: tuple[int, ...]
    worker_rows: dict[str, int]


def settle(policy: Policy, cursors: Sequence[int], sizes: Sequence[int],
           outcomes: Sequence[Outcome], helper_rows: Mapping[str, int],
           workers: Iterable[str] = ()) -> Settlement:
    """Settle a round: ``outcomes[p]`` of partition ``p`` (which started at ``cursors[p]``),
    ``helper_rows`` the counted rows each helper scanned (of the partitions that count).

    A partition counts when it covered rows and the policy keeps partial statistics or the
    partition was not stopped (``ABSP(on_quorum="drop")`` discards a stopped partition's
    rows, and its cursor stays).
    """
    counted = tuple(o.rows > 0 and (policy.keep_partial or not o.stopped) for o in outcomes)
    pieces = [PartitionStats(p, cursors[p], o.rows, sizes[p], o.stats, o.stats_before_wrap)
              for p, (o, c) in enumerate(zip(outcomes, counted, strict=True)) if c]
    worker_rows: Counter[str] = Counter(dict.fromkeys(workers, 0))
    worker_rows.update(helper_rows)
    for o, c in zip(outcomes, counted, strict=True):
        if c and o.scanned:
            worker_rows[o.worker] += o.scanned
    nxt = tuple(policy.next_cursor(cursors[p], o.rows if c else 0, sizes[p],
                                   finished=not o.stopped)
                for p, (o, c) in enumerate(zip(outcomes, counted, strict=True)))
    return Settlement(counted, pieces, sum(ps.rows for ps in pieces), nxt, dict(worker_rows))
