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
import contextlib
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

from ..extension import COPY_PREFIX, wait_all

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

    def keep_copy(self, p: int, worker: str, futures: tuple) -> None:
        """Record the copy of partition ``p`` on ``worker`` (its X, y, sample_weight)."""
        if not self.copies:
            self.copies = [{} for _ in self.sizes]
        self.copies[p][worker] = futures

    def drop_copies(self) -> list[Future]:
        """Forget every copy; the futures they held, for the caller to release."""
        made = [f for held in self.copies for futs in held.values() for f in futs
                if f is not None]
        self.copies = []
        return made


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
                silent: Callable[[list[str]], Awaitable[set[str]]] | None = None) -> Partitions:
    """Place ``X``, ``y``, ``sample_weight`` on the cluster as ``len(chunks)`` row chunks.

    ``silent(workers)``, if given, names those of ``workers`` that have stopped answering:
    in-memory rows on their way to such a worker go to another one instead.
    """
    if not any(is_dask(a) for a in (X, y, sample_weight)):
        return await _scatter(client, X, y, sample_weight, chunks, silent)
    held = in_memory_blocks(X, y, sample_weight)
    if not is_dask(held[0]):
        # X is a dask array made from a numpy array (``da.from_array(X)``): its graph is the
        # data itself, and persisting it would send all of it through the scheduler (Dask's
        # "Sending large graph" warning). Its blocks are scattered straight to the workers,
        # as in-memory rows are; only a target or weights computed from it (a classifier's
        # class codes, say: a vector) go through the scheduler.
        lazy = [a if is_dask(a) else None for a in held]
        parts = await _scatter(client, *(None if is_dask(a) else a for a in held), chunks,
                               silent)
        if any(a is not None for a in lazy):
            cols = _persisted(client, lazy, chunks)
            parts.y = cols[1] if lazy[1] is not None else parts.y
            parts.sample_weight = cols[2] if lazy[2] is not None else parts.sample_weight
            await wait_all(client, parts.futures)
        return parts
    out = _persisted(client, (X, y, sample_weight), chunks)
    parts = Partitions(out[0], out[1], out[2], chunks, int(X.shape[1]))
    await wait_all(client, parts.futures)
    return parts


class HeldRows:
    """The rows of a dask array whose blocks are numpy arrays held in its graph, read as one
    array (``shape``, ``ndim``, ``nbytes`` and row slices ``[a:b]``: a view when the rows lie
    in one block)."""

    def __init__(self, blocks: list[np.ndarray], shape: tuple[int, ...], dtype) -> None:
        self.blocks = blocks
        self.shape = shape
        self.ndim = len(shape)
        self.dtype = np.dtype(dtype)
        self.nbytes = int(sum(b.nbytes for b in blocks))
        self._starts = np.cumsum([0, *(b.shape[0] for b in blocks)])

    def __getitem__(self, rows: slice) -> np.ndarray:
        a, b, _ = rows.indices(self.shape[0])
        first = int(np.searchsorted(self._starts, a, side="right")) - 1
        last = int(np.searchsorted(self._starts, b, side="left"))
        parts = [blk[max(a - s, 0):b - s] for blk, s in
                 zip(self.blocks[first:last], self._starts[first:last], strict=True)]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _held(a) -> HeldRows | None:
    """``a``'s rows, if ``a`` is a dask array whose graph is its numpy blocks themselves
    (one layer, every key a literal array), else None."""
    graph = a.__dask_graph__()
    if len(getattr(graph, "layers", ())) != 1:
        return None
    rows = []
    for row in a.__dask_keys__():
        blocks = []
        for key in (row if a.ndim == 2 else [row]):
            value = graph[key]
            if type(value).__name__ == "DataNode":  # dask's wrapper of a literal
                value = getattr(value, "value", None)
            if not isinstance(value, np.ndarray):
                return None
            blocks.append(value)
        rows.append(blocks[0] if len(blocks) == 1 else np.hstack(blocks))
    return HeldRows(rows, tuple(int(n) for n in a.shape), a.dtype)


def in_memory_rows(a) -> np.ndarray | None:
    """The rows of a dask array made from an in-memory array, as that array.

    ``dask.array.from_array(X)`` keeps ``X``'s blocks in its graph: computing on it through a
    cluster sends them all to the scheduler. Its rows can be read here instead.

    Parameters
    ----------
    a : dask array or any array
        The array.

    Returns
    -------
    ndarray or None
        The rows, in one array, if ``a`` is a dask array whose graph holds its numpy blocks;
        None otherwise (in-memory arrays, dask arrays computed on the cluster).

    Examples
    --------
    >>> import numpy as np, dask.array as da
    >>> import daskabsp
    >>> y = np.arange(6)
    >>> daskabsp.in_memory_rows(da.from_array(y, chunks=2))
    array([0, 1, 2, 3, 4, 5])
    >>> daskabsp.in_memory_rows(da.arange(6, chunks=2)) is None
    True
    """
    if not is_dask(a):
        return None
    held = _held(a)
    return None if held is None else held[0:held.shape[0]]


def in_memory_blocks(*arrays) -> tuple:
    """``arrays`` with each dask array whose graph holds its numpy blocks replaced by those
    rows (:class:`HeldRows`); other arrays (in memory, or dask input computed on the
    cluster) as given."""
    return tuple(a if not is_dask(a) else (_held(a) or a) for a in arrays)


def _persisted(client, arrays, chunks: tuple[int, ...]) -> list[list[Future | None]]:
    """Per array of ``arrays`` (None stays None), the futures of its ``chunks`` row chunks,
    persisted on the cluster (in-memory arrays through the graph: with dask ones only)."""
    dasked = [as_dask(a, chunks) for a in arrays]
    present = [a for a in dasked if a is not None]
    persisted = client.persist(present)
    it = iter(persisted)
    out: list[list[Future | None]] = []
    for a in dasked:
        if a is None:
            out.append([None] * len(chunks))
            continue
        p = next(it)
        by_key = {f.key: f for f in futures_of(p)}
        out.append([by_key[k] for k in flatten(p.__dask_keys__())])
    return out


async def _scatter(client, X, y, sample_weight, chunks: tuple[int, ...],
                   silent=None) -> Partitions:
    """Scatter in-memory input: each partition's rows of ``X``, ``y`` and ``sample_weight``
    to one worker, the partitions dealt round-robin over the worker threads."""
    nthreads = await client.scheduler.ncores()
    slots = [w for w, n in sorted(nthreads.items()) for _ in range(max(n, 1))]
    bounds = np.cumsum((0, *chunks))
    placed = await asyncio.gather(*(
        _scatter_watched(client, (X, y, sample_weight), a, b, slots[p % len(slots)], silent)
        for p, (a, b) in enumerate(itertools.pairwise(bounds))))
    out = [list(col) for col in zip(*placed, strict=True)]
    return Partitions(out[0], out[1], out[2], chunks, int(X.shape[1]))


async def _scatter_watched(client, arrays, a: int, b: int, worker: str,
                           silent) -> list[Future | None]:
    """:func:`_scatter_rows` to ``worker``; if ``worker`` leaves the cluster (killed: the
    direct transfer would retry its connection for half a minute, then fail) or goes silent
    (frozen: the transfer would wait for it) meanwhile, to a live worker that is not silent.
    While every worker is silent the transfer waits: a cluster that is busy as a whole
    (starting, importing) answers again."""
    while True:
        task = asyncio.ensure_future(_scatter_rows(client, arrays, a, b, worker))
        others: list[str] = []
        while not others:
            done, _ = await asyncio.wait({task}, timeout=_WATCH_EVERY)
            if done and task.exception() is None:
                return task.result()
            live = sorted(await client.scheduler.ncores())
            quiet = await silent(live) if silent is not None else set()
            if done or worker in quiet or worker not in live:
                others = [w for w in live if w not in quiet and w != worker]
                if done and not others:
                    if live:  # its worker is still listed, or came back: try again shortly
                        await asyncio.sleep(_WATCH_EVERY)
                        others = live
                    else:
                        raise OSError(f"no worker left to place rows {a}:{b} on") from \
                            task.exception()
        task.cancel()
        worker = others[a % len(others)]


async def _scatter_rows(client, arrays, a: int, b: int, worker: str) -> list[Future | None]:
    """Rows ``a:b`` of each of ``arrays`` (None stays None) scattered to ``worker``, as
    dense arrays numpy reads in place (see :func:`aligned`)."""
    token = uuid.uuid4().hex[:8]
    data = {i: arr[a:b] for i, arr in enumerate(arrays) if arr is not None}
    try:  # straight to the worker; through the scheduler only if it cannot be reached
        sent = await client.scatter({f"daskabsp-sent-{i}-{token}": d for i, d in data.items()},
                                    workers=[worker], hash=False, direct=True)
    except OSError:
        sent = await client.scatter({f"daskabsp-sent-{i}-{token}": d for i, d in data.items()},
                                    workers=[worker], hash=False, direct=False)
    futs: list[Future | None] = [None] * len(arrays)
    for i, d in data.items():
        f = sent[f"daskabsp-sent-{i}-{token}"]
        # numpy's own function, which any scheduler can import (CSR reads as fast either way)
        futs[i] = (client.submit(np.require, f, None, "A", key=f"daskabsp-{i}-{token}",
                                 workers=[worker], allow_other_workers=True, pure=False)
                   if isinstance(d, np.ndarray) else f)
    del sent  # the realigned futures hold what they need of the rows as received
    done = [f for f in futs if f is not None]
    await wait_all(client, done)
    if any(f.status != "finished" for f in done):  # lost with the worker before realigned
        raise OSError(f"rows {a}:{b} were lost on {worker} as they arrived")
    return futs


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


def copy_on(client, futs, worker: str, prefix: str = COPY_PREFIX) -> list[Future | None]:
    """Start a copy of each of ``futs`` (None stays None) on ``worker``: a task there that
    returns its argument (:func:`aligned`), which Dask fetches from where it lives. Copies
    are keys of their own, so Dask's active memory manager, which drops extra replicas of a
    key, leaves them alone; their keys start with ``prefix``, which the scheduler plugin
    keeps out of Dask's work stealing (:data:`~daskabsp.extension.COPY_PREFIX`). The task
    only prefers ``worker``: a task strictly bound to a worker that dies waits for it
    forever (``no-worker``), and anything waiting on the copy with it; the caller checks
    where each copy landed."""
    return [None if f is None else client.submit(aligned, f, workers=[worker],
                                                 allow_other_workers=True, pure=False,
                                                 key=f"{prefix}-{uuid.uuid4().hex[:12]}")
            for f in futs]


def aligned(a: Any) -> Any:
    """``a`` itself if numpy can read it in place, else a copy that it can.

    Rows Dask moves between processes (scattered, fetched for a copy) are deserialized as
    views of the received frames, often at an address that is no multiple of their item
    size; numpy then reads them through a buffered, unaligned path. A ``LogisticGD`` scan
    took 46 ns a row on such rows against 35 on aligned ones, and a helper reading such a
    copy ran at half its own partition's speed beside another scan. (CSR rows read as
    fast either way.) Runs on a worker, once per placed or copied block.
    """
    return a.copy(order="K") if isinstance(a, np.ndarray) and not a.flags.aligned else a


async def nbytes_by_worker(client, parts: Partitions, owners: list[str]) -> dict[str, int]:
    """Bytes of training data each worker holds for the fit (its partitions and copies), as
    the scheduler measured them."""
    where = [(w, f.key) for p, owner in enumerate(owners)
             for w, futs in parts.holders(p, owner).items() for f in futs if f is not None]
    size = await known_nbytes(client, [k for _, k in where])
    out: dict[str, int] = {}
    for w, k in where:
        out[w] = out.get(w, 0) + int(size.get(k, 0))
    return out


async def known_nbytes(client, keys: list) -> dict:
    """Bytes of each of ``keys`` as the scheduler measured them; keys it no longer knows (lost
    with a worker that was killed a moment ago) are left out: its ``nbytes`` handler raises
    ``KeyError`` for the whole request (a fault schedule failed a fit on it)."""
    try:
        return await client.scheduler.nbytes(keys=keys, summary=False)
    except KeyError:
        out: dict = {}
        for k in keys:
            with contextlib.suppress(KeyError):
                out.update(await client.scheduler.nbytes(keys=[k], summary=False))
        return out
