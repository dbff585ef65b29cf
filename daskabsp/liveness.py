"""Which workers have gone silent, and which tasks wait on them (pure functions of the
workers' last heartbeats, the time and the interval; the scheduler plugin supplies them)."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from distributed.scheduler import heartbeat_interval

#: A worker is silent only after this many of the scheduler's heartbeat intervals.
MISSED_HEARTBEATS = 3


def silent(last_seen: Mapping[Any, float], now: float, seconds: float) -> set:
    """The workers of ``last_seen`` (worker -> last time heard from) not heard from for
    ``seconds``, or for :data:`MISSED_HEARTBEATS` heartbeat intervals if that is longer
    (Dask spaces heartbeats out as a cluster grows: 0.5 s up to 10 workers, 2 s at 100);
    none if that is every worker: then the cluster as a whole is held up (every worker
    importing the modules a fit's first tasks need, or the scheduler's own event loop
    blocked), not one worker frozen, and giving up on all of them would leave no one to move
    their rows to."""
    seconds = max(seconds, MISSED_HEARTBEATS * heartbeat_interval(len(last_seen)))
    quiet = {w for w, t in last_seen.items() if now - t > seconds}
    return set() if len(quiet) == len(last_seen) else quiet


def all_on(open_on: Mapping[Hashable, Any], quiet: set) -> list[tuple[Hashable, Any]]:
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


def waiting_on(tasks: Iterable[Any], quiet: set) -> dict[Hashable, Any]:
    """``{key: worker}`` for those of ``tasks`` (the scheduler's task states) that wait on
    a ``quiet`` worker: running there, or needing (directly or through the tasks they wait
    for) a result that only quiet workers hold; ``worker`` is one of them."""
    if not quiet:
        return {}
    memo: dict = {}

    def waits(ts):
        if ts.key not in memo:
            memo[ts.key] = None  # (a cycle cannot occur; this only ends the recursion)
            if ts.state == "memory":
                holders = ts.who_has or set()
                if holders and not holders - quiet:
                    memo[ts.key] = next(iter(holders))
            elif ts.state in ("processing", "waiting", "queued", "no-worker"):
                memo[ts.key] = (ts.processing_on if ts.processing_on in quiet else next(
                    (w for w in map(waits, ts.dependencies) if w is not None), None))
        return memo[ts.key]

    return {ts.key: w for ts in tasks if (w := waits(ts)) is not None}
