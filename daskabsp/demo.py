"""The straggler demo: BSP and A-BSP side by side, one worker emulated slower.

Run with ``python -m daskabsp demo`` (or the ``daskabsp`` console script).
"""

from __future__ import annotations

import argparse

import numpy as np

from .cluster import fast_malloc
from .driver import fit
from .programs import LogisticGD
from .stragglers import slow_workers


def make_data(n_rows: int, n_features: int, seed: int = 0):
    """A binary classification problem with correlated features (numpy only, fast)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_rows, n_features))
    X[:, 1:] += 0.5 * X[:, :-1]
    w = rng.standard_normal(n_features) / np.sqrt(n_features)
    y = (X @ w + 0.5 * rng.standard_normal(n_rows) > 0).astype(float)
    return X, y


def optimum(X, y, C: float) -> float:
    """The optimal objective, from scikit-learn's LogisticRegression (same C)."""
    from sklearn.linear_model import LogisticRegression

    sk = LogisticRegression(C=C, tol=1e-10, max_iter=1000).fit(X, y)
    return LogisticGD(C=C).full_objective(np.r_[sk.coef_.ravel(), sk.intercept_], X, y)


def run(n_rows: int, n_features: int, slowdown: float, workers: int, tolerance: float,
        max_iter: int) -> list[dict]:
    from distributed import Client, LocalCluster

    X, y = make_data(n_rows, n_features)
    C = 1.0
    program = LogisticGD(C=C)
    target = optimum(X, y, C) * (1 + tolerance)
    rows = []
    with fast_malloc(), \
            LocalCluster(n_workers=workers, threads_per_worker=1, processes=True) as cluster, \
            Client(cluster) as client:
        print(f"Dask dashboard: {client.dashboard_link}  (open it to watch the rounds)")
        slow = sorted(client.scheduler_info()["workers"])[0]
        print(f"{workers} workers; {slow} is emulated {slowdown:g}x slower. "
              f"Data: {n_rows:,} x {n_features}, one partition per worker.\n")
        with slow_workers(client, {slow: slowdown}):
            for sync in ("bsp", "absp"):
                res = fit(program, X, y, sync=sync, max_iter=max_iter, tol=None,
                          n_partitions=workers,
                          callback=lambda r, w, obj: program.full_objective(w, X, y) <= target)
                h = res.history
                reached = program.full_objective(res.coef, X, y) <= target
                rows.append({"sync": sync, "rounds": res.n_iter if reached else float("nan"),
                             "seconds": float(h.wall_time[-1]) if reached else float("nan"),
                             "round_ms": 1e3 * float(np.median(np.diff(h.wall_time.values))),
                             "harvested": float(h.harvested.mean())})
    return rows


def print_table(rows: list[dict], tolerance: float) -> None:
    base = rows[0]["seconds"]
    print(f"Time to reach the optimal objective within {tolerance:.0%}:")
    print(f"{'sync':<6} {'rounds':>7} {'ms/round':>9} {'seconds':>8} {'speed-up':>9}")
    for r in rows:
        print(f"{r['sync']:<6} {r['rounds']:>7} {r['round_ms']:>9.0f} {r['seconds']:>8.2f} "
              f"{base / r['seconds']:>8.2f}x")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="daskabsp demo", description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=800_000)
    p.add_argument("--features", type=int, default=20)
    p.add_argument("--slowdown", type=float, default=4.0)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--tolerance", type=float, default=0.01,
                   help="relative distance to the optimal objective that counts as reached")
    p.add_argument("--max-iter", type=int, default=200)
    a = p.parse_args(argv)
    rows = run(a.rows, a.features, a.slowdown, a.workers, a.tolerance, a.max_iter)
    print_table(rows, a.tolerance)
