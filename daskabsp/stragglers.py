"""Emulated stragglers: make chosen workers behave as if their CPU were slower.

This is emulation, for tests, benchmarks and demos: after each chunk of a partition scan that
took ``t`` seconds, a slowed worker sleeps ``(factor - 1) * t``. The worker's other work (data
transfer, the event loop) is not slowed, and sleeping frees the core for the other workers, as a
slower machine of its own would.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from dask.base import tokenize
from distributed.diagnostics.plugin import WorkerPlugin

from .runtime import SLOW_EXTENSION


class SlowWorkers(WorkerPlugin):
    """A worker plugin that slows the partition scans of the given workers.

    Parameters
    ----------
    factors : mapping of str to float
        Worker address (or worker name) to slowdown factor (>= 1): a worker with factor 4
        scans its partitions as if its CPU were 4 times slower.

    Examples
    --------
    >>> client.register_plugin(SlowWorkers({addr: 4.0}))  # doctest: +SKIP
    """

    idempotent = False

    def __init__(self, factors: Mapping[str, float]) -> None:
        for addr, f in factors.items():
            if isinstance(f, bool) or not isinstance(f, (int, float)) or not f >= 1:
                raise ValueError(
                    f"The slowdown factor of worker {addr!r} must be a float in the range "
                    f"[1, inf). Got {f!r} instead."
                )
        self.factors = {str(k): float(v) for k, v in factors.items()}
        self.name = f"daskabsp-slow-workers-{tokenize(sorted(self.factors.items()))}"

    def setup(self, worker) -> None:
        f = self.factors.get(worker.address, self.factors.get(str(worker.name)))
        if f is not None:
            worker.extensions[SLOW_EXTENSION] = f

    def teardown(self, worker) -> None:
        worker.extensions.pop(SLOW_EXTENSION, None)


@contextmanager
def slow_workers(client, factors: Mapping[str, float]) -> Iterator[SlowWorkers]:
    """Slow the given workers while the block runs (synchronous client).

    Parameters
    ----------
    client : distributed.Client
    factors : mapping of str to float
        Worker address (or name) to slowdown factor, see :class:`SlowWorkers`.
    """
    plugin = SlowWorkers(factors)
    client.register_plugin(plugin)
    try:
        yield plugin
    finally:
        client.unregister_worker_plugin(plugin.name)
