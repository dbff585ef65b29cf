"""Which workers have gone silent, and which tasks wait on them or on workers that left
(pure functions of the workers' last heartbeats, the time, the interval and the task states;
the scheduler plugin supplies them).

A cluster of thousands of workers is never scanned as a whole to answer for a few of them:
:class:`Quiet` judges one worker at a time, and checks the cluster-wide rule (nobody is
silent when nobody at all was heard from) once, stopping at the first worker heard from.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from typing import Any

from distributed.scheduler import heartbeat_interval

#: A worker is silent only after this many of the scheduler's heartbeat intervals.
MISSED_HEARTBEATS = 3


class Quiet:
    """The silent workers of ``everyone`` as a container: ``worker in quiet``.

    A worker is silent when not heard from (``last_seen(worker)``, a time) for ``seconds``,
    or for :data:`MISSED_HEARTBEATS` heartbeat intervals if that is longer (Dask spaces
    heartbeats out as a cluster grows: 0.5 s up to 10 workers, 2 s at 100); none is if no
    worker at all was: then the cluster as a whole is held up (every worker importing the
    modules a fit's first tasks need, or the scheduler's own event loop blocked), not one
    worker frozen, and giving up on all of them would leave no one to move their rows to.
    """

    def __init__(self, everyone: Collection, last_seen: Callable[[Any], float], now: float,
                 seconds: float) -> None:
        self._everyone = everyone
        self._last_seen = last_seen
        self._now = now
        self.seconds = max(seconds, MISSED_HEARTBEATS * heartbeat_interval(len(everyone)))
        self._anyone_heard: bool | None = None

    def _stale(self, w: Any) -> bool:
        return self._now - self._last_seen(w) > self.seconds

    def __contains__(self, w: Any) -> bool:
        if w is None or not self._stale(w):
            return False
        if self._anyone_heard is None:  # stops at the first worker heard from
            self._anyone_heard = not all(map(self._stale, self._everyone))
        return self._anyone_heard


def silent(last_seen: Mapping[Any, float], now: float, seconds: float) -> set:
    """The workers of ``last_seen`` (worker -> last time heard from) that are silent (see
    :class:`Quiet`)."""
    quiet = Quiet(last_seen, last_seen.__getitem__, now, seconds)
    return {w for w in last_seen if w in quiet}


def given_up(open_keys: Iterable[Hashable], stuck: Mapping[Hashable, str],
             present: Collection) -> list[tuple[Hashable, str]]:
    """``[(key, worker), ...]`` of the open tasks of a round to give up on, from ``stuck``
    (:func:`waiting_on` of them): those that can never run (:func:`stranded`: bound to a
    worker no longer in ``present``) at once; the others only once every open task is stuck
    (a round that still has a task on a live worker waits for it: a worker that is only
    slow to heartbeat costs nothing while the round runs anyway)."""
    keys = list(open_keys)
    if keys and all(k in stuck for k in keys):
        return [(k, stuck[k]) for k in keys]
    return [(k, stuck[k]) for k in keys if k in stuck and stuck[k] not in present]


def stranded(ts: Any, present: Collection) -> str | None:
    """The worker a task waiting for a worker (``no-worker``) is strictly bound to, if none
    of those it may run on is in ``present`` (a restarted worker has a new address: such a
    task would wait forever); None otherwise."""
    if ts.state != "no-worker" or getattr(ts, "loose_restrictions", False):
        return None
    names = getattr(ts, "worker_restrictions", None)
    if names and not any(w in present for w in names):
        return min(names)
    return None


def waiting_on(tasks: Iterable[Any], quiet: Collection,
               present: Collection | None = None) -> dict[Hashable, str]:
    """``{key: worker}`` for those of ``tasks`` (the scheduler's task states) that wait on
    a ``quiet`` worker (running there, or needing, directly or through the tasks they wait
    for, a result that only quiet workers hold) or, given the addresses ``present``, on a
    worker that has left (:func:`stranded`); ``worker`` is the address of one of them."""
    memo: dict = {}

    def waits(ts):
        if ts.key not in memo:
            memo[ts.key] = None  # (a cycle cannot occur; this only ends the recursion)
            if ts.state == "memory":
                holders = ts.who_has or set()
                if holders and all(h in quiet for h in holders):
                    memo[ts.key] = _address(next(iter(holders)))
            elif ts.state in ("processing", "waiting", "queued", "no-worker"):
                gone = stranded(ts, present) if present is not None else None
                memo[ts.key] = gone or (
                    _address(ts.processing_on) if ts.processing_on in quiet else next(
                        (w for w in map(waits, ts.dependencies) if w is not None), None))
        return memo[ts.key]

    return {ts.key: w for ts in tasks if (w := waits(ts)) is not None}


def _address(ws: Any) -> str:
    return getattr(ws, "address", ws)
