"""Where a fit's rows live: its partitions, their owners, the copies helpers read.

:class:`Placement` is the one writer of these: the partitions placed at the start (or taken
from :func:`daskabsp.place`), the worker each partition's task is asked to run on (its
*owner*), the copies made for helpers, and the partitions scattered again, from the rows the
fitting process holds, when their only worker stops answering.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Collection, Mapping

from dask.graph_manipulation import clone
from dask.sizeof import sizeof
from distributed import Future, futures_of

from .. import config
from ..extension import COPY_PREFIX, wait_all
from .link import Link
from .partitions import (
    Partitions,
    as_dask,
    copy_on,
    is_dask,
    known_nbytes,
    move,
    nbytes_by_worker,
    place,
    scatter_partition,
)

logger = logging.getLogger(__name__)

#: Bytes per second the copies of earlier fits took, per scheduler: a later fit on the same
#: cluster prices its first copy at what the links did, not at ``daskabsp.copy-rate``.
_LINK_RATES: dict[str, float] = {}

#: Copies of fewer bytes are too small to time a link by.
_TIMED_BYTES = 1e6


def within_share(room: dict[str, float], held: Mapping[str, int], bound: float | None,
                 workers: Collection[str]) -> dict[str, float]:
    """``room`` (worker -> bytes of copies it may take) bounded so that each of ``workers``
    holds at most ``bound`` (``daskabsp.copy-memory``) times the most any worker ``held``."""
    if bound is None:
        return room
    most = max(held.values(), default=0)
    return {**room, **{w: min(room.get(w, math.inf), bound * most - held.get(w, 0))
                       for w in workers}}


class Placement:
    """The rows of one fit on the cluster.

    Parameters
    ----------
    link : Link
        The fit's link to the cluster.
    parts : Partitions
        The placed partitions (this fit's own lists: copies and re-placements stay here).
    data : tuple of (X, y, sample_weight)
        The rows as given: a round that loses partitions places them again from these.
    source : tuple of (X, y, sample_weight) or None
        In-memory rows the partitions were made from, in order (None: dask input with its
        lineage); a partition lost with a silent worker is scattered again from them.
    scatter_rate : float or None
        Bytes per second at which this process scattered the in-memory rows (the rate
        copies of them are expected at; None: dask input, copied worker to worker).
    """

    def __init__(self, link: Link, parts: Partitions, data: tuple, source: tuple | None, *,
                 scatter_rate: float | None = None) -> None:
        self.link = link
        self.parts = parts
        self.data_ = data
        self.source = source
        self.scatter_rate = scatter_rate
        self.owner: list[str] = []
        self._copying: dict[int, asyncio.Future] = {}
        self._copying_to: dict[int, str] = {}  # the worker each copy in the making is for
        self._copy_started: dict[int, float] = {}  # when each copy in the making began
        self._overdue: set[int] = set()  # copies in the making noted as past their price
        self._copy_futures: dict[int, list[Future]] = {}  # copies being made, by partition
        #: Per partition, the seconds a copy of it is expected to take (see
        #: :meth:`copy_seconds`; kept current as copies are timed: the placement writes it,
        #: the helper phase reads it).
        self.copy_due: list[float] = []
        #: Per worker with a memory limit, the bytes of copies it can still take (see
        #: :meth:`copy_seconds`; the placement writes it, the helper phase reads it).
        self.copy_room: dict[str, float] = {}
        self._nbytes: list[int] = []

    @classmethod
    async def place(cls, link: Link, X, y, sample_weight, chunks: tuple[int, ...]) -> Placement:
        """Place the rows as ``chunks`` row partitions (see :func:`.partitions.place`: dask
        input persisted with its lineage, in-memory rows scattered straight to the
        workers, around workers that stop answering)."""
        t0 = time.perf_counter()
        parts = await place(link.client, X, y, sample_weight, chunks, silent=link.silent)
        seconds = time.perf_counter() - t0
        data = (X, y, sample_weight)
        if is_dask(X):
            return cls(link, parts, data, None)
        rate = sum(a.nbytes if hasattr(a, "nbytes") else sizeof(a) for a in data
                   if a is not None) / max(seconds, 1e-9)
        return cls(link, parts, data, data, scatter_rate=rate)

    # -- reading -------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.parts)

    @property
    def sizes(self) -> tuple[int, ...]:
        return self.parts.sizes

    def data(self, p: int) -> tuple:
        """Partition ``p``'s ``(X, y, sample_weight)`` futures at its owner."""
        return self.parts.X[p], self.parts.y[p], self.parts.sample_weight[p]

    def holders(self, p: int) -> dict[str, tuple]:
        """Where partition ``p`` can be read: its owner and the workers with a copy."""
        return self.parts.holders(p, self.owner[p])

    def copy_holders(self, p: int) -> list[str]:
        """The workers with a copy of partition ``p``, oldest copy first."""
        return list(self.parts.copies[p]) if self.parts.copies else []

    async def locations(self) -> list[str | None]:
        """A worker holding each partition's rows now (None: nowhere yet)."""
        who = await self.link.who_has(self.parts.X)
        return [(who.get(f.key) or [None])[0] for f in self.parts.X]

    async def held_only_by(self, silent: set[str]) -> set[int]:
        """The partitions whose rows only ``silent`` workers hold (a task reading them
        elsewhere would wait to fetch them)."""
        who = await self.link.who_has(self.parts.X)
        return {p for p, f in enumerate(self.parts.X) if not set(who.get(f.key) or ()) - silent}

    async def check_finite(self) -> None:
        """Raise ``ValueError`` if the rows hold NaN or infinity (for dask input, whose rows
        were not checked when the fit was called)."""
        ok = await self.link.gather([self.link.submit_check(x) for x in self.parts.X])
        if not all(bool(o[0]) for o in ok):
            raise ValueError("Input X contains NaN or infinity.")

    async def nbytes_by_worker(self) -> dict[str, int]:
        """Bytes of training data each worker holds for the fit (partitions and copies)."""
        return await nbytes_by_worker(self.link.client, self.parts, self.owner)

    # -- moving --------------------------------------------------------------------------------

    async def reassign(self, owner: list[str], promoted: Mapping[int, str],
                       stranded: set[int], silent: set[str]) -> None:
        """Take ``owner`` as the partitions' owners; each partition in ``promoted`` reads
        its copy on that worker from now on; the ``stranded`` partitions not promoted
        (their rows only on silent workers) are scattered again from the fitting process's
        rows, if it holds them."""
        if owner != self.owner and self.owner:
            moved = {p: w for p, (v, w) in enumerate(zip(self.owner, owner, strict=True))
                     if v != w}
            self.link.journal.note(logger, logging.INFO, "workers changed; partitions "
                                   "re-balanced (partition: new owner) %s", moved)
        self.owner = list(owner)
        for p, w in promoted.items():
            self.parts.X[p], self.parts.y[p], self.parts.sample_weight[p] = (
                self.parts.copies[p].pop(w))
            self.link.journal.note(logger, logging.INFO, "partition %d is read from its copy "
                                   "on %s from now on (no row moved)", p, w)
        lost = stranded - set(promoted)
        if lost and self.source is not None:
            await asyncio.gather(*(self._place_again(p, silent) for p in sorted(lost)))
        elif lost and is_dask(self.data_[0]):
            for p in sorted(lost):
                self._recompute(p)

    async def _place_again(self, p: int, silent: set[str]) -> None:
        """Scatter partition ``p``'s rows again to its owner; if that worker is gone by now
        (a killed worker may still have been listed), to another one that answers."""
        t0 = time.perf_counter()
        try:
            await move(self.link.client, self.parts, p, *self.source, self.owner[p])
            self._moved_note(p, t0, "its only worker stopped answering")
            return
        except (OSError, KeyError) as e:  # KeyError: the scheduler no longer knows it
            logger.info("daskabsp: placing partition %d on %s failed (%r); trying another "
                        "worker", p, self.owner[p], e)
        workers = [w for w in sorted(await self.link.threads())
                   if w != self.owner[p] and w not in silent]
        if not workers:
            raise OSError(f"no worker left to place partition {p} on")
        self.owner[p] = workers[p % len(workers)]
        await move(self.link.client, self.parts, p, *self.source, self.owner[p])
        self._moved_note(p, t0, "its only worker stopped answering")

    def _moved_note(self, p: int, t0: float, why: str) -> None:
        """Say in the history and the log that partition ``p``'s rows were sent again from
        this process, how many bytes, how long it took, and why."""
        a = sum(self.parts.sizes[:p])
        rows = slice(a, a + self.parts.sizes[p])
        nbytes = sum(sizeof(x[rows]) for x in self.source if x is not None)
        self.link.journal.note(logger, logging.WARNING, "partition %d's rows (%.1f MB) "
                               "scattered again to %s in %.2f s: %s", p, nbytes / 1e6,
                               self.owner[p], time.perf_counter() - t0, why)

    def _recompute(self, p: int) -> None:
        """Compute partition ``p`` of dask input again, from its lineage under new keys, on
        its owner (its rows are only on workers that stopped answering: Dask would wait for
        them, since it recomputes a key only once the worker holding it has left). Input
        persisted before the fit has no lineage beyond those workers: its tasks then wait
        for them, and the rounds go on without the partition meanwhile."""
        client = self.link.client
        blocks = [None if a is None else as_dask(a, self.sizes).blocks[p] for a in self.data_]
        cloned = iter(client.persist(list(clone(*[b for b in blocks if b is not None],
                                                assume_layers=False)),
                                     workers=[self.owner[p]], allow_other_workers=True))
        new = [None if b is None else futures_of(next(cloned))[0] for b in blocks]
        self.parts.X[p], self.parts.y[p], self.parts.sample_weight[p] = new
        self.link.journal.note(logger, logging.WARNING, "partition %d's rows are only on "
                               "workers that stopped answering: computed again from their "
                               "lineage on %s", p, self.owner[p])

    async def recover(self) -> None:
        """After a round lost partitions with a worker: place them all again (in-memory
        rows scattered again; dask input recomputed from its lineage)."""
        if any(f.status != "finished" for f in self.parts.futures):
            self.parts = await place(self.link.client, *self.data_, self.sizes,
                                     silent=self.link.silent)

    # -- copies --------------------------------------------------------------------------------

    @property
    def nbytes(self) -> list[int]:
        """Per partition, its bytes as the scheduler measured them (empty before
        :meth:`copy_seconds`)."""
        return self._nbytes

    def copying(self, p: int) -> bool:
        """Whether a copy of partition ``p`` is being made."""
        return p in self._copying

    def copy_load(self) -> dict[str, int]:
        """Per worker, the copies of this fit it holds or is receiving."""
        load: dict[str, int] = {}
        for w in [w for held in self.parts.copies for w in held] + list(
                self._copying_to.values()):
            load[w] = load.get(w, 0) + 1
        return load

    def copy(self, p: int, worker: str) -> None:
        """Start copying partition ``p`` to ``worker`` in the background; helpers read it
        there once it is made."""
        task = asyncio.ensure_future(self._copy(p, worker))
        if self._nbytes and worker in self.copy_room:
            self.copy_room[worker] -= self._nbytes[p]
        self._copying[p] = task
        self._copy_started[p] = time.perf_counter()
        self._copying_to[p] = worker
        task.add_done_callback(lambda t, p=p: self._copied(p, t))

    async def _copy(self, p: int, worker: str) -> None:
        """Make the copy of partition ``p`` on ``worker`` and record it. In-memory rows are
        scattered from this process, which holds them; a dask array's chunks are copied
        worker to worker, and a copy that landed elsewhere (its worker left meanwhile) is
        dropped: helpers plan their pieces by where copies are."""
        client, data = self.link.client, self.source or self.data_
        t0 = time.perf_counter()
        if any(is_dask(a) for a in data):
            futs = self._copy_futures[p] = copy_on(client, self.data(p), worker,
                                                   f"{COPY_PREFIX}-{self.link.fit_id}")
            made = [f for f in futs if f is not None]
            try:
                await wait_all(client, made)
                where = await self.link.who_has(made)
            finally:
                self._copy_futures.pop(p, None)
            if any(worker not in where.get(f.key, ()) for f in made):
                self.link.journal.note(logger, logging.INFO, "the copy of partition %d "
                                       "meant for %s landed elsewhere; dropped", p, worker)
                await client.cancel(made)
                return
        else:
            futs = await scatter_partition(client, self.parts, p, data, worker)
        self.parts.keep_copy(p, worker, tuple(futs))
        seconds = time.perf_counter() - t0
        self.link.journal.note(logger, logging.INFO, "partition %d copied to %s for helpers "
                               "(%.1f MB in %.2f s%s)", p, worker, self._nbytes[p] / 1e6
                               if self._nbytes else float("nan"), seconds,
                               self._price_copies(p, seconds))

    def _price_copies(self, p: int, seconds: float) -> str:
        """Take in the time the copy of partition ``p`` took: later copies are priced at the
        rate it crossed the link (the rent a copy must have saved before it is made, see
        :meth:`~daskabsp.engine.helpers.HelperPhase.copy_stragglers`). Returns the note."""
        if not self._nbytes or self._nbytes[p] < _TIMED_BYTES or seconds <= 0:
            return ""
        rate = self._nbytes[p] / seconds
        self._set_link_rate(rate)
        return f": {rate / 1e6:.1f} MB/s, the price of later copies"

    def _set_link_rate(self, rate: float) -> None:
        _LINK_RATES[self.link.client.scheduler.address] = rate
        self.copy_due[:] = [b / rate for b in self._nbytes]

    def price_overdue(self) -> None:
        """Take in the copies still in the making past the time they were priced at: the
        link carries at most their bytes over the time they have taken so far, and later
        copies (of this fit and the next ones) are priced at that bound. A copy that never
        lands would otherwise teach the price nothing: on a 100 Mbit/s link, an 88 MB copy
        priced at 0.42 s by ``daskabsp.copy-rate`` outlived every 15-round fit and was
        started again by each."""
        if not self._nbytes or not self.copy_due:
            return
        now = time.perf_counter()
        for p, t0 in self._copy_started.items():
            seconds = now - t0
            if self._nbytes[p] >= _TIMED_BYTES and seconds > self.copy_due[p]:
                self._set_link_rate(self._nbytes[p] / seconds)
                if p in self._overdue:
                    continue
                self._overdue.add(p)
                self.link.journal.note(logger, logging.INFO, "the copy of partition %d has "
                                       "taken %.2f s so far, longer than priced: later "
                                       "copies priced at %.1f MB/s at most", p, seconds,
                                       self._nbytes[p] / seconds / 1e6)

    def _copied(self, p: int, task: asyncio.Future) -> None:
        self._copying.pop(p, None)
        worker = self._copying_to.pop(p, None)
        made = self.parts.copies and worker in self.parts.copies[p]
        if not made and self._nbytes and worker in self.copy_room:
            self.copy_room[worker] += self._nbytes[p]
        self._copy_started.pop(p, None)
        self._overdue.discard(p)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("daskabsp: copying partition %d for helpers failed: %r", p,
                           task.exception())

    def keep_copies_on(self, workers: Collection[str]) -> None:
        """Drop the copies held by workers not in ``workers`` (they left the cluster): no
        helper piece is planned against them, and nothing recomputes them elsewhere."""
        for p, held in enumerate(self.parts.copies):
            for w in [w for w in held if w not in workers]:
                for f in held.pop(w):
                    if f is not None:
                        f.release()
                self.link.journal.note(logger, logging.INFO, "the copy of partition %d on "
                                       "%s is gone with its worker", p, w)

    async def close(self) -> None:
        """The fit has ended: stop making copies and release those made (a copy in flight
        would otherwise go on crossing the network, and steer the next fit's tasks to where
        it lands)."""
        self.price_overdue()
        tasks = list(self._copying.values())
        for task in tasks:
            task.cancel()
        pending = [f for futs in self._copy_futures.values() for f in futs if f is not None]
        await asyncio.gather(*tasks, return_exceptions=True)
        made = self.parts.drop_copies()
        if pending or made:
            try:
                await self.link.client.cancel(pending + made)
            except Exception as e:  # the client is closing: its keys go with it
                logger.debug("daskabsp: could not release the fit's copies: %r", e)

    async def copy_seconds(self) -> list[float]:
        """Per partition, the time a copy of it is expected to take (:attr:`copy_due`, kept
        current from then on): its bytes (as the scheduler measured them) at the rate the
        last copies on this cluster crossed its links, else at the rate in-memory input was
        scattered, else at ``daskabsp.copy-rate`` (dask arrays, copied worker to worker).
        Also each worker's room for copies (:attr:`copy_room`): below Dask's spill
        threshold (:meth:`~daskabsp.engine.link.Link.memory_room`), and within
        ``daskabsp.copy-memory`` times the most any worker holds of the fit's partitions."""
        keys = [[f.key for f in fs if f is not None] for fs in zip(
            self.parts.X, self.parts.y, self.parts.sample_weight, strict=True)]
        size = await known_nbytes(self.link.client, [k for ks in keys for k in ks])
        self._nbytes = [sum(int(size.get(k, 0)) for k in ks) for ks in keys]
        held = await self.nbytes_by_worker()
        bound = config.copy_memory()
        self.copy_room = within_share(await self.link.memory_room(held), held, bound,
                                      await self.link.threads() if bound else ())
        rate = (_LINK_RATES.get(self.link.client.scheduler.address) or self.scatter_rate
                or float(config.nbytes("copy-rate")))
        self.copy_due = [b / max(rate, 1.0) for b in self._nbytes]
        return self.copy_due
