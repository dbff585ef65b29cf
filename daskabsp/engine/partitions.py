"""Placing the training data on the cluster: one partition per row chunk.

Dask input keeps its row chunks (rechunked if asked), persisted once with its lineage: a chunk
a dead worker held is recomputed elsewhere. In-memory input (numpy, CSR) is split into row
chunks scattered straight to the workers, never through the scheduler (in a task graph the
scheduler would hold a copy of ``X`` for the whole fit); the fitting process holds ``X``, so
it is the lineage: a round that loses a partition with its worker places the data again and
runs again. Either way each partition task receives the futures of its own chunks, so the
scheduler runs it where the data lives.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import dask.array as da
import numpy as np
import scipy.sparse as sp
from dask.core import flatten
from distributed import Future, futures_of

from ..extension import wait_all

#: Seconds between checks that a worker receiving data still answers.
_WATCH_EVERY = 0.5


def is_dask(a: Any) -> bool:
    return isinstance(a, da.Array)


def split_rows(n_rows: int, n_partitions: int) -> tuple[int, ...]:
    """Row counts of ``n_partitions`` near-equal partitions of ``n_rows`` rows."""
    q, r = divmod(n_rows, n_partitions)
    return tuple(q + (i < r) for i in range(n_partitions))


def default_partitions(n_rows: int, n_threads: int, min_rows: int) -> int:
    """One partition per worker thread, but none smaller than ``min_rows`` rows."""
    return max(1, min(n_threads, n_rows // max(min_rows, 1)))


@dataclass
class Partitions:
    """The persisted partitions of a fit: one future per row chunk of each input."""

    X: list[Future]
    y: list[Future | None]
    sample_weight: list[Future | None]
    sizes: tuple[int, ...]
    n_features: int
    #: Per partition, the copies helpers read: worker -> (X, y, sample_weight) futures there.
    copies: list[dict[str, tuple]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.sizes)

    @property
    def futures(self) -> list[Future]:
        return [f for f in (*self.X, *self.y, *self.sample_weight) if f is not None]

    def holders(self, p: int, owner: str) -> dict[str, tuple]:
        """Where partition ``p`` can be read: its ``owner`` and the workers with a copy."""
        own = (self.X[p], self.y[p], self.sample_weight[p])
        return {owner: own, **(self.copies[p] if self.copies else {})}


def as_dask(a, chunks: tuple[int, ...]):
    """``a`` (dask or in-memory; None stays None) as a dask array of row chunks ``chunks``,
    features in one chunk."""
    if a is None:
        return None
    if is_dask(a):
        return a.rechunk({0: chunks, **({1: -1} if a.ndim == 2 else {})})
    rc = (chunks, a.shape[1]) if a.ndim == 2 else (chunks,)
    return da.from_array(a, chunks=rc, asarray=not sp.issparse(a))


def row_chunks(X, n_partitions: int | None, n_threads: int, min_rows: int) -> tuple[int, ...]:
    """The row counts of the partitions of ``X``."""
    if is_dask(X) and n_partitions is None:
        return tuple(int(c) for c in X.chunks[0])
    n = X.shape[0]
    p = n_partitions or default_partitions(n, n_threads, min_rows)
    return split_rows(n, p)


async def place(client, X, y, sample_weight, chunks: tuple[int, ...], *,
                silent: Callable[[list[str]], Awaitable[set[str]]] | None = None,
                stuck: Callable[[list], Awaitable[set]] | None = None,
                source: tuple | None = None) -> Partitions:
    """Place ``X``, ``y``, ``sample_weight`` on the cluster as ``len(chunks)`` row chunks.

    ``silent(workers)``, if given, names those of ``workers`` that have stopped answering:
    in-memory rows on their way to such a worker go to another one instead. For dask input
    with the in-memory ``source`` it was made from (see :func:`daskabsp.fit`), a partition
    that ``stuck(keys)`` says waits on such workers is scattered from ``source`` instead.
    """
    if not any(is_dask(a) for a in (X, y, sample_weight)):
        return await _scatter(client, X, y, sample_weight, chunks, silent)
    arrays = [as_dask(a, chunks) for a in (X, y, sample_weight)]
    present = [a for a in arrays if a is not None]
    persisted = client.persist(present)
    it = iter(persisted)
    out = []
    for a in arrays:
        if a is None:
            out.append([None] * len(chunks))
            continue
        p = next(it)
        by_key = {f.key: f for f in futures_of(p)}
        out.append([by_key[k] for k in flatten(p.__dask_keys__())])
    parts = Partitions(out[0], out[1], out[2], chunks, int(X.shape[1]))
    if source is None or stuck is None or silent is None:
        await wait_all(client, parts.futures)
        return parts
    waiter = None
    while True:
        pending = parts.futures
        if waiter is None:
            waiter = asyncio.ensure_future(wait_all(client, pending))
        done, _ = await asyncio.wait({waiter}, timeout=_WATCH_EVERY)
        if done:
            waiter.result()
        # (once all are done: any held only by a worker silent already, say frozen while
        # the caller made the input)
        bad = await stuck([f.key for f in pending if done or not f.done()])
        if not bad:
            if done:
                return parts
            continue
        waiter.cancel()
        waiter = None
        lost = [p for p, fs in enumerate(zip(parts.X, parts.y, parts.sample_weight,
                                               strict=True))
                if any(f is not None and f.key in bad for f in fs)]
        workers = sorted(await client.scheduler.ncores())
        quiet = await silent(workers)
        workers = [w for w in workers if w not in quiet] or workers
        await asyncio.gather(*(move(client, parts, p, *source, workers[p % len(workers)])
                               for p in lost))


async def _scatter(client, X, y, sample_weight, chunks: tuple[int, ...],
                   silent=None) -> Partitions:
    """Scatter in-memory input: each partition's rows of ``X``, ``y`` and ``sample_weight``
    to one worker, the partitions dealt round-robin over the worker threads."""
    nthreads = await client.scheduler.ncores()
    slots = [w for w, n in sorted(nthreads.items()) for _ in range(max(n, 1))]
    bounds = np.cumsum((0, *chunks))
    placed = await asyncio.gather(*(
        _scatter_watched(client, (X, y, sample_weight), a, b, slots[p % len(slots)],
                         sorted(nthreads), silent)
        for p, (a, b) in enumerate(itertools.pairwise(bounds))))
    out = [list(col) for col in zip(*placed, strict=True)]
    return Partitions(out[0], out[1], out[2], chunks, int(X.shape[1]))


async def _scatter_watched(client, arrays, a: int, b: int, worker: str, workers: list[str],
                           silent) -> list[Future | None]:
    """:func:`_scatter_rows` to ``worker``; if ``worker`` goes silent meanwhile (frozen: the
    transfer would wait for it), to a worker that is not. While every worker is silent the
    transfer waits: a cluster that is busy as a whole (starting, importing) answers again."""
    if silent is None:
        return await _scatter_rows(client, arrays, a, b, worker)
    while True:
        task = asyncio.ensure_future(_scatter_rows(client, arrays, a, b, worker))
        others: list[str] = []
        while not others:
            done, _ = await asyncio.wait({task}, timeout=_WATCH_EVERY)
            if done:
                return task.result()
            quiet = await silent(workers)
            if worker in quiet:
                others = [w for w in workers if w not in quiet]
        task.cancel()
        worker = others[a % len(others)]


async def _scatter_rows(client, arrays, a: int, b: int, worker: str) -> list[Future | None]:
    """Rows ``a:b`` of each of ``arrays`` (None stays None) scattered to ``worker``."""
    token = uuid.uuid4().hex[:8]
    data = {f"daskabsp-{i}-{token}": arr[a:b] for i, arr in enumerate(arrays)
            if arr is not None}
    try:  # straight to the worker; through the scheduler only if it cannot be reached
        futs = await client.scatter(data, workers=[worker], hash=False, direct=True)
    except OSError:
        futs = await client.scatter(data, workers=[worker], hash=False, direct=False)
    return [futs.get(f"daskabsp-{i}-{token}") for i in range(len(arrays))]


async def move(client, parts: Partitions, p: int, X, y, sample_weight, worker: str) -> None:
    """Scatter partition ``p``'s rows of in-memory input again, to ``worker``, and make
    ``parts`` point at the new copy (the old one is on a worker that does not answer)."""
    parts.X[p], parts.y[p], parts.sample_weight[p] = await scatter_partition(
        client, parts, p, (X, y, sample_weight), worker)


async def scatter_partition(client, parts: Partitions, p: int, arrays,
                            worker: str) -> list[Future | None]:
    """Partition ``p``'s rows of the in-memory ``arrays`` (``X, y, sample_weight``)
    scattered to ``worker``."""
    a = sum(parts.sizes[:p])
    return await _scatter_rows(client, arrays, a, a + parts.sizes[p], worker)


def copy_on(client, futs, worker: str, prefix: str = "daskabsp-copy") -> list[Future | None]:
    """Start a copy of each of ``futs`` (None stays None) on ``worker``: a task there that
    returns its argument, which Dask fetches from where it lives. Copies are keys of their
    own, so Dask's active memory manager, which drops extra replicas of a key, leaves them
    alone; their keys start with ``prefix``. The task only prefers ``worker``: a task
    strictly bound to a worker that dies waits for it forever (``no-worker``), and anything
    waiting on the copy with it; the caller checks where each copy landed."""
    return [None if f is None else client.submit(_same, f, workers=[worker],
                                                 allow_other_workers=True, pure=False,
                                                 key=f"{prefix}-{uuid.uuid4().hex[:12]}")
            for f in futs]


def _same(a):
    return a


async def nbytes_by_worker(client, parts: Partitions, owners: list[str]) -> dict[str, int]:
    """Bytes of training data each worker holds for the fit (its partitions and copies), as
    the scheduler measured them."""
    where = [(w, f.key) for p, owner in enumerate(owners)
             for w, futs in parts.holders(p, owner).items() for f in futs if f is not None]
    size = await client.scheduler.nbytes(keys=[k for _, k in where], summary=False)
    out: dict[str, int] = {}
    for w, k in where:
        out[w] = out.get(w, 0) + int(size.get(k, 0))
    return out
