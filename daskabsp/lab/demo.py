"""The straggler demo: whole fits under BSP and A-BSP, without and with a slow worker.

Run with ``python -m daskabsp demo`` (or the ``daskabsp`` console script). It prints what a
user waits for, the fit's wall time and rounds, for BSP, the default A-BSP and A-BSP as
published (:meth:`ABSP.published <daskabsp.ABSP.published>`: no helpers, a quorum of
partitions, no grace, no patience), each fitting the logistic regression of
``LogisticRegression()`` (Newton steps, ``C=1``, ``tol=1e-4``) with :func:`daskabsp.fit`,
first without a straggler, then with one worker emulated slower, on a cluster it starts: one
worker process per core (an emulated straggler is honest only with a core of its own: worker
threads of one process would share the emulation's interpreter). Each sync model is fitted
``--repeats`` times (3), in turn with the others, and the table shows the median.

Before it times anything it runs one untimed fit of the same data: a new cluster's first fit
also pays for the workers' first imports of the engine and their first allocations, which
a timed first fit would charge to whichever sync model came first (BSP, which then looked
slower than A-BSP without any straggler).
"""


from __future__ import annotations

import argparse
import os
import time
from contextlib import nullcontext

import numpy as np

from ..cluster import fast_malloc, worker_addresses
from ..fitting import fit
from ..policies import ABSP, BSP
from ..programs import LinearNewton, LogisticGD
from ..programs.newton import hessian_limit
from .stragglers import slow_workers

#: The sync models the demo compares, by the name it prints.
SYNCS = {"BSP": BSP(), "A-BSP": ABSP(), "A-BSP as published": ABSP.published()}


def make_data(n_rows: int, n_features: int, seed: int = 0):
    """A binary classification problem with correlated features (numpy only, fast)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_rows, n_features))
    X[:, 1:] += 0.5 * X[:, :-1]
    w = rng.standard_normal(n_features) / np.sqrt(n_features)
    y = (X @ w + 0.5 * rng.standard_normal(n_rows) > 0).astype(float)
    return X, y


def optimum(X, y, C: float) -> float:
    """The optimal objective of :class:`~daskabsp.programs.LogisticGD` (same ``C``), from
    scikit-learn's LogisticRegression."""
    from sklearn.linear_model import LogisticRegression

    sk = LogisticRegression(C=C, tol=1e-10, max_iter=1000).fit(X, y)
    return LogisticGD(C=C).full_objective(np.r_[sk.coef_.ravel(), sk.intercept_], X, y)


def run(n_rows: int, n_features: int, slowdown: float, workers: int,
        repeats: int = 3) -> list[dict]:
    """Per straggler setting and sync model, the median of ``repeats`` whole fits, timed in
    turn (BSP, A-BSP, published, BSP, ...) so that a slow moment of a shared machine does not
    fall on one sync model only."""
    from distributed import Client, LocalCluster

    X, y = make_data(n_rows, n_features)
    # The program scikit-learn-style LogisticRegression() fits (C=1, tol=1e-4, intercept).
    program = LinearNewton(loss="logistic", l2=1.0 / n_rows, tol=1e-4,
                           max_hessian=hessian_limit(n_rows))
    rows = []
    with fast_malloc(), \
            LocalCluster(n_workers=workers, threads_per_worker=1, processes=True) as cluster, \
            Client(cluster) as client:
        print(f"Dask dashboard: {client.dashboard_link}  (open it to watch the rounds)")
        slow = worker_addresses(client)[0]
        print(f"{workers} workers x 1 thread. Data: {n_rows:,} x {n_features}, one partition "
              f"per worker. Straggler: {slow} emulated {slowdown:g}x slower.")
        print("Warming the cluster up: one untimed fit first (the workers' first imports and "
              "allocations are not timed).\n")
        fit(program, X, y, sync=BSP(), max_iter=100, tol=None)
        for straggler in (False, True):
            ctx = slow_workers(client, {slow: slowdown}) if straggler else nullcontext()
            with ctx:
                runs: dict[str, list] = {name: [] for name in SYNCS}
                for _ in range(repeats):
                    for name, sync in SYNCS.items():
                        t0 = time.perf_counter()
                        res = fit(program, X, y, sync=sync, max_iter=100, tol=None)
                        runs[name].append((time.perf_counter() - t0, res))
                for name, done in runs.items():
                    seconds, res = sorted(done, key=lambda r: r[0])[len(done) // 2]
                    rows.append({"straggler": straggler, "sync": name, "seconds": seconds,
                                 "rounds": res.n_iter,
                                 "converged": all(r.converged for _, r in done)})
    return rows


def print_table(rows: list[dict], workers: int, slowdown: float) -> None:
    """The table of :func:`run`'s rows; rounds are those of the median fit."""
    base = {r["straggler"]: r["seconds"] for r in rows if r["sync"] == "BSP"}
    ideal = base[False] * workers / (workers - 1 + 1 / slowdown)
    print("Whole fit() of a logistic regression to its tolerance (Newton, tol=1e-4), "
          "after the warm-up; the median of the repeats, fits timed in turn:")
    print(f"{'straggler':<10} {'sync':<19} {'fit s':>7} {'rounds':>7} {'BSP/this':>9}")
    for r in rows:
        print(f"{'yes' if r['straggler'] else 'no':<10} {r['sync']:<19} {r['seconds']:>7.2f} "
              f"{r['rounds']:>7} {base[r['straggler']] / r['seconds']:>8.2f}x"
              + ("" if r["converged"] else "  (not converged)"))
    print(f"\nIdeal with the straggler (the BSP time without it, scaled by the capacity "
          f"left): {ideal:.2f} s")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="daskabsp demo", description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=600_000)
    p.add_argument("--features", type=int, default=40)
    p.add_argument("--slowdown", type=float, default=4.0)
    p.add_argument("--workers", type=int, default=max(2, os.cpu_count() or 2),
                   help="worker processes (default: one per core, at least 2)")
    p.add_argument("--repeats", type=int, default=3,
                   help="fits per sync model and straggler setting, timed in turn (median)")
    a = p.parse_args(argv)
    rows = run(a.rows, a.features, a.slowdown, a.workers, a.repeats)
    print_table(rows, a.workers, a.slowdown)
