"""The scheduler plugin's book of rounds, pure (no scheduler, no I/O).

A round's tasks are *announced* (from their annotation), then each one *finishes*, *errs*,
is *forgotten* or is *reported idle* by its worker (it was still queued when the stop
arrived: it computes nothing). The round is *settled* when none of its tasks is still open,
and *stopped* once: when its quorum of tasks has finished, or, with patience, when its
deadline *expires* (patience times the quorum's time after the quorum) with tasks open.
:class:`RoundRegistry` keeps that bookkeeping and says what to do (stop a round, tell
waiters it settled); the plugin (:mod:`daskabsp.extension`) does it.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field

from ._protocol import RoundId, RoundTimes


@dataclass
class Round:
    """One round's tasks on the scheduler.

    Attributes
    ----------
    rid : str
        The round's id as on the wire (``str(RoundId)``).
    number : int
        The round's number in its fit.
    fit : str
        The fit's id.
    quorum : int
        Finished tasks (or workers, see ``unit``) that stop the round (0: never stopped).
    unit : {"partitions", "workers"}
        What the quorum counts: finished tasks, or workers that finished every task of the
        round they were given (a worker's queue of several partitions is then one unit, and
        a round of many partitions per worker is not cut after its first task).
    client : str or None
        The client that submitted it.
    keys : set
        Its tasks still known to the scheduler.
    open : set
        Its tasks neither finished, erred, forgotten nor reported idle.
    idle : dict
        ``{key: worker}`` of the tasks reported idle.
    occupied : set
        Workers that reported tasks idle because other work held all their threads.
    patience : float
        The stop comes this many times the quorum's time (from the announcement) after the
        quorum (0: with it).
    t_announced : float
        When its first task was announced.
    deadline : float or None
        When it is stopped if tasks are still open (set at its quorum, with patience).
    """

    rid: str
    number: int
    fit: str
    quorum: int
    unit: str
    client: str | None
    keys: set = field(default_factory=set)
    open: set = field(default_factory=set)
    idle: dict = field(default_factory=dict)
    occupied: set = field(default_factory=set)
    patience: float = 0.0
    t_announced: float = 0.0
    deadline: float | None = None
    finished: int = 0
    on: dict = field(default_factory=dict)  # open key -> worker it is processing on
    load: dict = field(default_factory=dict)  # worker -> its open keys (unit "workers")
    done_workers: set = field(default_factory=set)  # finished all they were given
    stopped: bool = False
    t_quorum: float | None = None
    t_last: float | None = None  # when the round settled (its last key left ``open``)
    logged: bool = True  # False once its fit is forgotten: its keys may still be released

    @property
    def settled(self) -> bool:
        return not self.open


#: Fits whose workers the registry remembers (for their forget message).
MAX_FITS = 1000


class RoundLog:
    """The times of retired rounds, by fit, bounded: at most ``maxlen`` rounds, the oldest
    fits' dropped first. A fit's rounds are read or dropped without touching the others'.
    Iterates ``(rid, fit, finished, quorum time, last result time)``."""

    def __init__(self, maxlen: int = 100_000) -> None:
        self.maxlen = maxlen
        self._fits: OrderedDict[str, dict[str, tuple]] = OrderedDict()
        self._n = 0

    def add(self, rid: str, fit: str, finished: int, t_quorum, t_last) -> None:
        entries = self._fits.setdefault(fit, {})
        self._n += rid not in entries
        entries[rid] = (rid, fit, finished, t_quorum, t_last)
        while self._n > self.maxlen and len(self._fits) > 1:
            self._n -= len(self._fits.popitem(last=False)[1])

    def of(self, fit: str) -> Iterable[tuple]:
        """The entries of ``fit``."""
        return self._fits.get(fit, {}).values()

    def drop(self, fit: str) -> None:
        self._n -= len(self._fits.pop(fit, {}))

    def __iter__(self) -> Iterator[tuple]:
        for entries in self._fits.values():
            yield from entries.values()

    def __len__(self) -> int:
        return self._n


class RoundRegistry:
    """The rounds the scheduler plugin knows, and what their tasks did.

    Parameters
    ----------
    on_settle : callable, optional
        Called with a round when it settles, and when it is retired unsettled (its waiters
        can stop waiting either way).
    clock : callable, default time.time
        The clock of the quorum and settle times.
    """

    def __init__(self, on_settle: Callable[[Round], None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.rounds: dict[str, Round] = {}
        self.key_round: dict[Hashable, Round] = {}
        self.log = RoundLog()
        # the workers each fit's tasks were sent to (a fit that never says it ended, e.g. one
        # that failed, is dropped after MAX_FITS newer ones)
        self.fit_workers: OrderedDict[str, set[str]] = OrderedDict()
        self._on_settle = on_settle or (lambda r: None)
        self._clock = clock

    # -- what the tasks do ---------------------------------------------------------------------

    def announce(self, key: Hashable, annotation: dict, client: str | None) -> Round:
        """Task ``key`` of the round its ``annotation`` names was submitted. Returns the
        round (already stopped, if the task joins a stopped round: it needs the stop)."""
        round_id = RoundId.from_annotation(annotation)
        rid = str(round_id)
        r = self.rounds.get(rid)
        if r is None:
            r = self.rounds[rid] = Round(rid, round_id.round, round_id.fit,
                                         int(annotation["quorum"]),
                                         str(annotation.get("unit", "partitions")), client,
                                         patience=float(annotation.get("patience", 0.0)),
                                         t_announced=self._clock())
        r.keys.add(key)
        r.open.add(key)
        self.key_round[key] = r
        return r

    def round_of(self, key: Hashable) -> Round | None:
        """The round task ``key`` belongs to (one dict lookup: most keys belong to none)."""
        return self.key_round.get(key)

    def processing(self, key: Hashable, worker: str) -> None:
        """Task ``key`` is now processing (running or queued) on ``worker`` (assigned, moved
        or stolen there)."""
        r = self.key_round.get(key)
        if r is None or key not in r.open:
            return
        self._unload(r, key)
        r.on[key] = worker
        r.load[worker] = r.load.get(worker, 0) + 1
        seen = self.fit_workers.get(r.fit)
        if seen is None:
            seen = self.fit_workers[r.fit] = set()
            if len(self.fit_workers) > MAX_FITS:
                self.fit_workers.popitem(last=False)
        seen.add(worker)

    def left(self, worker: str) -> None:
        """``worker`` left the cluster: its open tasks are processing nowhere until the
        scheduler places them again (:meth:`processing`)."""
        for r in self.rounds.values():
            if worker in r.load:
                for key in [k for k, w in r.on.items() if w == worker]:
                    self._unload(r, key)

    def finished(self, key: Hashable) -> Round | None:
        """Task ``key`` finished (``processing -> memory``). Returns its round if that round
        must be stopped now (its quorum reached without patience; once per round); with
        patience, the quorum sets the round's :attr:`Round.deadline` (call :meth:`expire`
        then)."""
        r = self.key_round.get(key)
        if r is None:
            return None
        r.finished += 1
        worker = r.on.get(key)
        self._settle(r, key)
        if r.unit == "workers":
            if worker is not None and not r.load.get(worker):
                r.done_workers.add(worker)
            count = len(r.done_workers)
        else:
            count = r.finished
        if r.stopped or not r.quorum or count < r.quorum or r.deadline is not None:
            return None
        now = self._clock()
        if r.patience > 0:
            if r.open:
                r.deadline = now + r.patience * max(now - r.t_announced, 0.0)
            return None
        r.stopped = True
        r.t_quorum = now
        return r

    def expire(self, rid: str) -> Round | None:
        """Round ``rid``'s deadline has come: returns the round if it must be stopped now
        (tasks still open, not stopped yet)."""
        r = self.rounds.get(rid)
        if r is None or r.stopped or not r.open or r.deadline is None:
            return None
        r.stopped = True
        r.t_quorum = self._clock()
        return r

    def erred(self, key: Hashable) -> None:
        """Task ``key`` failed: it settles, nothing more will come of it."""
        r = self.key_round.get(key)
        if r is not None:
            self._settle(r, key)

    def forgotten(self, key: Hashable) -> Round | None:
        """Task ``key`` was forgotten by the scheduler. Returns its round if that was the
        round's last key: the round is retired."""
        r = self.key_round.pop(key, None)
        if r is None:
            return None
        r.keys.discard(key)
        self._settle(r, key)
        if r.keys:
            return None
        self._retire(r)
        return r

    def reported_idle(self, rid: str, worker: str, keys: Iterable[Hashable], occupied: bool,
                      queued_on: Callable[[Hashable], str | None]) -> None:
        """``worker`` answered round ``rid``'s stop: ``keys`` were not executing there
        (``occupied``: other work held all its threads). A key counts as idle only while it
        is still queued on that worker (``queued_on(key)``): a task moved since gets the stop
        again at its new worker, whose answer counts."""
        r = self.rounds.get(rid)
        if r is None:
            return
        if occupied:
            r.occupied.add(worker)
        for key in keys:
            if key in r.open and queued_on(key) == worker:
                r.idle[key] = worker
                self._settle(r, key)

    # -- rounds and fits -----------------------------------------------------------------------

    def remove_client(self, client: str) -> list[Round]:
        """Retire the rounds of a client that left; returns them."""
        gone = [r for r in self.rounds.values() if r.client == client]
        for r in gone:
            for key in r.keys:
                self.key_round.pop(key, None)
            self.fit_workers.pop(r.fit, None)
            self._retire(r)
        return gone

    def forget_fit(self, fit: str) -> set[str]:
        """Drop ``fit``'s round log (its driver has read it); its rounds still running are
        kept out of the log when they retire. Returns the workers its tasks were sent to
        (they hold its stop flags)."""
        self.log.drop(fit)
        for r in self.rounds.values():
            if r.fit == fit:
                r.logged = False
        return self.fit_workers.pop(fit, set())

    def times(self, fit: str) -> dict[str, RoundTimes]:
        """When each round of ``fit`` reached its quorum and settled."""
        out: dict[str, RoundTimes] = {}
        for rid, _, n, tq, tl in self.log.of(fit):
            out[rid] = {"finished": n, "quorum_time": tq, "last_time": tl}
        for r in self.rounds.values():
            if r.fit == fit:
                out[r.rid] = {"finished": r.finished, "quorum_time": r.t_quorum,
                              "last_time": r.t_last}
        return out

    @staticmethod
    def _unload(r: Round, key: Hashable) -> None:
        w = r.on.pop(key, None)
        if w is not None:
            r.load[w] -= 1

    def _settle(self, r: Round, key: Hashable) -> None:
        if key in r.open:
            self._unload(r, key)
            r.open.discard(key)
            if not r.open:
                r.t_last = self._clock()
                self._on_settle(r)

    def _retire(self, r: Round) -> None:
        if self.rounds.pop(r.rid, None) is not None and r.logged:
            self.log.add(r.rid, r.fit, r.finished, r.t_quorum, r.t_last)
        self._on_settle(r)  # release waiters of a round that can no longer settle
