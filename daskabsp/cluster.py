"""Finding the Dask client of a fit, or starting the embedded LocalCluster.

The embedded cluster is what a fit uses when the process has no Dask client: by default
(``daskabsp.embedded: threads``) one worker per core *inside this process*, one thread each.
Worker processes must first receive a copy of the rows (0.25 s for 400 MB on 2 cores, a
quarter of scikit-learn's whole fit of those rows) and exchange every round's parameters and
statistics through sockets; in-process workers read the caller's arrays where they are.
Measured side by side on main at 1bd534e (clusters made by hand; 2 cores, whole ``fit`` from
numpy, 7 interleaved repeats, medians): in-process workers took 0.34x the time of worker
processes on dense 1M x 50 binary rows and 0.74x on 200k x 250 rows of 8 classes;
``benchmarks/bench_solvers.py`` measures both kinds in every run (the getting-started page
shows its numbers). The price is the GIL: a program whose chunks spend their time in Python
rather than in NumPy/SciPy kernels (which release it) scans one worker at a time;
``daskabsp.embedded: processes`` starts worker processes instead.

In-process workers share the process's BLAS thread pool: two workers each asking OpenBLAS for
two threads on two cores oversubscribe it (measured: fits up to 8x slower, erratic). While a
fit runs on workers of this process, BLAS is held to one thread per call
(:func:`blas_per_worker`), as Dask's nanny does for worker processes
(``OMP_NUM_THREADS=1`` and the like).
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import logging
import multiprocessing
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import dask.config
import distributed
from dask.system import CPU_COUNT

from .config import DASHBOARD_PRELOAD

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_embedded: distributed.Client | None = None

#: Dask's nanny starts workers with ``MALLOC_TRIM_THRESHOLD_=65536`` (to hand freed memory
#: back to the OS), and setting any malloc threshold turns glibc's adaptive mmap threshold
#: off: every temporary over 128 KiB is then a fresh ``mmap``, and freed heap memory goes back
#: to the OS at once, so the pages of the next chunk's temporaries fault in again. A partition
#: scan makes such temporaries in every chunk; measured on a 200 000 x 20 000 sparse logistic
#: fit on 2 workers: 7.97 s with Dask's setting, 4.60 s without (compute per round 0.31 vs
#: 0.16 s). An mmap threshold at glibc's adaptive ceiling (32 MiB) and 64 MiB kept at the top
#: of each heap when trimming restore that speed, also when the environment already holds
#: Dask's value (which the nanny copies into its own process, and which outranks the config).
MALLOC_ENVIRON = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TOP_PAD_": str(64 << 20)}


@contextlib.contextmanager
def fast_malloc() -> Iterator[None]:
    """Worker processes started inside this block use :data:`MALLOC_ENVIRON`."""
    with dask.config.set({f"distributed.nanny.pre-spawn-environ.{k}": v
                          for k, v in MALLOC_ENVIRON.items()}):
        yield


@contextlib.contextmanager
def dashboard_preload() -> Iterator[None]:
    """Schedulers started inside this block preload :mod:`daskabsp.dashboard` (the daskabsp
    page of the dashboard), whatever other preloads the configuration names."""
    preload = dask.config.get("distributed.scheduler.preload") or []
    preload = [preload] if isinstance(preload, str) else list(preload)
    if DASHBOARD_PRELOAD not in preload:
        preload.append(DASHBOARD_PRELOAD)
    with dask.config.set({"distributed.scheduler.preload": preload}):
        yield


def get_client() -> distributed.Client:
    """The current Dask client, or the process's embedded one (started on first use).

    With no client in the process, a ``LocalCluster`` sized to the machine is started once,
    reused by later fits and closed at exit (see :func:`close_embedded`). Fits find their
    client this way.

    Returns
    -------
    distributed.Client
        The client fits run on.

    Examples
    --------
    >>> import daskabsp
    >>> client = daskabsp.get_client()
    >>> client is daskabsp.get_client()       # the same one for every fit
    True
    """
    try:
        return distributed.get_client()
    except ValueError:
        pass
    return embedded_client()


def _in_joblib_worker() -> bool:
    return multiprocessing.get_start_method(allow_none=True) == "loky"


#: The values of ``daskabsp.embedded``.
EMBEDDED_KINDS = ("threads", "processes")


def embedded_kind() -> str:
    """``daskabsp.embedded``: ``"threads"`` (workers in this process) or ``"processes"``."""
    kind = dask.config.get("daskabsp.embedded", "threads")
    if kind not in EMBEDDED_KINDS:
        raise ValueError(f"The 'daskabsp.embedded' setting must be a str among "
                         f"{set(EMBEDDED_KINDS)}. Got {kind!r} instead.")
    return kind


class MainGuardError(RuntimeError):
    """The embedded cluster would start worker processes from a script whose code is not
    under ``if __name__ == "__main__":`` (each worker process would run it again)."""


def _is_main_guard(test: ast.expr) -> bool:
    """Whether ``test`` is ``__name__ == "__main__"`` (either way round)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return any(isinstance(a, ast.Name) and a.id == "__name__" for a in sides) and any(
        isinstance(a, ast.Constant) and a.value == "__main__" for a in sides)


def unguarded_main_line() -> tuple[str, int] | None:
    """Where the running script calls into daskabsp from top-level code that is not under
    ``if __name__ == "__main__":`` (its path and line), or None.

    Dask starts worker processes with ``spawn``: each one imports the main script again, as
    ``__mp_main__``, so code outside the guard runs once more in every worker, which then
    tries to start a cluster of its own. Interactive sessions, notebooks and ``python -c``
    have no script to import again.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path or not str(path).endswith(".py"):
        return None
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_code.co_name == "<module>"
                                     and frame.f_globals.get("__name__") == "__main__"):
        frame = frame.f_back
    if frame is None:
        return None
    line = frame.f_lineno
    try:
        tree = ast.parse(Path(path).read_text(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.If) and _is_main_guard(node.test) \
                and node.body[0].lineno <= line <= (node.body[-1].end_lineno or line):
            return None
    return str(path), line


def _main_guard_message(where: tuple[str, int]) -> str:
    path, line = where
    return (
        f"daskabsp starts its embedded Dask cluster with worker processes "
        f"(daskabsp.embedded: processes), and {path}, line {line}, calls it from code that "
        "runs at import: each worker process imports the script again and would run it "
        "too. Put the script's code under\n\n    if __name__ == \"__main__\":\n\n"
        "(as for any LocalCluster of worker processes), or use the default in-process "
        "workers (daskabsp.embedded: threads)."
    )


def _start_cluster(kind: str) -> distributed.LocalCluster:
    """The embedded ``LocalCluster``: one worker per core, one thread each."""
    if kind == "threads":
        # memory_limit=0: an in-process worker would read the whole process's memory (the
        # caller's arrays included) as its own, pause when it passes 80% of its share of
        # the machine, and a fit would wait for it forever. It holds views of the caller's
        # rows, nothing to spill.
        with dashboard_preload():
            return distributed.LocalCluster(processes=False, n_workers=CPU_COUNT,
                                            threads_per_worker=1, memory_limit=0)
    if multiprocessing.parent_process() is not None \
            and getattr(sys.modules.get("__main__"), "__name__", "") == "__mp_main__":
        # A worker process importing an unguarded script (the check below was bypassed):
        # stop here, before it starts processes of its own.
        raise MainGuardError("a worker process imported a script that starts daskabsp's "
                             "embedded cluster at import; put its code under "
                             "if __name__ == \"__main__\":")
    where = unguarded_main_line()
    if where is not None:
        raise MainGuardError(_main_guard_message(where))
    with fast_malloc(), dashboard_preload():
        return distributed.LocalCluster(processes=True, n_workers=CPU_COUNT,
                                        threads_per_worker=1)


def embedded_client() -> distributed.Client:
    """The embedded client of this process, started on first use and closed at exit.

    One worker per core, one thread each: in this process by default, or worker processes
    with ``daskabsp.embedded: processes`` (see the module's docstring for why).
    """
    global _embedded
    with _lock:
        if _embedded is None or _embedded.status in ("closed", "closing"):
            if _in_joblib_worker():
                # A joblib (loky) worker process, e.g. of GridSearchCV(n_jobs=2): the other
                # workers use the other cores, and loky's processes cannot start worker
                # processes of their own ("cannot find context for 'loky'"); the fit runs
                # on one thread in this process.
                cluster = distributed.LocalCluster(processes=False, n_workers=1,
                                                   threads_per_worker=1,
                                                   dashboard_address=":0", memory_limit=0)
                kind = "threads"
            else:
                kind = embedded_kind()
                cluster = _start_cluster(kind)
            _embedded = distributed.Client(cluster, set_as_default=False)
            atexit.register(close_embedded)
            logger.info(
                "daskabsp: no Dask client found, started an embedded LocalCluster with %d "
                "workers x %d threads %s (dashboard %s); reused by later fits, closed at "
                "exit.",
                len(cluster.workers),
                max(_embedded.nthreads().values(), default=0),
                "in this process" if kind == "threads" else "in worker processes",
                cluster.dashboard_link,
            )
        return _embedded


def in_process(client: distributed.Client) -> bool:
    """Whether ``client``'s workers run in this process (an in-process ``LocalCluster``)."""
    return str(getattr(client.scheduler, "address", "")).startswith("inproc://")


_blas_lock = threading.Lock()
_blas_users = 0
_blas_limiter = None


@contextlib.contextmanager
def blas_per_worker(client: distributed.Client) -> Iterator[None]:
    """While the block runs, BLAS calls in this process use one thread each, if ``client``'s
    workers run in this process (otherwise nothing changes).

    In-process workers share the process's BLAS thread pool; each asking it for every core
    oversubscribes the machine. The limit is the process's (OpenBLAS has no per-thread
    setting): it is taken when the first of the fits running at once starts and given back
    when the last one ends.
    """
    global _blas_users, _blas_limiter
    if not in_process(client):
        yield
        return
    from threadpoolctl import ThreadpoolController

    with _blas_lock:
        if _blas_users == 0:
            _blas_limiter = ThreadpoolController().limit(limits=1, user_api="blas")
        _blas_users += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas_users -= 1
            if _blas_users == 0 and _blas_limiter is not None:
                _blas_limiter.restore_original_limits()
                _blas_limiter = None


def close_embedded() -> None:
    """Close the embedded cluster, if one was started.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> X, y = make_classification(n_samples=2_000, n_features=5, random_state=0)
    >>> import daskabsp
    >>> from daskabsp.estimators import LogisticRegression
    >>> clf = LogisticRegression().fit(X, y)   # no client: starts the embedded cluster
    >>> daskabsp.close_embedded()              # optional: it also closes at exit
    >>> clf = LogisticRegression().fit(X, y)   # a later fit starts another one
    """
    global _embedded
    with _lock:
        if _embedded is not None:
            cluster = _embedded.cluster
            _embedded.close()
            if cluster is not None:
                cluster.close()
            _embedded = None


def worker_addresses(client: distributed.Client) -> list[str]:
    """The addresses of the workers of ``client``'s cluster (a synchronous client), sorted,
    asked of the scheduler itself: ``Client.scheduler_info()`` falls back to cached totals
    that list no workers when its query fails. (``identity`` lists every worker by default;
    the oldest distributed we support takes no ``n_workers``.)"""
    return sorted(client.sync(client.scheduler.identity)["workers"])
