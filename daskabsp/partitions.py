"""Placing the training data on the cluster: one partition per row chunk, lineage-backed.

In-memory input (numpy, CSR) becomes a dask array with one row chunk per partition; dask input
keeps its row chunks. The chunks are persisted once and each partition task receives the future
of its own chunk, so the scheduler runs it where the data lives, and if a worker dies its chunk
is recomputed elsewhere from the graph (scattered data would have no lineage).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dask
import dask.array as da
import numpy as np
import scipy.sparse as sp
from dask.base import tokenize
from dask.core import flatten
from distributed import Future, as_completed, futures_of


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

    def __len__(self) -> int:
        return len(self.sizes)

    @property
    def futures(self) -> list[Future]:
        return [f for f in (*self.X, *self.y, *self.sample_weight) if f is not None]


def _as_dask(a, chunks: tuple[int, ...], name: str):
    if a is None:
        return None
    if is_dask(a):
        return a.rechunk({0: chunks, **({1: -1} if a.ndim == 2 else {})})
    rc = (chunks, a.shape[1]) if a.ndim == 2 else (chunks,)
    return da.from_array(a, chunks=rc, asarray=not sp.issparse(a), name=f"daskabsp-{name}-"
                         + tokenize(a, chunks))


def row_chunks(X, n_partitions: int | None, n_threads: int, min_rows: int) -> tuple[int, ...]:
    """The row counts of the partitions of ``X``."""
    if is_dask(X) and n_partitions is None:
        return tuple(int(c) for c in X.chunks[0])
    n = X.shape[0]
    p = n_partitions or default_partitions(n, n_threads, min_rows)
    return split_rows(n, p)


async def place(client, X, y, sample_weight, chunks: tuple[int, ...]) -> Partitions:
    """Persist ``X``, ``y``, ``sample_weight`` on the cluster as ``len(chunks)`` row chunks."""
    arrays = [_as_dask(a, chunks, n) for a, n in ((X, "X"), (y, "y"), (sample_weight, "w"))]
    present = [a for a in arrays if a is not None]
    # In-memory input is deliberately sent inside the graph: that is its lineage.
    with dask.config.set({"distributed.admin.large-graph-warning-threshold": "1 PiB"}):
        persisted = client.persist(present)
    await wait_all(client, futures_of(persisted))
    it = iter(persisted)
    out = []
    for a in arrays:
        if a is None:
            out.append([None] * len(chunks))
            continue
        p = next(it)
        by_key = {f.key: f for f in futures_of(p)}
        out.append([by_key[k] for k in flatten(p.__dask_keys__())])
    return Partitions(out[0], out[1], out[2], chunks, int(X.shape[1]))


async def wait_all(client, futures) -> None:
    """Wait until ``futures`` of ``client`` are done (``distributed.wait`` would use the
    default client, which need not be ``client``)."""
    async for _ in as_completed(futures, loop=client.loop):
        pass


def check_finite_block(block) -> np.ndarray:
    """Whether a dense or sparse block holds only finite values (a 1-element array)."""
    data = block.data if sp.issparse(block) else block
    return np.array([bool(np.isfinite(data).all())])
