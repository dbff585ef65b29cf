"""Plain Dask computations that do not wait for a frozen worker.

An estimator's passes outside the rounds (k-means|| draws, say) are ordinary Dask graphs: one
frozen worker holding a block, or running its task, holds up the whole ``dask.compute`` until
it resumes. :func:`compute_answering` gives up on the collections that wait on such a worker
(silent for ``daskabsp.unresponsive-after``, as the rounds judge it) and returns the others.
"""

from __future__ import annotations

import distributed

from .engine.caller import seceded
from .extension import gather_answering, silent_of, stuck_of


def compute_answering(collections: list, *, client: distributed.Client | None = None,
                      workers: list[str] | None = None) -> list:
    """``dask.compute(*collections)`` on ``client``'s cluster, except that a collection whose
    result waits on a worker not heard from for ``daskabsp.unresponsive-after`` (running its
    task, or the only worker holding data it needs) is given up: None in its place.

    Parameters
    ----------
    collections : list of dask collections
        What to compute (delayed objects, dask arrays...).
    client : distributed.Client, optional
        Default: the current client.
    workers : list of str, optional
        Run the tasks only there (e.g. :func:`answering_workers`).

    Returns
    -------
    list
        The computed results, in order; None for those given up on. Without daskabsp's
        scheduler plugin (the scheduler cannot import daskabsp) nothing is given up.

    Examples
    --------
    >>> import dask.array as da
    >>> import daskabsp
    >>> client = daskabsp.get_client()
    >>> x = da.arange(10, chunks=5)
    >>> daskabsp.compute_answering([x.sum(), x.max()], client=client)
    [np.int64(45), np.int64(9)]
    """
    client = client if client is not None else distributed.get_client()
    futures = client.compute(list(collections), workers=workers)
    with seceded():
        return client.sync(_gather_answering, client, futures)


def answering_workers(*, client: distributed.Client | None = None) -> list[str]:
    """The workers of ``client``'s cluster heard from within ``daskabsp.unresponsive-after``.

    Parameters
    ----------
    client : distributed.Client, optional
        Default: the current client.

    Returns
    -------
    list of str
        Their addresses, sorted (every worker without daskabsp's scheduler plugin).

    Examples
    --------
    >>> import daskabsp
    >>> client = daskabsp.get_client()
    >>> workers = daskabsp.answering_workers(client=client)
    >>> len(workers) >= 1
    True
    """
    client = client if client is not None else distributed.get_client()
    return client.sync(_answering, client)


def stuck_keys(keys: list, *, client: distributed.Client | None = None) -> set:
    """Those of ``keys`` (of tasks or data) that wait on, or are held only by, workers not
    heard from for ``daskabsp.unresponsive-after``, or that wait for a worker that left.

    Parameters
    ----------
    keys : list
        Keys of tasks or data on the cluster.
    client : distributed.Client, optional
        Default: the current client.

    Returns
    -------
    set
        The keys stuck (none without daskabsp's scheduler plugin).

    Examples
    --------
    >>> import daskabsp
    >>> client = daskabsp.get_client()
    >>> future = client.submit(sum, [1, 2, 3])
    >>> daskabsp.stuck_keys([future.key], client=client)
    set()
    """
    client = client if client is not None else distributed.get_client()
    return set(client.sync(stuck_of, client, list(keys)))


async def _answering(client) -> list[str]:
    workers = sorted(await client.scheduler.ncores())
    quiet = await silent_of(client, workers)
    return [w for w in workers if w not in quiet]


async def _gather_answering(client, futures: list) -> list:
    got, given_up = await gather_answering(client, futures)
    return [None if f.key in given_up else got[f.key] for f in futures]
