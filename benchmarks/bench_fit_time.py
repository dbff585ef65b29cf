"""Fit time: what a user waits for, ``est.fit(X, y)`` at default parameters, under every
sync variant, with and without stragglers: the whole ``fit()`` and the time until the fitted
parameters are within 1% of the optimum.

Worker processes x 1 thread each (``--workers``, default 2 and 4; with more worker processes
than cores a sleeping straggler's core serves the others and hides part of its cost: read the
4-worker rows next to that). In-memory data sized so that a straggler-free BSP fit takes about
2 s or more. Scenarios:

* ``none``: no straggler;
* ``persistent``: one worker emulated 4x slower throughout (``daskabsp.slow_workers``);
* ``transient``: before each round a seeded random worker is 4x slower for that round;
* ``ordered``: rows sorted by label within each partition, and the persistent straggler (a
  partial pass sees one class only);
* ``frozen``: 3 workers; when the fit's first round ends one of them is stopped (SIGSTOP) for
  30 s, or until the fit returns (BSP only for the first model: a BSP fit waits the 30 s).
  Its "/no straggler" is against the same fits on the same 3 workers without the freeze.

Each case starts a fresh cluster and fits once, untimed, before its repeats (a cluster's
first fit pays the workers' imports). Variants, run interleaved (the order alternates per
repeat): ``absp`` (the default A-BSP),
``absp-paper`` (A-BSP as published, ``ABSP.published()``), ``drop`` (its backup-worker
ablation, ``ABSP.published(on_quorum="drop")``), ``bsp``; for binary logistic regression also
dask-ml's Newton solver (none, persistent). "to 1%" is the wall time since ``fit`` was called
at the end of the first round whose parameters are within 1% of the optimum (the smallest
objective any fit of the case reached, or scikit-learn's); the exact objectives are evaluated
after the fits, from parameters a scikit-learn fit callback copied each round. "/best" is a
variant's median over the best median of the other variants of its row group. The ideal with
a persistent straggler is the straggler-free BSP time scaled by the lost capacity,
n / (n - 1 + 1/F). The table prints medians [IQR].

``--netns RATE`` runs every case on a namespace cluster instead (``daskabsp.lab.netcluster``, root
needed): the scheduler and each worker process in a network namespace of its own, one worker
pinned per core, every link (the driver's too) shaped to RATE in both directions, so the
engine's row moves cost what they would on such a network. ``--netns-data workers`` (the
default) makes each case's rows on the workers once and fits the persisted dask arrays;
``driver`` fits the in-memory arrays, each fit scattering them across the driver's link.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import dask
import numpy as np
from _common import (
    FitCallback,
    add_netns_options,
    load_note,
    netns_client,
    parse_args,
    rows_on_workers,
    spread,
    summary,
    table,
    write_json,
)
from _data import dense_classification, dense_regression
from distributed import Client, LocalCluster
from scipy.special import logsumexp
from sklearn.datasets import make_blobs
from sklearn.exceptions import ConvergenceWarning

from daskabsp import ABSP, SlowWorkers
from daskabsp.cluster import fast_malloc, worker_addresses
from daskabsp.estimators import KMeans, LinearSVC, LogisticRegression, Ridge
from daskabsp.lab.datasets import order_rows

FACTOR = 4.0
FREEZE_FOR = 30.0
TOLERANCE = 0.01  # "to 1%": relative objective gap to the optimum

SYNCS = {"absp": "absp", "absp-paper": ABSP.published(),
         "drop": ABSP.published(on_quorum="drop"), "bsp": "bsp"}
#: Variants run only when named in ``--syncs``, with the settings they fit under: the default
#: without copies for helpers (what the copies buy, and the memory they cost).
EXTRA_SYNCS = {"absp-nocopies": ("absp", {"daskabsp.replicas": 0})}


def add_options(p) -> None:
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--scenarios", default="none,persistent,transient,ordered,frozen")
    p.add_argument("--models", default="logistic,logistic3,svc,ridge,kmeans")
    p.add_argument("--workers", default="2,4", help="worker processes (comma-separated)")
    p.add_argument("--syncs", default=",".join(SYNCS))
    add_netns_options(p)


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


# -- exact objectives of the fitted parameters --------------------------------------------------


def objective(name: str, X, y, p: dict) -> float:
    """The model's training objective (scikit-learn's, at default parameters) at the
    parameters ``p`` (fitted attributes) over ``X``, ``y``."""
    if name == "kmeans":
        C = p["cluster_centers_"]
        d = (X**2).sum(1)[:, None] - 2 * X @ C.T + (C**2).sum(1)[None, :]
        return float(np.maximum(d.min(1), 0).sum())
    W, b = np.atleast_2d(p["coef_"]), np.atleast_1d(p["intercept_"])
    Z = X @ W.T + b
    if name == "ridge":
        return float(((y - Z.ravel()) ** 2).sum() + (W**2).sum())
    if name == "svc":
        s = np.where(y == p["classes_"][1], 1.0, -1.0)
        return float((np.maximum(0, 1 - s * Z.ravel()) ** 2).sum() + 0.5 * (W**2).sum())
    if W.shape[0] == 1:  # binary logistic regression, C = 1
        s = np.where(y == p["classes_"][1], 1.0, -1.0)
        return float(np.logaddexp(0, -s * Z.ravel()).sum() + 0.5 * (W**2).sum())
    codes = np.searchsorted(p["classes_"], y)
    return float((logsumexp(Z, axis=1) - Z[np.arange(len(y)), codes]).sum()
                 + 0.5 * (W**2).sum())


_ATTRS = ("coef_", "intercept_", "classes_", "cluster_centers_")


class Trace(FitCallback):
    """Copies the fitted attributes after each engine round, with the time since ``t0``."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.points: list[tuple[float, dict]] = []

    def on_fit_task_end(self, estimator, context, *, fitted_estimator=None) -> bool:
        if context.task_name == "round" and fitted_estimator is not None:
            self.points.append((time.perf_counter() - self.t0, {
                a: np.array(getattr(fitted_estimator, a)) for a in _ATTRS
                if hasattr(fitted_estimator, a)}))
        return False


class Transient(FitCallback):
    """After each engine round, a seeded random worker becomes ``FACTOR`` times slower for
    the next round (the engine's emulation plugin, registered again under the same name)."""

    def __init__(self, client: Client, seed: int) -> None:
        self.client, self.rng = client, random.Random(seed)
        self.workers = worker_addresses(client)

    def slow_one(self) -> None:
        plugin = SlowWorkers({self.rng.choice(self.workers): FACTOR})
        plugin.name = "bench-transient"
        self.client.register_plugin(plugin)

    def on_fit_task_end(self, estimator, context, *, fitted_estimator=None) -> bool:
        if context.task_name == "round":
            self.slow_one()
        return False


class Freeze(FitCallback):
    """Stops the worker process ``pid`` (SIGSTOP) when the fit's first round ends, for
    :data:`FREEZE_FOR` seconds or until :meth:`resume` (the fit returned): an event of the
    fit's own, so that a fit faster than any fixed delay still meets the freeze."""

    def __init__(self, pid: int) -> None:
        self.pid, self.since = pid, None
        self.timer = threading.Timer(FREEZE_FOR, self.resume)

    def on_fit_task_end(self, estimator, context, *, fitted_estimator=None) -> bool:
        if context.task_name == "round" and self.since is None:
            self.since = time.perf_counter()
            os.kill(self.pid, signal.SIGSTOP)
            self.timer.start()
        return False

    def resume(self) -> None:
        self.timer.cancel()
        os.kill(self.pid, signal.SIGCONT)

    def returned_frozen(self, end: float) -> bool:
        """Whether a fit that ended at ``end`` (``time.perf_counter``) did so while the
        worker was still stopped (it was stopped at all)."""
        return self.since is not None and end < self.since + FREEZE_FOR


# -- one fit ----------------------------------------------------------------------------------


def fit_once(client, make, X, y, sync: str, scenario: str, seed: int, daskml=None) -> dict:
    """One timed fit under ``scenario``: seconds, rounds, the per-round parameters, (frozen)
    whether it returned before the worker was resumed, and the most data bytes a worker
    held."""
    if sync == "dask-ml":
        from bench_solvers import daskml_fit

        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            daskml_fit(client, "newton", *daskml, 2)
        return {"seconds": time.perf_counter() - t0, "rounds": -1, "trace": [],
                "returned": None, "held": np.nan}
    sync, settings = EXTRA_SYNCS.get(sync, (SYNCS.get(sync), {}))
    est = make(sync)
    trace = Trace()
    hooks = [trace]
    if scenario == "transient":
        hooks.append(Transient(client, seed))
        hooks[-1].slow_one()
    freeze = None
    if scenario == "frozen":
        freeze = Freeze(client.run(os.getpid)[worker_addresses(client)[-1]])
        hooks.append(freeze)
    est.set_callbacks(*hooks)
    t0 = trace.t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            with dask.config.set(settings):
                est.fit(X, y)
        seconds = time.perf_counter() - t0
    finally:
        if freeze is not None:
            freeze.resume()
        if scenario == "transient":
            client.unregister_worker_plugin("bench-transient")
    final = {a: np.array(getattr(est, a)) for a in _ATTRS if hasattr(est, a)}
    return {"seconds": seconds, "rounds": int(np.max(getattr(est, "n_iter_", -1))),
            "trace": [*trace.points, (seconds, final)],
            "returned": (freeze.returned_frozen(t0 + seconds) if freeze is not None
                         else None),
            "held": est.history_.attrs.get("max_worker_data_bytes", np.nan)}


def to_target(name: str, X, y, fits: dict[str, list[dict]]) -> dict[str, list[float]]:
    """Per variant, each fit's time to within :data:`TOLERANCE` of the best objective any
    fit reached (NaN if never)."""
    objs = {s: [[objective(name, X, y, p) for _, p in f["trace"]] for f in fs]
            for s, fs in fits.items() if s != "dask-ml"}
    best = min(min(o) for runs in objs.values() for o in runs if o)
    target = best + TOLERANCE * abs(best)
    out: dict[str, list[float]] = {}
    for s, runs in objs.items():
        out[s] = [next((t for (t, _), v in zip(f["trace"], o, strict=True) if v <= target),
                       np.nan) for f, o in zip(fits[s], runs, strict=True)]
    return out


# -- a case: one model, scenario and cluster ----------------------------------------------------


@contextmanager
def cluster(n_workers: int, netns: str | None) -> Iterator[Client]:
    """A LocalCluster of ``n_workers`` processes x 1 thread, or (``netns``: a rate) a
    namespace cluster, and a client on it."""
    with fast_malloc():
        if netns:
            with netns_client(n_workers, netns) as client:
                yield client
            return
        with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                          dashboard_address=":0") as cl, Client(cl) as client:
            yield client


def run_case(name: str, make, X, y, scenario: str, n_workers: int, syncs: list[str],
             repeats: int, seed: int, data: Callable | None = None,
             netns: str | None = None) -> dict[str, list[dict]]:
    """Every variant's fits of one case, interleaved; ``fits[sync]`` lists each repeat's.
    With ``data`` (the case's data function) and ``netns``, the fits get the rows made on
    the workers (:func:`_common.rows_on_workers`), else ``X``, ``y``."""
    if scenario == "ordered":
        X, y = order_rows(X, y, by="label", n_partitions=n_workers)
    with cluster(n_workers, netns) as client:
        Xf, yf = X, y
        if data is not None and netns:
            if scenario == "ordered":
                data = _ordered(data, n_workers)
            Xf, yf = rows_on_workers(client, data, (X, y))
        slow = worker_addresses(client)[0]
        if scenario in ("persistent", "ordered"):
            client.register_plugin(SlowWorkers({slow: FACTOR}))
        daskml = None
        if "dask-ml" in syncs:
            from bench_solvers import place_pieces

            daskml = (place_pieces(client, X, y)[2:] if Xf is X else
                      (Xf, client.persist(yf.astype(np.float64))))
        # The first fit on a fresh cluster pays its start-up (the workers import the fit's
        # modules; on the namespace cluster ~1.4 s, whichever variant comes first): one
        # untimed fit, BSP where it is compared, before the timed ones.
        warm = "bsp" if "bsp" in syncs else next(s for s in syncs if s != "dask-ml")
        first = fit_once(client, make, Xf, yf, warm, "none", seed, daskml)["seconds"]
        print(f"-- {name} {scenario} {n_workers} workers: warm-up fit ({warm}) {first:.2f} s",
              flush=True)
        fits: dict[str, list[dict]] = {s: [] for s in syncs}
        unfrozen: dict[str, list[float]] = {s: [] for s in syncs}
        for r in range(repeats):
            for sync in (syncs if r % 2 == 0 else syncs[::-1]):
                if scenario == "frozen":  # the same fit on the same 3 workers
                    unfrozen[sync].append(fit_once(client, make, Xf, yf, sync, "none",
                                                   seed + r, daskml)["seconds"])
                fits[sync].append(fit_once(client, make, Xf, yf, sync, scenario, seed + r,
                                           daskml))
        del daskml, Xf, yf
    reached = to_target(name, X, y, fits)
    for sync in syncs:
        for f, t in zip(fits[sync], reached.get(sync, [np.nan] * len(fits[sync])),
                        strict=True):
            f.pop("trace")
            f["to_target"] = t
        if unfrozen[sync]:
            fits[sync][0]["unfrozen"] = unfrozen[sync]
    return fits


def _ordered(data: Callable, n_workers: int) -> Callable:
    """``data`` with its rows sorted by label within each of ``n_workers`` partitions."""
    return lambda: order_rows(*data(), by="label", n_partitions=n_workers)


def mib(values) -> str:
    finite = [v for v in values if np.isfinite(v)]
    return f"{max(finite) / 2**20:.0f}" if finite else ""


def med(fs: list[dict], key: str) -> float:
    return float(np.nanmedian([f[key] for f in fs])) if fs else np.nan


def rows_of(name: str, scenario: str, n_workers: int, fits: dict, base: dict) -> list[list]:
    """Table rows of one case; ``base[(name, n)]`` holds the straggler-free BSP time."""
    out = []
    for sync, fs in fits.items():
        others = [s for s in fits if s not in (sync, "dask-ml")]
        rel = {k: med(fs, k) / min((med(fits[s], k) for s in others), default=np.nan)
               for k in ("seconds", "to_target")}
        ideal = ""
        if scenario == "persistent" and (name, n_workers) in base:
            ideal = f"{base[(name, n_workers)] * n_workers / (n_workers - 1 + 1 / FACTOR):.2f}"
        ref = (np.median(fs[0]["unfrozen"]) if scenario == "frozen" and "unfrozen" in fs[0]
               else base.get((name, n_workers, sync)))
        returned = [f["returned"] for f in fs if f["returned"] is not None]
        out.append([
            f"{name} {scenario} {n_workers}w {sync}",
            spread(summary([f["seconds"] for f in fs])),
            spread(summary([f["to_target"] for f in fs])) if sync != "dask-ml" else "",
            "/".join(str(c) for c in sorted({f["rounds"] for f in fs}) if c >= 0),
            f"{rel['seconds']:.2f}", f"{rel['to_target']:.2f}" if sync != "dask-ml" else "",
            ideal, f"{med(fs, 'seconds') / float(ideal):.2f}" if ideal else "",
            f"{med(fs, 'seconds') / ref:.2f}" if ref else "",
            "" if sync == "bsp" or "bsp" not in fits else
            f"{med(fits['bsp'], 'seconds') / med(fs, 'seconds'):.2f}",
            f"{sum(returned)}/{len(returned)}" if returned else "",
            mib([f["held"] for f in fs])])
    return out


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], add_options)
    load0 = os.getloadavg()[0]
    repeats = args.repeats or (1 if args.quick else 3)
    scenarios = args.scenarios.split(",")
    wanted = args.models.split(",")
    sizes = [int(n) for n in args.workers.split(",")]
    rows, raw, base = [], [], {}
    for name, (data, make) in models(args.quick, args.seed).items():
        if name not in wanted:
            continue
        X, y = data()
        for n_workers in sizes:
            for scenario in scenarios:
                if scenario == "frozen" and n_workers != sizes[0]:
                    continue
                n = 3 if scenario == "frozen" else n_workers
                syncs = [s for s in args.syncs.split(",")
                         if s != "bsp" or scenario != "frozen" or name == wanted[0]]
                if name == "logistic" and scenario in ("none", "persistent"):
                    syncs.append("dask-ml")
                fits = run_case(name, make, X, y, scenario, n, syncs, repeats, args.seed,
                                data if args.netns_data == "workers" else None, args.netns)
                if scenario == "none":
                    base[(name, n)] = med(fits.get("bsp", []), "seconds")
                    base.update({(name, n, s): med(fs, "seconds") for s, fs in fits.items()})
                rows += rows_of(name, scenario, n, fits, base)
                raw += [{"model": name, "scenario": scenario, "workers": n, "sync": s,
                         "seconds": [f["seconds"] for f in fs],
                         "to_target": [f["to_target"] for f in fs],
                         "rounds": [f["rounds"] for f in fs],
                         "returned": [f["returned"] for f in fs],
                         "unfrozen": fs[0].get("unfrozen", []) if fs else []}
                        for s, fs in fits.items()]
                print(f"-- {name} {scenario} {n} workers done", flush=True)
    where = "a LocalCluster" if not args.netns else (
        f"a namespace cluster, every link {args.netns} both ways, rows " +
        ("made on the workers" if args.netns_data == "workers" else
         "scattered by each fit from the driver"))
    print(f"\nFit time: est.fit(X, y) at default parameters, workers x 1 thread (frozen: 3) "
          f"on {where}, {repeats} interleaved repeats; seconds median [IQR]; to 1%: until "
          f"within {TOLERANCE:.0%} of the optimum; /best: over the best other variant")
    print(table(["model scenario workers sync", "fit s", "to 1% s", "rounds", "/best fit",
                 "/best to 1%", "ideal s", "/ideal", "/no straggler", "BSP/this",
                 "returned while frozen", "worker MiB"], rows))
    print(load_note(load0))
    name = f"bench_fit_time-netns-{args.netns}-{args.netns_data}" if args.netns else \
        "bench_fit_time"
    payload = {"runs": raw, "netns": args.netns, "netns_data": args.netns_data}
    print(f"results: {write_json(name, args, payload)}")


if __name__ == "__main__":
    main()
