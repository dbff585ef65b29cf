"""What the lab's experiments share: the pinned cluster, the straggler sources, the data, the
exact objectives, and figure output.

The cluster is sized to the machine: one worker process per core, one thread each, every
worker pinned to its own core (:func:`daskabsp.lab.stragglers.pinned_workers`), so a CPU neighbour
on one core slows one worker only, and an idle core is not there to hide a straggler. The
straggler is always the worker holding partition 0 (the first worker in address order, where
the engine places partition 0 of in-memory input).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # benchmarks/: _common and _data

from _common import RESULTS, load_note, parse_args, spread, summary, table, write_json  # noqa: E402
from _data import dense_classification  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402

import daskabsp  # noqa: E402
from daskabsp import ABSP, BSP  # noqa: E402
from daskabsp.cluster import fast_malloc, worker_addresses  # noqa: E402
from daskabsp.lab.datasets import order_rows, skewed_sparse  # noqa: E402
from daskabsp.lab.stragglers import cpu_neighbour, pinned_workers, slow_workers  # noqa: E402
from daskabsp.programs.kmeans import squared_distances  # noqa: E402

__all__ = ["ABSP", "BSP", "RESULTS", "load_note", "parse_args", "spread", "summary", "table",
           "write_json"]

DOCS = HERE.parent.parent / "docs" / "lab"

#: The emulated straggler's factor: about the slowdown of one CPU neighbour (a half share).
EMULATED = 2.0
#: The heterogeneous share: a neighbour busy half the time leaves the worker ~3/4 of its core.
SHARE_DUTY = 0.5
#: Skewed data: the dense partition holds this many times the non-zeros of the sparse one.
SKEW = 8.0

SOURCES = {
    "none": "no straggler",
    "emulated": f"worker 0 emulated {EMULATED:g}x slower (SlowWorkers)",
    "neighbour": "a busy process on worker 0's core",
    "share": f"a neighbour busy {SHARE_DUTY:.0%} of the time on worker 0's core",
    "skew": f"sparse rows, the last partition {SKEW:g}x denser than partition 0",
}

SYNCS = {"bsp": BSP(), "absp": ABSP(), "absp-paper": ABSP(helpers=False)}
SYNC_LABELS = {"bsp": "BSP", "absp": "A-BSP (helpers)",
               "absp-paper": "A-BSP, helpers=False (published)"}
COLORS = {"bsp": "#444444", "absp": "#1f77b4", "absp-paper": "#ff7f0e"}


# -- the cluster ---------------------------------------------------------------------------------


@contextmanager
def lab_cluster(n_workers: int | None = None) -> Iterator[Client]:
    """One pinned worker process per core, one thread each (the embedded cluster's malloc
    settings), and a client set as the default (so estimators use it)."""
    n = n_workers or os.cpu_count() or 2
    with fast_malloc(), LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                     dashboard_address=":0", memory_limit="6GiB") as cl, \
            Client(cl) as client:
        client.wait_for_workers(n)
        client.run(lambda: __import__("daskabsp") and None)
        with pinned_workers(client):
            yield client


def workers(client: Client) -> list[str]:
    return worker_addresses(client)


@contextmanager
def straggler(client: Client, source: str) -> Iterator[None]:
    """The source's straggler on worker 0 while the block runs (the data sources, ``skew``
    and ``sorted``, are in the data: nothing to start)."""
    victim = workers(client)[0]
    if source == "emulated":
        cm = slow_workers(client, {victim: EMULATED})
    elif source == "neighbour":
        cm = cpu_neighbour(client, victim)
    elif source == "share":
        cm = cpu_neighbour(client, victim, duty=SHARE_DUTY)
    else:
        cm = nullcontext()
    with cm:
        yield


# -- data ----------------------------------------------------------------------------------------


def dense(quick: bool, seed: int, rows: int = 1_000_000, features: int = 100):
    X, y = dense_classification(rows // (8 if quick else 1), features, 2, seed)
    return X, y.astype(np.float64)


def sparse(quick: bool, seed: int, n_partitions: int, skew: float = SKEW,
           rows: int = 1_000_000, features: int = 5000, mean_nnz: float = 40.0):
    X, y = skewed_sparse(rows // (8 if quick else 1), features, n_partitions=n_partitions,
                         skew=skew, mean_nnz=mean_nnz, seed=seed)
    return X, y.astype(np.float64)


def sorted_dense(quick: bool, seed: int, n_partitions: int, **kw):
    """Dense rows sorted by label within each partition (rows that are not exchangeable)."""
    X, y = dense(quick, seed, **kw)
    return order_rows(X, y, by="label", n_partitions=n_partitions)


# -- exact objectives at recorded parameters ----------------------------------------------------


class Trace:
    """A fit callback keeping each round's parameters (``callback(round, coef, objective)``);
    with :func:`exact`, the objective over all rows at each round's parameters."""

    def __init__(self) -> None:
        self.coefs: list[np.ndarray] = []

    def __call__(self, rnd: int, coef, objective) -> bool:
        self.coefs.append(np.array(coef, copy=True))
        return False


def kmeans_inertia(centers: np.ndarray, X) -> float:
    """Mean squared distance of the rows to their nearest center, in row blocks."""
    total = 0.0
    for lo in range(0, X.shape[0], 50_000):
        total += squared_distances(X[lo:lo + 50_000], centers).min(axis=1).sum()
    return float(total / X.shape[0])


def exact(objective: Callable[[np.ndarray], float], coefs) -> np.ndarray:
    return np.array([objective(c) for c in coefs])


def time_to(values: np.ndarray, wall: np.ndarray, target: float) -> float:
    """Wall time of the first round whose exact objective is at most ``target`` (NaN:
    never)."""
    hit = np.flatnonzero(values <= target)
    return float(wall[hit[0]]) if hit.size else float("nan")


# -- output --------------------------------------------------------------------------------------


def save_figure(fig, name: str, args, docs: bool = True) -> Path:
    """Save ``fig`` as ``benchmarks/results/<name>[-quick].png``; a full run also copies it to
    ``docs/lab/`` (the figures the docs show)."""
    path = RESULTS / f"{name}{'-quick' if args.quick else ''}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    if docs and not args.quick:
        DOCS.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, DOCS / path.name)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def ratio_cell(num, den) -> str:
    """``median [p25-p75]`` of the paired ratios ``num[i] / den[i]``."""
    r = np.asarray(num, dtype=float) / np.asarray(den, dtype=float)
    return spread(summary(r))


def interleaved(items: list, repeat: int) -> list:
    """``items`` in the order of repeat ``repeat``: rotated, so no item always runs first."""
    k = repeat % len(items)
    return items[k:] + items[:k]


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


__all__ += ["COLORS", "DOCS", "EMULATED", "SHARE_DUTY", "SKEW", "SOURCES", "SYNCS",
            "SYNC_LABELS", "Trace", "daskabsp", "dense", "exact", "interleaved",
            "kmeans_inertia", "lab_cluster", "ratio_cell", "save_figure", "sorted_dense",
            "sparse", "straggler", "time_to", "timed", "workers"]
