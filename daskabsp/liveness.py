"""Which workers have gone silent, and which tasks wait on them (pure functions of the
workers' last heartbeats, the time and the interval; the scheduler plugin supplies them).

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


def all_on(open_on: Mapping[Hashable, Any], quiet: Collection) -> list[tuple[Hashable, Any]]:
    """``[(key, worker), ...]`` of the tasks of ``open_on`` (key -> worker it runs on, or
    None) if every one of them is on a ``quiet`` worker; ``[]`` otherwise (a round whose
    tasks are all held up by silent workers is given up on; one that still has a task on a
    live worker waits for it)."""
    out = []
    for key, w in open_on.items():
        if w is None or w not in quiet:
            return []
        out.append((key, w))
    return out


def waiting_on(tasks: Iterable[Any], quiet: Collection) -> dict[Hashable, Any]:
    """``{key: worker}`` for those of ``tasks`` (the scheduler's task states) that wait on
    a ``quiet`` worker: running there, or needing (directly or through the tasks they wait
    for) a result that only quiet workers hold; ``worker`` is one of them."""
    memo: dict = {}

    def waits(ts):
        if ts.key not in memo:
            memo[ts.key] = None  # (a cycle cannot occur; this only ends the recursion)
            if ts.state == "memory":
                holders = ts.who_has or set()
                if holders and all(h in quiet for h in holders):
                    memo[ts.key] = next(iter(holders))
            elif ts.state in ("processing", "waiting", "queued", "no-worker"):
                memo[ts.key] = (ts.processing_on if ts.processing_on in quiet else next(
                    (w for w in map(waits, ts.dependencies) if w is not None), None))
        return memo[ts.key]

    return {ts.key: w for ts in tasks if (w := waits(ts)) is not None}
