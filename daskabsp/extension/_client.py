"""The driver's side of the extension: install the plugins, and ask the scheduler plugin
which workers went silent and which tasks wait on them.

Runs in the fitting process. :func:`ensure_plugins` registers the scheduler plugin (which
installs the worker plugin on every worker) once per client, or falls back to the driver
sending the stops itself; :func:`silent_of`, :func:`stuck_of` and :func:`gather_answering`
reach the plugin's handlers so that the engine never waits on a worker that stopped
answering, or on a task bound to one that left.
"""

from __future__ import annotations

import asyncio
import contextlib
import warnings

from distributed import as_completed

from .. import config
from ._protocol import SILENT_HANDLER, STUCK_HANDLER, SignalPath
from ._scheduler_plugin import AbspSchedulerPlugin
from ._worker_plugin import AbspWorkerPlugin

_ready: dict[str, SignalPath] = {}  # client id -> how stops are sent (see ensure_plugins)
_warned_fallback = False


async def ensure_plugins(client) -> SignalPath:
    """Register the daskabsp plugins on ``client``'s cluster (once per client).

    Returns how stops are sent: :attr:`SignalPath.SCHEDULER` (the scheduler plugin),
    :attr:`SignalPath.DRIVER` (the ``daskabsp.signal`` config asks for it) or
    :attr:`SignalPath.OPAQUE` (the scheduler plugin could not be installed, e.g. daskabsp is
    missing on the scheduler: the driver sends the stops and submits tasks whose functions
    the scheduler need not import).
    """
    global _warned_fallback
    if client.id in _ready:
        return _ready[client.id]
    path = SignalPath.DRIVER
    if config.get("signal") == "scheduler":
        try:  # the scheduler plugin installs the worker plugin itself
            await client.register_plugin(AbspSchedulerPlugin())
            path = SignalPath.SCHEDULER
        except Exception as e:
            path = SignalPath.OPAQUE
            if not _warned_fallback:
                _warned_fallback = True
                warnings.warn(
                    "daskabsp could not install its scheduler plugin (is daskabsp installed "
                    f"on the scheduler?): {e!r}. The fitting process will send the stops "
                    "itself, which adds a round trip to each harvest.",
                    RuntimeWarning,
                    stacklevel=2,
                )
    if path is not SignalPath.SCHEDULER:
        await client.register_plugin(AbspWorkerPlugin())
    _ready[client.id] = path
    return path


async def silent_of(client, workers) -> set[str]:
    """Those of ``workers`` not heard from for ``daskabsp.unresponsive-after``, judged on
    the scheduler's clock (none without daskabsp's scheduler plugin)."""
    if await ensure_plugins(client) is not SignalPath.SCHEDULER:
        return set()
    return set(await getattr(client.scheduler, SILENT_HANDLER)(
        workers=sorted(workers), seconds=config.seconds("unresponsive-after")))


async def stuck_of(client, keys) -> dict:
    """``{key: silent worker}`` for those of ``keys`` waiting on (or held only by) workers
    not heard from for ``daskabsp.unresponsive-after``, naming one such worker (none without
    daskabsp's scheduler plugin)."""
    if await ensure_plugins(client) is not SignalPath.SCHEDULER:
        return {}
    return dict(await getattr(client.scheduler, STUCK_HANDLER)(
        keys=list(keys), seconds=config.seconds("unresponsive-after")))


async def gather_answering(client, futures: list) -> tuple[dict, dict]:
    """Wait for ``futures`` and gather them, except those that wait on (or whose results
    only) workers not heard from for ``daskabsp.unresponsive-after`` (hold): returns the
    results by key, and ``{key: silent worker}`` for the futures given up on."""
    if await ensure_plugins(client) is not SignalPath.SCHEDULER:
        return dict(zip((f.key for f in futures), await _wait_and_gather(client, futures),
                        strict=True)), {}
    seconds = config.seconds("unresponsive-after")
    given_up: dict = {}
    while True:
        live = [f for f in futures if f.key not in given_up]
        task = asyncio.ensure_future(_wait_and_gather(client, live))
        while True:
            done, _ = await asyncio.wait({task}, timeout=min(0.5, seconds / 4))
            if done:
                return dict(zip((f.key for f in live), task.result(), strict=True)), given_up
            # waiting to run, or (finished just before its worker froze) to be fetched
            stuck = await stuck_of(client, [f.key for f in live])
            if stuck:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
                given_up.update(stuck)
                break


async def _wait_and_gather(client, futures: list) -> list:
    await wait_all(client, futures)
    return await client.gather(futures, asynchronous=True)


async def wait_all(client, futures) -> None:
    """Wait until ``futures`` of ``client`` are done (``distributed.wait`` would use the
    default client, which need not be ``client``)."""
    async for _ in as_completed(futures, loop=client.loop):
        pass
