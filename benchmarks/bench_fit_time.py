"""Fit time: what a user waits for, ``est.fit(X, y)`` at default parameters, BSP vs A-BSP,
with and without stragglers.

One worker process per core, one thread each (2 on a 2-core machine; more worker processes than
cores would let a sleeping straggler's core serve the others and hide its cost). In-memory data
sized so that a straggler-free BSP fit takes about 2 s or more. Scenarios:

* ``none``: no straggler;
* ``persistent``: one worker emulated 4x slower throughout (``daskabsp.slow_workers``);
* ``transient``: before each round a seeded random worker is 4x slower for that round;
* ``frozen``: 3 workers; 1 s into the fit one of them is stopped (SIGSTOP) for 30 s, or until
  the fit returns (A-BSP only, and BSP for the first model: a BSP fit waits the 30 s). Its
  "/no straggler" is against the same fits on the same 3 workers without the freeze, timed
  interleaved with the frozen ones.

Per model and scenario, BSP, A-BSP (the default: with helpers) and A-BSP as published
(``ABSP(helpers=False)``, "absp-paper") run interleaved (the order alternates per repeat); for
binary logistic regression also dask-ml's Newton solver (its fastest here, see
``bench_solvers.py``) on the same data as dask arrays (not under ``transient``: dask-ml has no
per-round hook, and not under ``frozen``). "worker MiB" is the most training data one worker
holds in the A-BSP fit (its partitions and the copies helpers read, ``daskabsp.replicas``).
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

from daskabsp import ABSP, SlowWorkers
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


SYNCS = {"absp": "absp", "absp-paper": ABSP(helpers=False), "bsp": "bsp"}


def fit_once(client, make, X, y, sync: str, scenario: str, seed: int, daskml=None):
    """One timed fit under ``scenario``: seconds, rounds, (frozen) whether it returned
    before the worker was resumed, and the most data bytes a worker held."""
    if sync == "dask-ml":
        from bench_solvers import daskml_fit

        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            daskml_fit(client, "newton", *daskml)
        return time.perf_counter() - t0, -1, None, np.nan
    est = make(SYNCS[sync])
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
    held = est.history_.attrs.get("max_worker_data_bytes", np.nan)
    return seconds, int(np.max(getattr(est, "n_iter_", -1))), returned, held


def mib(values) -> str:
    finite = [v for v in values if np.isfinite(v)]
    return f"{max(finite) / 2**20:.0f}" if finite else ""


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
            syncs = ["absp", "absp-paper"] + (
                ["bsp"] if scenario != "frozen" or name == wanted[0] else [])
            if name == "logistic" and scenario in ("none", "persistent"):
                syncs.append("dask-ml")
            with fast_malloc(), LocalCluster(n_workers=n_workers, threads_per_worker=1,
                                             processes=True, dashboard_address=":0") as cl, \
                    Client(cl) as client:
                slow = sorted(client.scheduler_info()["workers"])[0]
                plugin = SlowWorkers({slow: FACTOR}) if scenario == "persistent" else None
                if plugin is not None:
                    client.register_plugin(plugin)
                daskml = None
                if "dask-ml" in syncs:
                    from bench_solvers import daskml_arrays

                    daskml = daskml_arrays(client, X, y)
                times = {s: [] for s in syncs}
                counts = {s: [] for s in syncs}
                held = {s: [] for s in syncs}
                frozen_ok = {s: [] for s in syncs}
                unfrozen = {s: [] for s in syncs}
                for r in range(repeats):
                    for sync in (syncs if r % 2 == 0 else syncs[::-1]):
                        if scenario == "frozen":  # the same fit on the same 3 workers
                            unfrozen[sync].append(fit_once(client, make, X, y, sync, "none",
                                                           args.seed + r, daskml)[0])
                        sec, n, ok, b = fit_once(client, make, X, y, sync, scenario,
                                                 args.seed + r, daskml)
                        times[sync].append(sec)
                        counts[sync].append(n)
                        held[sync].append(b)
                        if ok is not None:
                            frozen_ok[sync].append(ok)
                del daskml
            for sync in syncs:
                t = summary(times[sync])
                base.setdefault(scenario, {})[sync] = t["median"]
                if scenario == "frozen":
                    base.setdefault("frozen-none", {})[sync] = np.median(unfrozen[sync])
                ideal = ""
                ref = "frozen-none" if scenario == "frozen" else "none"
                if scenario == "persistent" and "none" in base:
                    n = n_cores
                    ideal = f"{base['none']['bsp'] * n / (n - 1 + 1 / FACTOR):.2f}"
                rows.append([f"{name} {scenario} {sync}", spread(t), "/".join(
                    str(c) for c in sorted(set(counts[sync])) if c >= 0), ideal,
                    f"{t['median'] / float(ideal):.2f}" if ideal else "",
                    f"{t['median'] / base.get(ref, {}).get(sync, np.nan):.2f}",
                    "" if sync == "bsp" or "bsp" not in times else
                    f"{summary(times['bsp'])['median'] / t['median']:.2f}",
                    "" if not frozen_ok[sync] else
                    f"{sum(frozen_ok[sync])}/{len(frozen_ok[sync])}",
                    mib(held[sync])])
                raw.append({"model": name, "scenario": scenario, "sync": sync,
                            "seconds": times[sync], "rounds": counts[sync]})
        print(f"-- {name}: {X.shape[0]} x {X.shape[1]}, "
              f"{X.nbytes / 2**20 / n_cores:.0f} MiB of X per worker", flush=True)
    print(f"\nFit time: est.fit(X, y) at default parameters, {n_cores} workers x 1 thread "
          f"(frozen: 3), {repeats} interleaved repeats; seconds median [IQR]")
    print(table(["model scenario sync", "fit s", "rounds", "ideal s", "/ideal",
                 "/no straggler", "BSP/this", "returned while frozen", "worker MiB"], rows))
    print(load_note(load0))
    print(f"results: {write_json('bench_fit_time', args, {'runs': raw})}")


if __name__ == "__main__":
    main()
