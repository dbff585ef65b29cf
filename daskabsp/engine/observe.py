"""Watching a fit: one record per round (or, under SSP and ASP, per update), built once, fanned
out to whoever watches.

Three watchers see each round: the fit history (:class:`daskabsp.monitor.history.HistoryRecorder`),
the dashboard page (:class:`daskabsp.monitor.reporting.FitReporter`) and the callbacks
(:class:`daskabsp.RoundCallback`, called where the caller of the fit can see them, see
:mod:`daskabsp.engine.caller`). :class:`Observers` also keeps the fit's clock, from which the time
spent in callbacks is left out.
"""

from __future__ import annotations

import asyncio
import queue
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..extension import PartialResult
from ..monitor.callbacks import CallbackList, FitInfo, RoundInfo
from ..monitor.history import HistoryRecorder, UpdateRecorder
from ..monitor.reporting import FitReporter
from .caller import Call
from .clocks import Update
from .plan import Outcome, Settlement


@dataclass(frozen=True)
class RoundRecord:
    """One round of a fit, as its watchers see it.

    Attributes
    ----------
    round : int
        The round's number.
    objective : float
        The objective estimated from the round's counted statistics.
    params : object or None
        The parameters the round's statistics were taken at (None: not recorded).
    quotas : tuple of int
        Rows each partition was asked for.
    cursors : tuple of int
        Row each partition started at.
    owned : list of PartialResult
        Each partition's own task's result.
    outcomes : list of Outcome
        Each partition's round, its helpers' pieces included.
    settlement : Settlement
        What counted.
    coef : ndarray
        The parameters after the round's update.
    events : str
        What the engine did on its own during the round, and why (see
        :class:`~daskabsp.engine.journal.Journal`).
    """

    round: int
    objective: float
    params: Any
    quotas: tuple[int, ...]
    cursors: tuple[int, ...]
    owned: Sequence[PartialResult]
    outcomes: Sequence[Outcome]
    settlement: Settlement
    coef: np.ndarray
    events: str = ""


@dataclass(frozen=True)
class UpdateRecord:
    """One update of a fit without rounds (SSP, ASP), as its watchers see it.

    Attributes
    ----------
    update : Update
        The update: its lease (partition, clock, attempt, version, lead) and its order.
    objective : float
        The program's objective after it (:meth:`~daskabsp.programs.Program.
        partition_objective`).
    result : PartialResult
        The partition task's result.
    size : int
        Rows in the partition.
    owners : sequence of str
        The worker of every partition (the update's partition: where its task ran).
    coef : ndarray
        The parameters after the update.
    params : ndarray or None
        The coefficients recorded in the history (None: not recorded).
    events : str
        What the engine did on its own since the last update, and why.
    """

    update: Update
    objective: float
    result: PartialResult
    size: int
    owners: Sequence[str]
    coef: np.ndarray
    params: Any = None
    events: str = ""


class Observers:
    """The watchers of one fit, and its clock.

    Parameters
    ----------
    callbacks : CallbackList
        The fit's callbacks.
    """

    def __init__(self, callbacks: CallbackList) -> None:
        self.callbacks = callbacks
        self.recorder = HistoryRecorder(0)
        self.reporter: FitReporter | None = None
        # Where callbacks run: None calls them on the event loop (an asynchronous client's
        # caller is there); a queue hands them to the thread that called fit (caller.run_sync).
        self.caller: queue.SimpleQueue | None = None
        self.info: FitInfo | None = None
        self.ran = (0, False)  # (rounds run, converged), for the callbacks' on_fit_end
        self.epoch0 = time.time()
        self._t0 = time.perf_counter()
        self._callback_seconds = 0.0

    def call_through(self, calls: queue.SimpleQueue) -> None:
        """Run the callbacks in the thread that reads ``calls`` (see ``caller.run_sync``)."""
        self.caller = calls

    def report_to(self, reporter: FitReporter) -> None:
        """Send the fit's progress to the scheduler's page through ``reporter``."""
        self.reporter = reporter

    async def _call(self, func, *args):
        """``func(*args)`` where callbacks run, its time excluded from the fit's clock."""
        c0 = time.perf_counter()
        try:
            if self.caller is None:
                return func(*args)
            loop = asyncio.get_running_loop()
            future = loop.create_future()
            self.caller.put(Call(func, args, future, loop))
            return await future
        finally:
            self._callback_seconds += time.perf_counter() - c0

    def wall(self) -> float:
        """Seconds since the first round started, callback time excluded."""
        return time.perf_counter() - self._t0 - self._callback_seconds

    async def begin(self, info: FitInfo) -> None:
        """The rounds are about to start: tell the watchers, and start the clock."""
        self.info = info
        self.recorder = (UpdateRecorder() if info.unit == "update"
                         else HistoryRecorder(info.n_partitions))
        if self.reporter is not None:
            self.reporter.start(program=info.program, sync=info.sync,
                                n_partitions=info.n_partitions)
        if self.callbacks:
            await self._call(self.callbacks.begin, info)
        self._callback_seconds = 0.0
        self._t0 = time.perf_counter()
        self.epoch0 = time.time()

    async def round_begin(self, r: int, coef) -> None:
        """Round ``r`` is about to be submitted at parameters ``coef``."""
        if self.callbacks:
            await self._call(self.callbacks.round_begin, r, np.asarray(coef))

    async def round_end(self, rec: RoundRecord) -> bool:
        """Round ``rec.round`` is over: record it everywhere; True if a callback asks to
        stop the fit."""
        wall = self.wall()
        owned, outcomes, settled = rec.owned, rec.outcomes, rec.settlement
        rows = [o.rows for o in outcomes]
        self.recorder.add(
            wall=wall, objective=rec.objective, params=rec.params, rows=rows,
            quota=list(rec.quotas), cursor=list(rec.cursors),
            compute_seconds=[res.compute_seconds for res in owned],
            task_start=[res.start - self.epoch0 for res in owned],
            task_stop=[res.stop - self.epoch0 for res in owned],
            harvested=[res.stopped for res in owned], counted=list(settled.counted),
            worker=[res.worker for res in owned], helped_rows=[o.helped for o in outcomes],
            worker_rows=settled.worker_rows, events=rec.events)
        if self.reporter is not None:
            self.reporter.round(
                round=rec.round, wall=wall, objective=float(rec.objective),
                rows=[int(n) for n in rows], quota=[int(q) for q in rec.quotas],
                compute=[float(res.compute_seconds) for res in owned],
                harvested=[bool(res.stopped) for res in owned],
                worker=[res.worker for res in owned], scanned=[int(res.rows) for res in owned])
        self.ran = (rec.round + 1, False)
        if not self.callbacks:
            return False
        info = self.info
        return await self._call(self.callbacks.round_end, RoundInfo(
            round=rec.round, max_iter=info.max_iter, objective=float(rec.objective),
            coef=np.asarray(rec.coef), rows=int(settled.rows),
            rows_asked=int(sum(rec.quotas)), n_samples=info.n_samples,
            harvested=sum(bool(res.stopped) for res in owned),
            n_partitions=info.n_partitions, elapsed=wall))

    async def update_end(self, rec: UpdateRecord) -> bool:
        """An update (SSP, ASP) was applied: record it everywhere, the dashboard and the
        callbacks seeing it as a round of its one partition; True if a callback asks to stop
        the fit."""
        wall = self.wall()
        res, lease = rec.result, rec.update.lease
        p, n = lease.partition, rec.update.applied
        self.recorder.add(
            wall=wall, partition=p, clock=lease.clock, version=lease.version,
            staleness=rec.update.staleness, lead=lease.lead, attempt=lease.attempt,
            objective=rec.objective, rows=res.rows, compute_seconds=res.compute_seconds,
            task_start=res.start - self.epoch0, task_stop=res.stop - self.epoch0,
            worker=res.worker, params=rec.params, events=rec.events)
        if self.reporter is not None:
            one = [0] * len(rec.owners)
            rows, quota, compute = list(one), list(one), [0.0] * len(one)
            rows[p], quota[p], compute[p] = int(res.rows), int(rec.size), \
                float(res.compute_seconds)
            self.reporter.round(round=n, wall=wall, objective=float(rec.objective), rows=rows,
                                quota=quota, compute=compute, harvested=[False] * len(one),
                                worker=list(rec.owners))
        self.ran = (n + 1, False)
        if not self.callbacks:
            return False
        await self._call(self.callbacks.round_begin, n, np.asarray(rec.coef))
        info = self.info
        return await self._call(self.callbacks.round_end, RoundInfo(
            round=n, max_iter=info.max_iter, objective=float(rec.objective),
            coef=np.asarray(rec.coef), rows=int(res.rows), rows_asked=int(rec.size),
            n_samples=info.n_samples, harvested=0, n_partitions=info.n_partitions,
            elapsed=wall))

    def converged(self, n_iter: int) -> None:
        """The fit converged after ``n_iter`` rounds (for the callbacks' ``on_fit_end``)."""
        self.ran = (n_iter, True)

    def end_callbacks(self, *, error: BaseException | None) -> None:
        """The callbacks' ``on_fit_end`` (once; nothing if the rounds never started)."""
        self.callbacks.end(*self.ran, error)

    async def end(self, status: str) -> None:
        """The fit ended (``status``: converged, finished, failed, interrupted)."""
        if self.reporter is not None:
            self.reporter.end(status)
            if status != "interrupted":
                await self.reporter.flush()
