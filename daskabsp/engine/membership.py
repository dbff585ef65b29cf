"""Who a fit's workers are: their threads, who went silent, and where partitions go.

The decisions are pure functions (:func:`balance`, :func:`reassign`); :class:`Membership`
keeps the state between rounds and asks the cluster, through the fit's :class:`Link`, what
it needs: who the workers are (at most once per ``daskabsp.membership-interval``, while a
round runs), whether silent workers answer again, which partitions only silent workers hold.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from .. import config
from .link import Link
from .placement import Placement

logger = logging.getLogger(__name__)


def balance(assignment: Sequence[str | None], threads: Mapping[str, int]) -> list[str]:
    """Assign partitions to live workers in proportion to their threads, moving as few as
    possible: a partition stays on its worker unless that worker is gone or over its share."""
    total = sum(threads.values())
    n = len(assignment)
    cap = {w: math.ceil(n * t / total) for w, t in threads.items()}
    load: Counter[str] = Counter()
    out: list[str | None] = [None] * n
    for p, w in enumerate(assignment):
        if w in cap and load[w] < cap[w]:
            out[p] = w
            load[w] += 1
    for p in range(n):
        if out[p] is None:
            w = min(sorted(threads), key=lambda w: (load[w] / threads[w], load[w]))
            out[p] = w
            load[w] += 1
    return out  # type: ignore[return-value]


def reassign(ran_on: Sequence[str], live: Mapping[str, int], stranded: Iterable[int],
             copies: Sequence[Iterable[str]]) -> tuple[list[str], dict[int, str]]:
    """The partitions' owners after a round: balanced over the ``live`` workers (threads
    per worker) from where they ran (``ran_on``); each ``stranded`` partition (its rows
    only on workers that went silent) moves to the first of its ``copies`` (workers with a
    copy) that is live. Returns the owners and ``{partition: worker}`` of those promoted to
    their copy."""
    owner = balance(ran_on, live)
    promoted = {}
    for p in sorted(stranded):
        ok = [w for w in copies[p] if w in live]
        if ok:
            owner[p] = promoted[p] = ok[0]
    return owner, promoted


class Membership:
    """The workers a fit uses and those it gave up on: the one writer of who is silent.

    Parameters
    ----------
    link : Link
        The fit's link to the cluster (who the workers are, who is silent).
    threads : dict
        Threads per worker of the cluster.
    silent : set of str
        Workers not heard from (they get no partition while silent).
    """

    def __init__(self, link: Link, threads: Mapping[str, int], silent: set[str]) -> None:
        self.link = link
        self.silent = set(silent)
        self.threads = {w: n for w, n in threads.items() if w not in silent} or dict(threads)
        self._given_up: set[str] = set()  # by a helper phase: silent from the next check
        self._interval = config.seconds("membership-interval")
        self._next = time.perf_counter() + self._interval
        self._query: asyncio.Future | None = None

    @classmethod
    async def start(cls, link: Link, placement: Placement) -> Membership:
        """The cluster's workers now, less those silent already, and the partitions' first
        owners: balanced over the live workers from where their rows are; those only silent
        workers hold (a worker that froze after they were placed) placed again, as after a
        round. Both loops start this way."""
        threads = await link.threads()
        self = cls(link, threads, await link.silent(threads))
        owner = balance(await placement.locations(), self.threads)
        stranded = await placement.held_only_by(self.silent) if self.silent else set()
        await placement.reassign(owner, {}, stranded, self.silent)
        return self

    def poll(self) -> None:
        """Ask who the workers are, at most once per interval, while a round runs."""
        if self._query is None and time.perf_counter() >= self._next:
            self._query = asyncio.ensure_future(self.link.threads())
            # a round that fails never reads it: no "exception never retrieved" then
            self._query.add_done_callback(_retrieve)
            self._next = time.perf_counter() + self._interval

    def give_up(self, workers: Iterable[str]) -> None:
        """A helper phase gave up on ``workers`` (silent, or gone): they count as silent
        from the next membership check on."""
        self._given_up |= set(workers)

    def blocked(self, late: Iterable[str], occupied: Iterable[str]) -> set[str]:
        """Workers no piece can run on now: silent, given up on this round (``late``), or
        their threads held by other work (``occupied``)."""
        return self.silent | set(late) | set(occupied)

    async def after_round(self, placement: Placement, ran_on: list[str],
                          late: Mapping[int, str], r: int) -> None:
        """After round ``r`` (partition ``p``'s task ran on ``ran_on[p]``; ``late``: the
        partitions given up on, and their worker): who is alive and answering (workers given
        up on join the silent, those heard from again leave them);
        partitions re-balanced over the live workers, and those only silent workers hold
        moved to a copy or placed again; copies on workers that left dropped."""
        link = self.link
        live = await self._members(moved=ran_on != placement.owner)
        placement.keep_copies_on(live)
        gone = set(late.values()) | self._given_up
        newly = gone - self.silent
        self.silent |= gone
        self._given_up = set()
        if late:
            link.journal.note(
                logger, logging.WARNING, "round %d gave up on partitions %s: %s silent (no "
                "heartbeat for %s) or gone; their rows move to other workers", r, sorted(late),
                sorted(set(late.values())), config.get("unresponsive-after"))
        stranded = set(late) | (await placement.held_only_by(self.silent) if newly else set())
        live = {w: n for w, n in live.items() if w not in self.silent} or live
        if set(live) == set(self.threads) and ran_on == placement.owner and not stranded:
            return
        self.threads = live
        copies = [placement.copy_holders(p) for p in range(len(placement))]
        owner, promoted = reassign(ran_on, live, stranded, copies)
        await placement.reassign(owner, promoted, stranded, self.silent)

    async def _members(self, *, moved: bool) -> dict[str, int]:
        """The cluster's workers now if asked this round (or if a partition ran off its
        owner), and then whether silent workers answer again; else those known."""
        query, self._query = self._query, None
        if query is None and moved:
            query = asyncio.ensure_future(self.link.threads())
        if query is None:
            return self.threads
        live = await query
        if self.silent:
            self.silent &= await self.link.silent(self.silent)
        return live


def _retrieve(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()
