"""What a fit asks of the scheduler: threads, silent workers, where keys are, the plugin's
round log; and telling the plugin the fit has ended. The base of
:class:`~daskabsp.engine.link.Link`, which supplies ``client``, ``fit_id`` and ``path``."""

from __future__ import annotations

import math

import dask
from distributed import Future

from ..extension import FORGET_HANDLER, ROUND_INFO_HANDLER, RoundId, silent_of, stuck_of


def spill_threshold() -> float | None:
    """The fraction of a worker's memory limit where Dask starts moving its data to disk:
    ``distributed.worker.memory.target``, else ``.spill``, else ``.pause`` (None if all
    three are off)."""
    for key in ("target", "spill", "pause"):
        value = dask.config.get(f"distributed.worker.memory.{key}")
        if value:
            return float(value)
    return None


class SchedulerQueries:
    """The scheduler queries of one fit's :class:`~daskabsp.engine.link.Link`."""

    client: object
    fit_id: str
    path: object

    async def threads(self) -> dict[str, int]:
        """Threads per worker of the cluster now."""
        return await self.client.scheduler.ncores()

    async def memory_room(self, held: dict[str, int]) -> dict[str, float]:
        """Per worker with a memory limit, the bytes it can take before its managed memory
        reaches the threshold where Dask starts spilling to disk (:func:`spill_threshold`):
        a copy for helpers that made a worker spill would slow what it was meant to speed
        up. Its managed memory is the larger of its last heartbeat's and ``held`` (worker ->
        bytes of the fit's data on it, which a heartbeat may not count yet)."""
        fraction = spill_threshold()
        if fraction is None:
            return {}
        info = await self.client.scheduler.identity(n_workers=-1)
        room = {}
        for w, d in info.get("workers", {}).items():
            if d.get("memory_limit"):
                managed = (d.get("metrics") or {}).get("managed_bytes", 0)
                room[w] = fraction * d["memory_limit"] - max(managed, held.get(w, 0))
        return room

    async def silent(self, workers) -> set[str]:
        """Those of ``workers`` not heard from for ``daskabsp.unresponsive-after``."""
        return await silent_of(self.client, workers)

    async def stuck(self, keys) -> dict:
        """``{key: silent worker}`` for those of ``keys`` waiting on (or held only by)
        workers not heard from for ``daskabsp.unresponsive-after``."""
        return await stuck_of(self.client, keys)

    async def who_has(self, futures: list[Future]) -> dict[str, list[str]]:
        """``{key: workers holding it}`` of ``futures``."""
        return await self.client.scheduler.who_has(keys=[f.key for f in futures])

    async def round_times(self, rids: list[RoundId], epoch0: float):
        """Per round, from the scheduler's log: quorum to last result (the harvest latency),
        and when the quorum was reached (the stop sent) in seconds after ``epoch0``; None
        without the scheduler plugin."""
        if not self.path.scheduler_plugin:
            return None, None
        nan = [math.nan] * len(rids)
        try:
            info = await getattr(self.client.scheduler, ROUND_INFO_HANDLER)(fit=self.fit_id)
        except Exception:
            return nan, nan
        latency, stop_time = [], []
        for rid in rids:
            i = info.get(str(rid)) or {}
            tq, tl = i.get("quorum_time"), i.get("last_time")
            latency.append(tl - tq if tq is not None and tl is not None else math.nan)
            stop_time.append(tq - epoch0 if tq is not None else math.nan)
        return latency, stop_time

    async def forget(self) -> None:
        """Tell the scheduler plugin the fit has ended (it drops the fit's round log and the
        workers' stop flags)."""
        if self.path.scheduler_plugin:
            await getattr(self.client.scheduler, FORGET_HANDLER)(fit=self.fit_id)
