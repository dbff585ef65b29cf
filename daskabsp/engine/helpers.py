"""The helper phase of an A-BSP round: the rows stopped partitions left, scanned elsewhere.

Once a round is stopped, what each stopped partition left of its quota is split (by
:func:`daskabsp.engine.coverage.plan`) among the workers holding a copy of it, in proportion to the
speed each showed, and scanned there in the same round; the pieces are merged with the
partitions' own scans (:func:`daskabsp.engine.coverage.merge`), so every row counts at most once.
Copies are made in the background once the time a partition's owner alone spends on what it
left has paid for them (:meth:`daskabsp.engine.rates.Rates.charge`).

The phase's decisions are the pure functions of this module (plain data in, plain data out;
a :class:`~daskabsp.engine.rates.Rates` is read, never written): what was left
(:func:`shortfall`, :func:`leftovers_of`), which copies to make and where (:func:`copies_due`,
:func:`copy_targets`), whether a wave of helpers is worth it and who scans what
(:func:`worth_helping`, :func:`helper_batches`), how long a wave may take
(:func:`wave_deadline`) and what the round then counts (:func:`merge_helped`).
:class:`HelperPhase` applies them to the cluster, and the simulator
(:mod:`daskabsp.lab.sim`) to its model of one, so the two cannot drift apart.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import config
from ..extension import PartialResult, RoundId
from ..policies import advance
from . import coverage
from .book import PartitionBook
from .link import Link, idle_result
from .placement import Placement
from .plan import Outcome
from .rates import Rates

logger = logging.getLogger(__name__)

#: The slowest rate a leftover is priced at (rows per second): a partition measured at
#: nothing is not priced at infinity.
_SLOWEST = 1e-9


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

    @classmethod
    def own(cls, owned: Sequence[PartialResult]) -> Helped:
        """No helpers: each partition's own scan alone."""
        return cls([Outcome.own(res) for res in owned])


# -- the rules (pure) -----------------------------------------------------------------------


def shortfall(scanned: Sequence[int], quotas: Sequence[int]) -> dict[int, int]:
    """``{partition: rows}`` its own scan (``scanned[p]`` rows) left of its quota, for the
    partitions that left some, in partition order."""
    return {p: quotas[p] - rows for p, rows in enumerate(scanned) if quotas[p] > rows}


def leftovers_of(scanned: Sequence[int], quotas: Sequence[int], cursors: Sequence[int],
                 sizes: Sequence[int], holders: Mapping[int, Sequence[str]],
                 owner: Sequence[str], *, needed: bool) -> list[coverage.Leftover]:
    """What the partitions' own scans (``scanned[p]`` rows from ``cursors[p]``) left of
    their ``quotas``, and who can read it: ``holders[p]``, for each partition of
    :func:`shortfall`, lists the workers a helper piece of it may run on (owner first, those
    that cannot take work left out).

    A leftover that only its ``owner`` holds is left for the next round (the published
    rule: its rows are the first its partition scans then), unless the program ``needed``
    every row this round: scanning it now would make the round wait for the worker that
    was just stopped for being slow."""
    out = []
    for p, rows in shortfall(scanned, quotas).items():
        live = tuple(holders[p])
        if needed or any(w != owner[p] for w in live):
            out.append(coverage.Leftover(p, advance(cursors[p], scanned[p], sizes[p]), rows,
                                         sizes[p], live))
    return out


def worth_helping(leftovers: Sequence[coverage.Leftover], owned: Sequence[PartialResult],
                  rates: Rates, help_above: float) -> bool:
    """Whether the owners would take ``help_above`` seconds or more on what they left (at
    the rate each showed this round, or its worker's speed): below it, a task round trip
    costs more than counting those rows next round."""
    return bool(leftovers) and max(
        lo.rows / max(rates.own[lo.partition] or rates.rate(
            owned[lo.partition].worker, lo.partition), _SLOWEST)
        for lo in leftovers) >= help_above


def helper_batches(leftovers: Sequence[coverage.Leftover], owned: Sequence[PartialResult],
                   rates: Rates, threads: Mapping[str, int], *, min_rows: int,
                   help_above: float, needed: bool
                   ) -> list[tuple[str, list[coverage.Piece]]]:
    """The wave of helper tasks for ``leftovers``: ``(worker, pieces)`` pairs, one task
    each, over the workers of ``threads`` (those that may take work, with their threads),
    planned from the measured ``rates`` (:func:`daskabsp.engine.coverage.plan`, pieces of
    at least ``min_rows`` rows, :func:`daskabsp.engine.coverage.batches`). Empty when there
    is nothing to scan, or when the program did not ``need`` every row this round and the
    leftovers are small (:func:`worth_helping`)."""
    if not leftovers or not (needed or worth_helping(leftovers, owned, rates, help_above)):
        return []
    pieces = coverage.plan(leftovers, rates.worker_speeds(threads), threads,
                           min_rows=min_rows,
                           cost={lo.partition: rates.cost(lo.partition) for lo in leftovers})
    return coverage.batches(pieces, threads) if pieces else []


def copies_due(short: Mapping[int, int], paid: Mapping[int, float], rent_due: Sequence[float],
               holders: Mapping[int, Collection[str]], limit: int) -> list[int]:
    """The partitions of ``short`` (see :func:`shortfall`) to copy now: their rent ``paid``
    (:meth:`Rates.charge`) has reached the price of a copy (``rent_due``), and they have at
    most ``limit`` (``daskabsp.replicas``) copies besides their owner among ``holders``."""
    return [p for p in short if len(holders[p]) <= limit and paid[p] >= rent_due[p]]


def copy_targets(due: Sequence[int], holders: Mapping[int, Collection[str]],
                 candidates: Sequence[str], rates: Rates,
                 load: Mapping[str, int] | None = None,
                 room: Mapping[str, float] | None = None,
                 nbytes: Sequence[int] | None = None) -> dict[int, str]:
    """Where each partition of ``due`` is copied: the candidate not among its ``holders``
    with the most scan rate to spare, its expected rate on the partition's rows shared with
    the copies it holds or receives (``load``, worker -> copies; those made here count too;
    the larger name on a tie). Every copy sent to the fastest worker would make one worker
    help all the stragglers (250 of them at 5 000 workers in the simulator). A partition
    every candidate holds is left out, and so is a candidate whose memory ``room`` (worker
    -> bytes; absent: no bound) is smaller than the partition's ``nbytes``."""
    if not due:
        return {}
    speed = rates.worker_speeds(candidates)
    load = dict(load or {})
    room = dict(room or {})
    # A rate is speed / cost: ranked by speed once, each partition's search stops at the
    # first worker whose unshared rate is below the best share found (O(W log W) a call).
    ranked = sorted(candidates, key=lambda w: (speed[w], w), reverse=True)
    out = {}
    for p in due:
        cost, best = rates.cost(p), None
        for w in ranked:
            if best is not None and speed[w] / cost < best[0]:
                break
            if w in holders[p] or (nbytes and room.get(w, math.inf) < nbytes[p]):
                continue
            key = (speed[w] / cost / (1 + load.get(w, 0)), w)
            best = key if best is None else max(best, key)
        if best is not None:
            out[p] = w = best[1]
            load[w] = load.get(w, 0) + 1
            if nbytes and w in room:
                room[w] -= nbytes[p]
    return out


def wave_deadline(batches: Sequence[tuple[str, Sequence[coverage.Piece]]],
                  owned: Sequence[PartialResult], rates: Rates, overhead: float | None, *,
                  factor: float, minimum: float) -> float:
    """Seconds the helper wave of ``batches`` may take before it is given up: ``factor``
    (``daskabsp.helper-deadline``) times its longest batch's expected scan (from the
    measured ``rates``; the round's longest own scan if that is longer) plus a wave's
    ``overhead``, and at least ``minimum`` (``daskabsp.helper-deadline-min``). A wave that
    takes longer waits on something (a worker that left, a copy crossing a slow link) that
    counting its rows next round does not."""
    longest = max((sum(pc.rows / max(rates.rate(w, pc.partition), _SLOWEST) for pc in batch)
                   for w, batch in batches), default=0.0)
    if not rates.speed:  # nothing measured: the rates are placeholders
        longest = 0.0
    own = max((res.compute_seconds for res in owned), default=0.0)
    return max(factor * (max(longest, own) + (overhead or 0.0)), minimum)


def merge_helped(cursors: Sequence[int], sizes: Sequence[int], owned: Sequence[PartialResult],
                 quotas: Sequence[int], pieces: Sequence[coverage.Piece],
                 scanned: Sequence[PartialResult], combine: Callable[[list], Any]) -> Helped:
    """Each partition's own scan (``owned[p]``, from ``cursors[p]``) merged with the helper
    ``pieces`` of it (:func:`daskabsp.engine.coverage.merge`; ``scanned[i]`` is piece
    ``i``'s result, and a piece given up on, or cut short, counts nothing); ``combine`` adds
    statistics."""
    by_part: dict[int, list] = {}
    for pc, res in zip(pieces, scanned, strict=True):
        by_part.setdefault(pc.partition, []).append(
            (pc, res.stats if res.rows == pc.rows else None))
    out = Helped.own(owned)
    for p, done in by_part.items():
        own = owned[p]
        cov = coverage.merge(cursors[p], sizes[p], own.rows, own.stats,
                             own.stats_before_wrap, done, combine)
        out.outcomes[p] = Outcome(cov.rows, cov.stats, cov.stats_before_wrap,
                                  cov.rows < quotas[p], own.rows, own.worker)
        for pc in cov.pieces:
            out.helper_rows[pc.worker] += pc.rows
    return out


# -- the phase on the cluster -----------------------------------------------------------------


class HelperPhase:
    """The helper phases of one fit, and the scan rates they are planned from: the rules
    above, applied to the fit's placement and link.

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
        self._no_room: set[int] = set()  # partitions noted as copied nowhere for memory

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
        (copies are spread: a worker's rate is shared with the copies it holds or receives),
        up to ``daskabsp.replicas`` copies, never past a worker's memory room
        (:attr:`Placement.copy_room`): from the next round on, helpers can scan its rows
        there. The round does not wait for it (:func:`copies_due`, :func:`copy_targets`)."""
        short = {p: rows for p, rows in shortfall([res.rows for res in owned], quotas).items()
                 if not placement.copying(p)}
        free = [w for w in threads if w not in blocked]
        paid = self.rates.charge(short, placement.owner, free,
                                 slack=config.seconds("help-above"), blocked=blocked)
        holders = {p: placement.holders(p) for p in short}
        due = copies_due(short, paid, self.rent_due, holders, int(config.get("replicas")))
        targets = copy_targets(due, holders, free, self.rates, placement.copy_load(),
                               placement.copy_room, placement.nbytes)
        for p, worker in targets.items():
            placement.copy(p, worker)
        for p in due:
            if p not in targets and p not in self._no_room and set(free) - set(holders[p]):
                self._no_room.add(p)
                placement.link.journal.note(
                    logger, logging.INFO, "partition %d not copied for helpers: no worker "
                    "without it has room for its %.1f MB (below Dask's spill threshold, "
                    "within daskabsp.copy-memory)", p, placement.nbytes[p] / 1e6)

    def leftovers(self, placement: Placement, book: PartitionBook,
                  owned: Sequence[PartialResult], quotas: Sequence[int],
                  blocked: set[str], *, needed: bool) -> list[coverage.Leftover]:
        """What the partitions' own scans left of their quotas, and who (not in
        ``blocked``) can read it (:func:`leftovers_of`)."""
        scanned = [res.rows for res in owned]
        holders = {p: [w for w in placement.holders(p) if w not in blocked]
                   for p in shortfall(scanned, quotas)}
        return leftovers_of(scanned, quotas, book.cursor, book.sizes, holders,
                            placement.owner, needed=needed)

    def wave(self, placement: Placement, book: PartitionBook, owned: Sequence[PartialResult],
             quotas: Sequence[int], threads: Mapping[str, int], blocked: set[str], *,
             needed: bool) -> list[tuple[str, list[coverage.Piece]]]:
        """The helper tasks of a round whose own scans were ``owned``: ``(worker, pieces)``
        pairs over the workers of ``threads`` not in ``blocked`` (:func:`helper_batches`
        under ``daskabsp.probe-rows`` and ``daskabsp.help-above``); empty for none."""
        live = {w: n for w, n in threads.items() if w not in blocked}
        return helper_batches(
            self.leftovers(placement, book, owned, quotas, blocked, needed=needed), owned,
            self.rates, live, min_rows=int(config.get("probe-rows")),
            help_above=config.seconds("help-above"), needed=needed)

    async def run(self, link: Link, placement: Placement, book: PartitionBook, params,
                  hid: RoundId, owned: Sequence[PartialResult], quotas: Sequence[int],
                  threads: Mapping[str, int], blocked: set[str], *, needed: bool) -> Helped:
        """The helper phase ``hid`` of a round whose own scans were ``owned``: helpers
        (not those in ``blocked``) scan what was left, unless the program did not ``need``
        the round to cover every row and the leftovers are small (:meth:`wave`)."""
        batches = self.wave(placement, book, owned, quotas, threads, blocked, needed=needed)
        if not batches:
            return Helped.own(owned)
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
        out = merge_helped(book.cursor, book.sizes, owned, quotas, pieces, scanned,
                           self.combine)
        out.silent = set(got.late.values())
        return out

    def deadline(self, batches: list[tuple[str, list[coverage.Piece]]],
                 owned: Sequence[PartialResult], overhead: float | None) -> float:
        """Seconds the helper wave of ``batches`` may take before it is given up
        (:func:`wave_deadline` under ``daskabsp.helper-deadline`` and
        ``daskabsp.helper-deadline-min``)."""
        return wave_deadline(batches, owned, self.rates, overhead,
                             factor=float(config.get("helper-deadline")),
                             minimum=config.seconds("helper-deadline-min"))
