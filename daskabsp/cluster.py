"""Finding the Dask client of a fit, or starting the embedded LocalCluster."""

from __future__ import annotations

import atexit
import logging
import threading

import distributed

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_embedded: distributed.Client | None = None


def get_client() -> distributed.Client:
    """The current Dask client, or the process's embedded one (started on first use).

    With no client in the process, a ``LocalCluster`` sized to the machine is started once,
    reused by later fits and closed at exit.
    """
    try:
        return distributed.get_client()
    except ValueError:
        pass
    return embedded_client()


def embedded_client() -> distributed.Client:
    """The embedded client of this process, started on first use and closed at exit."""
    global _embedded
    with _lock:
        if _embedded is None or _embedded.status in ("closed", "closing"):
            cluster = distributed.LocalCluster(processes=True)
            _embedded = distributed.Client(cluster, set_as_default=False)
            atexit.register(close_embedded)
            logger.info(
                "daskabsp: no Dask client found, started an embedded LocalCluster with %d "
                "workers x %d threads (dashboard %s); reused by later fits, closed at exit.",
                len(cluster.workers),
                max(w.nthreads for w in cluster.workers.values()) if cluster.workers else 0,
                cluster.dashboard_link,
            )
        return _embedded


def close_embedded() -> None:
    """Close the embedded cluster, if one was started."""
    global _embedded
    with _lock:
        if _embedded is not None:
            cluster = _embedded.cluster
            _embedded.close()
            if cluster is not None:
                cluster.close()
            _embedded = None
