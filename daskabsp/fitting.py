"""The engine's public face: :func:`fit` a program, :func:`place` rows once for several fits.

Arguments are checked here, in scikit-learn's wording, before anything is submitted; the
fit itself runs in :mod:`daskabsp.engine`.
"""

from __future__ import annotations

import time
from collections.abc import Coroutine
from functools import partial
from typing import Any

import dask.array as da
import distributed
import numpy as np
import scipy.sparse as sp

from . import config
from .cluster import blas_per_worker, get_client
from .engine.caller import run_sync, seceded
from .engine.context import FitOptions
from .engine.link import Link
from .engine.partitions import Partitions, is_dask, row_chunks
from .engine.partitions import place as place_rows
from .engine.placement import Placement
from .engine.run import FitResult, FitRun, Rows
from .extension import silent_of
from .monitor.callbacks import CallbackArg, CallbackList, ProgressBar, as_callbacks
from .policies import Policy, as_policy
from .programs.base import Program
from .validation import check_data, check_options

__all__ = ["FitResult", "PlacedData", "fit", "fit_async", "place", "place_async"]

#: Seconds of chunk work per float of partition statistics, at least: adding a chunk's
#: statistics into the accumulator costs about 3 ns per float (measured: a multinomial
#: Hessian of 650^2 floats costs 1.2 ms per chunk), which should stay under a tenth of the
#: chunk's work.
CHUNK_SECONDS_PER_STAT = 3e-8


class PlacedData:
    """Training rows placed on the cluster once, for several fits or passes over them.

    Made by :func:`place`; pass it to :func:`fit` as ``X`` (with ``y`` and
    ``sample_weight`` left out: they were placed with it). Its partitions are row chunks,
    each held by one worker; :attr:`X` (and :attr:`y`, :attr:`sample_weight`) show them as
    dask arrays, one chunk per partition, for computations of one's own (an estimator's
    initialisation, say). Rows placed from memory are kept by this object too: a partition
    whose worker stops answering is scattered again from them.

    Attributes
    ----------
    X : dask.array.Array
        The rows, one chunk per partition.
    y, sample_weight : dask.array.Array or None
        The target and weights placed with them.
    sizes : tuple of int
        Rows per partition.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> X, y = make_classification(n_samples=2_000, n_features=5, random_state=0)
    >>> import daskabsp
    >>> placed = daskabsp.place(X, y, n_partitions=2)
    >>> placed.sizes, placed.shape
    ((1000, 1000), (2000, 5))
    >>> placed.X.chunks                               # one chunk per partition
    ((1000, 1000), (5,))
    >>> placed.release()
    """

    def __init__(self, client, parts: Partitions, data: tuple, source: tuple | None,
                 scatter_rate: float | None) -> None:
        self.client = client
        self._parts = parts
        self._data = data
        self._source = source
        self._scatter_rate = scatter_rate
        X = data[0]
        meta = X[:0] if not is_dask(X) else X._meta
        self.X = _rows_array(parts.X, parts.sizes, (X.shape[1],), X.dtype, meta)
        self.y, self.sample_weight = (
            None if a is None else _rows_array(fs, parts.sizes, (), a.dtype, np.empty(0, a.dtype))
            for a, fs in zip(data[1:], (parts.y, parts.sample_weight), strict=True))

    @property
    def sizes(self) -> tuple[int, ...]:
        return self._parts.sizes

    @property
    def n_partitions(self) -> int:
        return len(self._parts.sizes)

    @property
    def shape(self) -> tuple[int, int]:
        return int(sum(self.sizes)), self._parts.n_features

    def __repr__(self) -> str:
        n, d = self.shape
        return (f"<daskabsp.PlacedData: {n} rows x {d} features in {self.n_partitions} "
                "partitions>")

    def release(self) -> None:
        """Release the rows on the cluster (fits that use them keep them until they end)."""
        for f in self._parts.futures:
            f.release()

    def _placement(self, link: Link) -> Placement:
        """A fit's own view of the rows: the fit's copies and re-placements stay in it."""
        p = self._parts
        parts = Partitions(list(p.X), list(p.y), list(p.sample_weight), p.sizes, p.n_features)
        return Placement(link, parts, self._data, self._source, scatter_rate=self._scatter_rate)


def _rows_array(futures, sizes, tail: tuple, dtype, meta) -> da.Array:
    return da.concatenate([da.from_delayed(f, shape=(n, *tail), dtype=dtype, meta=meta)
                           for f, n in zip(futures, sizes, strict=True)])


def place(X, y=None, sample_weight=None, *, n_partitions: int | None = None,
          client: distributed.Client | None = None) -> PlacedData:
    """Place training rows on the cluster once, as :func:`fit` would, for several fits.

    Parameters
    ----------
    X : ndarray, CSR matrix or dask array of shape (n_samples, n_features)
        The rows. In-memory rows are scattered straight to the workers (never through the
        scheduler), ``n_partitions`` row chunks dealt over the worker threads; a dask array
        is persisted with its lineage, one partition per row chunk (rechunked to
        ``n_partitions`` chunks if given).
    y, sample_weight : array-like of shape (n_samples,), optional
        Target and row weights, placed with the rows.
    n_partitions : int, optional
        Row partitions (default: one per worker thread, none smaller than
        ``daskabsp.min-partition-rows`` rows; a dask array keeps its chunks).
    client : distributed.Client, optional
        Default: the current client, or the embedded cluster.

    Returns
    -------
    PlacedData
        The placed rows. With an asynchronous client, a coroutine of them;
        :func:`place_async` always returns one.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> X, y = make_classification(n_samples=2_000, n_features=5, random_state=0)
    >>> import daskabsp
    >>> placed = daskabsp.place(X, y, n_partitions=4)   # scattered once
    >>> placed
    <daskabsp.PlacedData: 2000 rows x 5 features in 4 partitions>
    >>> for C in (0.1, 1.0):                             # several fits, no copy
    ...     res = daskabsp.fit(daskabsp.LogisticGD(C=C), placed, max_iter=10, tol=None)
    >>> placed.release()
    """
    coro, client = _placing(X, y, sample_weight, n_partitions, client)
    if client.asynchronous:
        return coro
    with seceded():
        return client.sync(lambda: coro)


def place_async(X, y=None, sample_weight=None, *, n_partitions: int | None = None,
                client: distributed.Client | None = None) -> Coroutine[Any, Any, PlacedData]:
    """:func:`place` as a coroutine, to await on an asynchronous client's event loop.

    Parameters
    ----------
    X, y, sample_weight, n_partitions, client
        As for :func:`place` (``client`` must be asynchronous). They are checked when this
        is called, before anything is submitted.

    Returns
    -------
    coroutine
        Awaiting it gives the :class:`PlacedData`.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> X, y = make_classification(n_samples=2_000, n_features=5, random_state=0)
    >>> import asyncio
    >>> import daskabsp
    >>> from distributed import Client, LocalCluster
    >>> async def main():
    ...     async with LocalCluster(n_workers=2, processes=False, asynchronous=True,
    ...                             dashboard_address=":0") as cluster:
    ...         client = await Client(cluster, asynchronous=True)
    ...         placed = await daskabsp.place_async(X, y, client=client)
    ...         res = await daskabsp.fit_async(daskabsp.LogisticGD(), placed, client=client,
    ...                                        max_iter=3, tol=None)
    ...         await client.close()
    ...         return placed.shape, res.n_iter
    >>> asyncio.run(main())
    ((2000, 5), 3)
    """
    coro, client = _placing(X, y, sample_weight, n_partitions, client)
    if not client.asynchronous:
        coro.close()
        raise ValueError("place_async needs an asynchronous client (Client(..., "
                         "asynchronous=True)); use daskabsp.place with a synchronous one.")
    return coro


def _placing(X, y, sample_weight, n_partitions, client):
    """Check :func:`place`'s arguments; the coroutine that places the rows, and the client."""
    check_options({"n_partitions": n_partitions}, "place")
    X, y, sample_weight = check_data(X, y, sample_weight, needs_y=False)
    _check_partitions(n_partitions, X)
    client = client if client is not None else get_client()
    return _place(client, (X, y, sample_weight), n_partitions), client


async def _place(client, data: tuple, n_partitions: int | None) -> PlacedData:
    X = data[0]
    threads = await client.scheduler.ncores()
    chunks = row_chunks(X, n_partitions, sum(threads.values()) or 1,
                        int(config.get("min-partition-rows")))
    t0 = time.perf_counter()
    parts = await place_rows(client, *data, chunks, silent=partial(silent_of, client))
    if is_dask(X):
        return PlacedData(client, parts, data, None, None)
    nbytes = sum(_nbytes(a) for a in data if a is not None)
    return PlacedData(client, parts, data, data, nbytes / max(time.perf_counter() - t0, 1e-9))


def _nbytes(a) -> int:
    if sp.issparse(a):
        return a.data.nbytes + a.indices.nbytes + a.indptr.nbytes
    return int(np.asarray(a).nbytes)


def _check_partitions(n_partitions: int | None, X) -> None:
    if n_partitions is not None and n_partitions > X.shape[0]:
        raise ValueError(f"n_partitions={n_partitions} must be at most the number of rows "
                         f"({X.shape[0]}).")


def fit(program: Program, X, y=None, *, sample_weight=None, sync: str | Policy = "absp",
        max_iter: int = 100, tol: float | None = 1e-4, n_partitions: int | None = None,
        quota: int | float | None = None, chunk_target: float | None = None,
        record_params: bool = False, callback: CallbackArg = None, verbose: int = 0,
        client: distributed.Client | None = None) -> FitResult:
    """Run ``program`` over ``X`` (and ``y``) on a Dask cluster under a synchronisation policy.

    Parameters
    ----------
    program : Program
        The iterative program, e.g. :class:`daskabsp.programs.LogisticGD`.
    X : ndarray, CSR matrix, dask array or PlacedData of shape (n_samples, n_features)
        Training rows. In-memory input is split into ``n_partitions`` row partitions; a dask
        array keeps its row chunks as partitions (unless ``n_partitions`` is given); rows
        placed by :func:`place` are used where they are (``y`` and ``sample_weight`` come
        with them).
    y : array-like of shape (n_samples,), optional
        Target, if the program needs one.
    sample_weight : array-like of shape (n_samples,), optional
        Row weights, for programs that accept them.
    sync : {"absp", "bsp", "ssp", "asp"} or Policy, default="absp"
        Synchronisation model: ``"absp"`` (:class:`daskabsp.ABSP`: with a worker known to
        straggle, a round ends once the fastest worker has scanned its partitions and the
        others' partial work counts; a balanced round is not cut),
        ``"bsp"`` (:class:`daskabsp.BSP`: every round waits for every partition; the same
        result on every run), ``"ssp"`` (:class:`daskabsp.SSP`, staleness 3: no rounds,
        each partition's update applied as it arrives, at most 3 ahead of the slowest),
        ``"asp"`` (:class:`daskabsp.ASP`: no bound), or a policy object with other settings
        (``ABSP.published()``, ``SSP(staleness=10)``...). The :doc:`sync models guide
        </user-guide/sync-models>` says when to choose which.
    max_iter : int, default=100
        Maximum number of rounds.
    tol : float or None, default=1e-4
        Stop when the relative change of the objective between rounds is at most ``tol``.
        Under A-BSP the objective is estimated over the rows processed, so it varies by sampling
        noise; a ``tol`` below that noise runs to ``max_iter``. Unused by programs with their
        own stopping rule (:meth:`Program.converged <daskabsp.programs.Program.converged>`).
    n_partitions : int, optional
        Number of row partitions for in-memory input (default: one per worker thread, none
        smaller than ``daskabsp.min-partition-rows`` rows, nor than the program asks for,
        see :meth:`Program.min_partition_rows <daskabsp.programs.Program.min_partition_rows>`).
    quota : int or float, optional
        Rows a partition processes per round: an int (rows), a float in (0, 1] (fraction of
        the partition) or None (the whole partition).
    chunk_target : float, optional
        Seconds of work per chunk. Default: ``daskabsp.chunk-target``, raised to the
        program's :attr:`~daskabsp.programs.Program.min_chunk_seconds` and to 30 ns per float
        of the program's statistics (adding up a chunk's statistics must stay a small part
        of its work).
    record_params : bool, default=False
        Store the parameters of every round in the history (variable ``params``).
    callback : RoundCallback, callable or list of these, optional
        Called in this process (in the calling thread, with a synchronous client; never in a
        partition task) around every round: a :class:`daskabsp.RoundCallback`, or a function
        ``callback(round, coef, objective)`` called after each round with the updated
        parameters. Returning True stops the fit after that round. Time spent in callbacks
        is not counted in the history's ``wall_time``.
    verbose : int, default=0
        0: silent. 1 or more: show a progress bar of the rounds
        (:class:`daskabsp.ProgressBar`, a notebook widget or a text bar).
    client : distributed.Client, optional
        Default: the current client, or an embedded LocalCluster.

    Returns
    -------
    FitResult
        The fit. With an asynchronous client, a coroutine of it (as Dask's own client
        methods do); :func:`fit_async` always returns one.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> X, y = make_classification(n_samples=2_000, n_features=5, random_state=0)
    >>> import daskabsp
    >>> res = daskabsp.fit(daskabsp.LogisticGD(C=1.0), X, y, sync="bsp", max_iter=20, tol=None)
    >>> res.n_iter, res.coef.shape            # 20 rounds; 5 weights and the intercept
    (20, (6,))
    >>> res.history.sizes["round"]
    20
    """
    run = _prepare(program, X, y, sample_weight=sample_weight, sync=sync, max_iter=max_iter,
                   tol=tol, n_partitions=n_partitions, quota=quota, chunk_target=chunk_target,
                   record_params=record_params, callback=callback, verbose=verbose,
                   client=client)
    if run.client.asynchronous:
        return run.run()
    with seceded(), blas_per_worker(run.client):
        return run_sync(run.client, run)


def fit_async(program: Program, X, y=None, **kwargs: Any) -> Coroutine[Any, Any, FitResult]:
    """:func:`fit` as a coroutine, to await on an asynchronous client's event loop.

    Parameters
    ----------
    program, X, y
        As for :func:`fit`.
    **kwargs
        The keyword arguments of :func:`fit` (its ``client`` must be asynchronous). All are
        checked when this is called, before anything is submitted.

    Returns
    -------
    coroutine
        Awaiting it gives the :class:`FitResult`.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> X, y = make_classification(n_samples=2_000, n_features=5, random_state=0)
    >>> import asyncio
    >>> import daskabsp
    >>> from distributed import Client, LocalCluster
    >>> async def main():
    ...     async with LocalCluster(n_workers=2, processes=False, asynchronous=True,
    ...                             dashboard_address=":0") as cluster:
    ...         client = await Client(cluster, asynchronous=True)
    ...         res = await daskabsp.fit_async(daskabsp.LogisticGD(), X, y, client=client,
    ...                                        max_iter=5, tol=None)
    ...         await client.close()
    ...         return res.n_iter
    >>> asyncio.run(main())
    5
    """
    run = _prepare(program, X, y, **kwargs)
    if not run.client.asynchronous:
        raise ValueError("fit_async needs an asynchronous client (Client(..., "
                         "asynchronous=True)); use daskabsp.fit with a synchronous one.")
    return run.run()


def _prepare(program: Program, X, y=None, *, sample_weight=None, sync="absp", max_iter=100,
             tol=1e-4, n_partitions=None, quota=None, chunk_target=None, record_params=False,
             callback=None, verbose=0, client=None) -> FitRun:
    """Check the arguments of a fit (nothing is submitted before they pass) and make it."""
    owner = "fit"
    policy = as_policy(sync, owner=owner)
    check_options({"max_iter": max_iter, "tol": tol, "n_partitions": n_partitions,
                   "quota": quota, "chunk_target": chunk_target, "verbose": verbose,
                   "record_params": record_params}, owner)
    policy.check_quota(quota, owner)
    config.copy_memory()  # a bad setting fails here, before any work is submitted
    callbacks = as_callbacks(callback)
    if verbose:
        callbacks.append(ProgressBar())
    if not isinstance(program, Program):
        raise TypeError(f"program must be a daskabsp Program, got {type(program).__name__}.")
    rows = _rows(program, X, y, sample_weight, n_partitions)
    client = client if client is not None else (
        rows.placed.client if rows.placed is not None else get_client())
    options = FitOptions(max_iter=max_iter, tol=tol, n_partitions=n_partitions, quota=quota,
                         chunk_target=(chunk_target if chunk_target is not None else
                                       default_chunk_target(program, rows.n_features)),
                         record_params=record_params)
    return FitRun(client, program, policy, rows, options, CallbackList(callbacks))


def _rows(program: Program, X, y, sample_weight, n_partitions) -> Rows:
    if isinstance(X, PlacedData):
        if y is not None or sample_weight is not None:
            raise ValueError("y and sample_weight are placed with the rows: pass them to "
                             "daskabsp.place, not to fit.")
        if n_partitions is not None and n_partitions != X.n_partitions:
            raise ValueError(f"n_partitions={n_partitions} does not match the placed rows' "
                             f"{X.n_partitions} partitions.")
        if program.needs_y and X.y is None:
            raise ValueError("This program requires y to be passed, but the target y is None.")
        _check_weights(program, X.sample_weight)
        return Rows(X.X, X.y, X.sample_weight, placed=X, n_features=X.shape[1])
    _check_weights(program, sample_weight)
    X, y, sample_weight = check_data(X, y, sample_weight, needs_y=program.needs_y)
    _check_partitions(n_partitions, X)
    if not is_dask(X):
        program.check_input(X, y)
    return Rows(X, y, sample_weight, n_features=X.shape[1])


def _check_weights(program: Program, sample_weight) -> None:
    if sample_weight is not None and not program.accepts_sample_weight:
        raise ValueError(f"{type(program).__name__} does not accept sample_weight.")


def default_chunk_target(program: Program, n_features: int) -> float:
    """The chunk target of a fit of ``program`` over ``n_features`` features: the
    configured ``daskabsp.chunk-target``, raised to the program's floor and to
    :data:`CHUNK_SECONDS_PER_STAT` per float of its statistics."""
    size = program.new_stats(program.params(program.init(n_features, 1))).size
    return max(config.seconds("chunk-target"), program.min_chunk_seconds,
               CHUNK_SECONDS_PER_STAT * size)
