"""The helper phase of an A-BSP round: the rows stopped partitions left, scanned elsewhere.

Once a round is stopped, what each stopped partition left of its quota is split (by
:func:`daskabsp.engine.coverage.plan`) among the workers holding a copy of it, in proportion to the
speed each showed, and scanned there in the same round; the pieces are merged with the
partitions' own scans (:func:`daskabsp.engine.coverage.merge`), so every row counts at most once.
Copies are made in the background once the time a partition's owner alone spends on what it
left has paid for them (:meth:`daskabsp.engine.rates.Rates.charge`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import config
from ..extension import PartialResult, RoundId
from . import coverage
from .book import PartitionBook
from .link import Link, idle_result
from .placement import Placement
from .plan import Outcome
from .rates import Rates

logger = logging.getLogger(__name__)


@dataclass
class Helped:
    """What a helper phase came to.

    Attributes
    ----------
    outcomes : list of Outcome
        Per partition, its own scan merged with the pieces that continue it.
    helper_rows : Counter
        Counted rows each helper scanned.
    silent : set of str
        Helpers given up on (they went silent): their pieces count nothing.
    """

    outcomes: list[Outcome]
    helper_rows: Counter = field(default_factory=Counter)
    silent: set[str] = field(default_factory=set)


class HelperPhase:
    """The helper phases of one fit, and the scan rates they are planned from.

    Parameters
    ----------
    n_partitions : int
        Partitions of the fit.
    rent_due : list of float
        Per partition, the seconds a copy of it is expected to take (the placement's
        :attr:`~daskabsp.engine.placement.Placement.copy_due`, which it keeps current as
        copies are timed).
    chunk_target : float
        Seconds of work per chunk of a piece's scan.
    combine : callable
        The program's :meth:`~daskabsp.programs.Program.combine`.
    """

    def __init__(self, n_partitions: int, rent_due: list[float], chunk_target: float,
                 combine: Callable[[list], Any]) -> None:
        self.rates = Rates(n_partitions)
        self.rent_due = rent_due
        self.chunk_target = chunk_target
        self.combine = combine

    def observe(self, owned: Sequence[PartialResult]) -> None:
        """Take in the round's own scans (speeds, costs)."""
        self.rates.observe(owned)

    def copy_stragglers(self, placement: Placement, owned: Sequence[PartialResult],
                        quotas: Sequence[int], threads: Mapping[str, int],
                        blocked: set[str]) -> None:
        """Start copying, in the background, each partition whose copy has paid for itself
        (see :meth:`Rates.charge`: the time its owner alone spent on what it left, summed over
        the rounds, exceeds the copy's time; at once for a partition whose owner is in
        ``blocked``: silent, or its threads held by other work) to a fast worker without one
        (:meth:`Placement.copy_target`: copies are spread), up to ``daskabsp.replicas``
        copies: from the next round on, helpers can scan its
        rows there. The round does not wait for it."""
        limit = int(config.get("replicas"))
        left = {p: quotas[p] - res.rows for p, res in enumerate(owned)
                if quotas[p] > res.rows and not placement.copying(p)}
        paid = self.rates.charge(left, placement.owner, [w for w in threads if w not in blocked],
                                 slack=config.seconds("help-above"), blocked=blocked)
        for p in left:
            have = placement.holders(p)
            if len(have) > limit or paid[p] < self.rent_due[p]:
                continue
            free = [w for w in threads if w not in have and w not in blocked]
            if free:
                placement.copy(p, placement.copy_target(p, free, self.rates.rate))

    def leftovers(self, placement: Placement, book: PartitionBook,
                  owned: Sequence[PartialResult], quotas: Sequence[int],
                  blocked: set[str], *, needed: bool) -> list[coverage.Leftover]:
        """What the partitions' own scans left of their quotas, and who can read it.

        A leftover that only its own worker holds is left for the next round (the published
        rule: its rows are the first its partition scans then), unless the program ``needed``
        every row this round: scanning it now would make the round wait for the worker that
        was just stopped for being slow."""
        out = []
        for p, res in enumerate(owned):
            if quotas[p] <= res.rows:
                continue
            holders = tuple(w for w in placement.holders(p) if w not in blocked)
            if needed or any(w != placement.owner[p] for w in holders):
                out.append(coverage.Leftover(p, book.leftover_start(p, res.rows),
                                             quotas[p] - res.rows, book.sizes[p], holders))
        return out

    def worth_it(self, leftovers: list[coverage.Leftover],
                 owned: Sequence[PartialResult]) -> bool:
        """Whether the owners would take ``daskabsp.help-above`` or more on what they left:
        below it, a task round trip costs more than counting those rows next round."""
        rates = self.rates
        return bool(leftovers) and max(
            lo.rows / max(rates.own[lo.partition] or rates.rate(
                owned[lo.partition].worker, lo.partition), 1e-9)
            for lo in leftovers) >= config.seconds("help-above")

    async def run(self, link: Link, placement: Placement, book: PartitionBook, params,
                  hid: RoundId, owned: Sequence[PartialResult], quotas: Sequence[int],
                  threads: Mapping[str, int], blocked: set[str], *, needed: bool) -> Helped:
        """The helper phase ``hid`` of a round whose own scans were ``owned``: helpers
        (not those in ``blocked``) scan what was left, unless the program did not ``need``
        the round to cover every row and the leftovers are small (:meth:`worth_it`)."""
        own = Helped([Outcome.own(res) for res in owned])
        leftovers = self.leftovers(placement, book, owned, quotas, blocked, needed=needed)
        if not leftovers or not (needed or self.worth_it(leftovers, owned)):
            return own
        live = {w: n for w, n in threads.items() if w not in blocked}
        pieces = coverage.plan(
            leftovers, {w: self.rates.worker_speed(w) for w in live}, live,
            min_rows=int(config.get("probe-rows")),
            cost={lo.partition: self.rates.cost(lo.partition) for lo in leftovers})
        if not pieces:
            return own
        batches = coverage.batches(pieces, live)
        futs = link.submit_pieces(hid, params, [
            (w, [(*placement.holders(pc.partition)[w], pc.start, pc.rows,
                  max(1, int(self.rates.rate(w, pc.partition) * self.chunk_target)))
                 for pc in batch]) for w, batch in batches], self.chunk_target)
        deadline = self.deadline(batches, owned, link.wave_overhead)
        got = await link.collect(futs, hid, [0] * len(futs), quorum=0, settle=True,
                                 deadline=deadline)
        del futs
        if got.dropped:
            link.journal.note(logger, logging.WARNING,
                              "round %d's helpers: %d of %d tasks dropped (not back within "
                              "%.2f s, or their rows lost with a worker); their pieces' rows "
                              "count next round", hid.round, len(got.dropped), len(batches),
                              deadline)
        if got.late:
            link.journal.note(logger, logging.WARNING,
                              "round %d's helpers: gave up on the tasks of %s (silent, or "
                              "bound to a worker that left); their pieces' rows count next "
                              "round", hid.round, sorted(set(got.late.values())))
        # A batch given up on (its worker went silent), dropped or never run lost all its
        # pieces.
        scanned = [res for (w, batch), res in zip(batches, got.results, strict=True)
                   for res in (res if isinstance(res, list) else
                               [idle_result(pc.start, w) for pc in batch])]
        pieces = [pc for _, batch in batches for pc in batch]
        self.rates.observe_pieces(owned, ((pc.partition, res) for pc, res in zip(
            pieces, scanned, strict=True)))
        out = self._merge(book, owned, quotas, pieces, scanned)
        out.silent = set(got.late.values())
        return out

    def deadline(self, batches: list[tuple[str, list[coverage.Piece]]],
                 owned: Sequence[PartialResult], overhead: float | None) -> float:
        """Seconds the helper wave of ``batches`` may take before it is given up: a
        multiple (``daskabsp.helper-deadline``) of its longest batch's expected scan (from
        the measured rates; the round's longest own scan if that is longer) plus a wave's
        overhead, and at least ``daskabsp.helper-deadline-min``. A wave that takes longer
        waits on something (a worker that left, a copy crossing a slow link) that counting
        its rows next round does not."""
        longest = max((sum(pc.rows / max(self.rates.rate(w, pc.partition), 1e-9)
                           for pc in batch) for w, batch in batches), default=0.0)
        if not self.rates.speed:  # nothing measured: the rates are placeholders
            longest = 0.0
        own = max((res.compute_seconds for res in owned), default=0.0)
        factor = float(config.get("helper-deadline"))
        return max(factor * (max(longest, own) + (overhead or 0.0)),
                   config.seconds("helper-deadline-min"))

    def _merge(self, book: PartitionBook, owned: Sequence[PartialResult], quotas: Sequence[int],
               pieces: list[coverage.Piece], scanned: list[PartialResult]) -> Helped:
        """Each partition's own scan merged with its pieces (a piece given up on, or cut
        short, counts nothing)."""
        by_part: dict[int, list] = {}
        for pc, res in zip(pieces, scanned, strict=True):
            by_part.setdefault(pc.partition, []).append(
                (pc, res.stats if res.rows == pc.rows else None))
        out = Helped([Outcome.own(res) for res in owned])
        for p, done in by_part.items():
            own = owned[p]
            cov = coverage.merge(book.cursor[p], book.sizes[p], own.rows, own.stats,
                                 own.stats_before_wrap, done, self.combine)
            out.outcomes[p] = Outcome(cov.rows, cov.stats, cov.stats_before_wrap,
                                      cov.rows < quotas[p], own.rows, own.worker)
            for pc in cov.pieces:
                out.helper_rows[pc.worker] += pc.rows
        return out
