"""Fit time: what a user waits for, ``est.fit(X, y)`` at default parameters, BSP vs A-BSP,
with and without stragglers.

One worker process per core, one thread each (2 on a 2-core machine; more worker processes than
cores would let a sleeping straggler's core serve the others and hide its cost). In-memory data
sized so that a straggler-free BSP fit takes about 2 s or more. Scenarios:

* ``none``: no straggler;
* ``persistent``: one worker emulated 4x slower throughout (``daskabsp.slow_workers``);
* ``transient``: before each round a seeded random worker is 4x slower for that round;
* ``frozen``: 3 workers; 1 s into the fit one of them is stopped (SIGSTOP) for 30 s, or until
  the fit returns (A-BSP only, and BSP for the first model: a BSP fit waits the 30 s).

Per model and scenario, BSP and A-BSP run interleaved (the order alternates per repeat). Not
yet here: dask-ml's solvers (``bench_estimators.py`` and ``bench_solvers.py`` compare them).
The ideal time with a persistent straggler is the straggler-free BSP time scaled by the lost
capacity, n / (n - 1 + 1/F) (1.6x for 2 workers and F = 4). The table prints medians [IQR].
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
import warnings
from collections.abc import Callable

import numpy as np
from _common import FitCallback, load_note, parse_args, spread, summary, table, write_json
from _data import dense_classification, dense_regression
from distributed import Client, LocalCluster
from sklearn.datasets import make_blobs
from sklearn.exceptions import ConvergenceWarning

from daskabsp import SlowWorkers
from daskabsp.cluster import fast_malloc
from daskabsp.estimators import KMeans, LinearSVC, LogisticRegression, Ridge

FACTOR = 4.0
FREEZE_AFTER, FREEZE_FOR = 1.0, 30.0


def add_options(p) -> None:
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--scenarios", default="none,persistent,transient,frozen")
    p.add_argument("--models", default="logistic,logistic3,svc,ridge,kmeans")


def models(quick: bool, seed: int) -> dict[str, tuple[Callable, Callable]]:
    s = 10 if quick else 1
    return {
        "logistic": (lambda: dense_classification(800_000 // s, 60, 2, seed),
                     lambda sync: LogisticRegression(sync=sync)),
        "logistic3": (lambda: dense_classification(500_000 // s, 60, 3, seed),
                      lambda sync: LogisticRegression(sync=sync)),
        "svc": (lambda: dense_classification(800_000 // s, 60, 2, seed),
                lambda sync: LinearSVC(sync=sync)),
        "ridge": (lambda: dense_regression(1_500_000 // s, 60, seed),
                  lambda sync: Ridge(sync=sync)),
        "kmeans": (lambda: make_blobs(1_000_000 // s, 10, centers=8, random_state=seed),
                   lambda sync: KMeans(8, sync=sync, random_state=seed)),
    }


class Transient(FitCallback):
    """A scikit-learn fit callback (``set_callbacks``, scikit-learn >= 1.9): after each engine
    round, a seeded random worker becomes ``FACTOR`` times slower for the next round (the
    engine's emulation plugin, registered again under the same name)."""

    def __init__(self, client: Client, seed: int) -> None:
        self.client, self.rng = client, random.Random(seed)
        self.workers = sorted(client.scheduler_info()["workers"])

    def slow_one(self) -> None:
        plugin = SlowWorkers({self.rng.choice(self.workers): FACTOR})
        plugin.name = "bench-transient"
        self.client.register_plugin(plugin)

    def on_fit_task_end(self, estimator, context, *, fitted_estimator=None) -> bool:
        if context.task_name == "round":
            self.slow_one()
        return False


def fit_once(client, make, X, y, sync: str, scenario: str, seed: int):
    """One timed fit under ``scenario``: seconds, rounds, and (frozen) whether it returned
    before the worker was resumed."""
    est = make(sync)
    if scenario == "transient":
        hook = Transient(client, seed)
        hook.slow_one()
        est.set_callbacks(hook)
    timers, pid = [], None
    if scenario == "frozen":
        pid = client.run(os.getpid)[sorted(client.scheduler_info()["workers"])[-1]]
        timers = [threading.Timer(FREEZE_AFTER, os.kill, (pid, signal.SIGSTOP)),
                  threading.Timer(FREEZE_AFTER + FREEZE_FOR, os.kill, (pid, signal.SIGCONT))]
        for t in timers:
            t.start()
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            est.fit(X, y)
        seconds = time.perf_counter() - t0
    finally:
        for t in timers:
            t.cancel()
        if pid is not None:
            os.kill(pid, signal.SIGCONT)
        if scenario == "transient":
            client.unregister_worker_plugin("bench-transient")
    returned = seconds < FREEZE_AFTER + FREEZE_FOR if scenario == "frozen" else None
    return seconds, int(np.max(getattr(est, "n_iter_", -1))), returned


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], add_options)
    load0 = os.getloadavg()[0]
    repeats = args.repeats or (1 if args.quick else 3)
    scenarios = args.scenarios.split(",")
    wanted = args.models.split(",")
    n_cores = os.cpu_count() or 2
    rows, raw = [], []
    for name, (data, make) in models(args.quick, args.seed).items():
        if name not in wanted:
            continue
        X, y = data()
        base = {}
        for scenario in scenarios:
            n_workers = 3 if scenario == "frozen" else n_cores
            syncs = ["absp"] + (["bsp"] if scenario != "frozen" or name == wanted[0] else [])
            with fast_malloc(), LocalCluster(n_workers=n_workers, threads_per_worker=1,
                                             processes=True, dashboard_address=":0") as cl, \
                    Client(cl) as client:
                slow = sorted(client.scheduler_info()["workers"])[0]
                plugin = SlowWorkers({slow: FACTOR}) if scenario == "persistent" else None
                if plugin is not None:
                    client.register_plugin(plugin)
                times = {s: [] for s in syncs}
                counts = {s: [] for s in syncs}
                frozen_ok = []
                for r in range(repeats):
                    for sync in (syncs if r % 2 == 0 else syncs[::-1]):
                        sec, n, ok = fit_once(client, make, X, y, sync, scenario, args.seed + r)
                        times[sync].append(sec)
                        counts[sync].append(n)
                        if ok is not None and sync == "absp":
                            frozen_ok.append(ok)
            for sync in syncs:
                t = summary(times[sync])
                base.setdefault(scenario, {})[sync] = t["median"]
                ideal = ""
                if scenario == "persistent" and "none" in base:
                    n = n_cores
                    ideal = f"{base['none']['bsp'] * n / (n - 1 + 1 / FACTOR):.2f}"
                rows.append([f"{name} {scenario} {sync}", spread(t), "/".join(
                    str(c) for c in sorted(set(counts[sync]))), ideal,
                    f"{t['median'] / base.get('none', {}).get(sync, np.nan):.2f}",
                    "" if sync == "bsp" or "bsp" not in times else
                    f"{summary(times['bsp'])['median'] / t['median']:.2f}",
                    "" if not frozen_ok or sync != "absp" else
                    f"{sum(frozen_ok)}/{len(frozen_ok)}"])
                raw.append({"model": name, "scenario": scenario, "sync": sync,
                            "seconds": times[sync], "rounds": counts[sync]})
        print(f"-- {name}: {X.shape[0]} x {X.shape[1]}, "
              f"{X.nbytes / 2**20 / n_cores:.0f} MiB of X per worker", flush=True)
    print(f"\nFit time: est.fit(X, y) at default parameters, {n_cores} workers x 1 thread "
          f"(frozen: 3), {repeats} interleaved repeats; seconds median [IQR]")
    print(table(["model scenario sync", "fit s", "rounds", "ideal s", "/no straggler",
                 "BSP/A-BSP", "returned while frozen"], rows))
    print(load_note(load0))
    print(f"results: {write_json('bench_fit_time', args, {'runs': raw})}")


if __name__ == "__main__":
    main()
