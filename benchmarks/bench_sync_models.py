"""The sync models side by side (issue 23): BSP, A-BSP (default and as published), SSP
(s = 1, 3, 10) and ASP on the same estimators, the comparison of Wang et al. (Middleware 2018).

``est.fit(X, y)`` at default parameters for ``LogisticRegression``, ``LinearSVC`` and
``KMeans`` (8 clusters) on in-memory data, 2 worker processes x 1 thread (one per core),
default partitions (one per worker thread), in three scenarios:

* ``none``: no straggler;
* ``persistent``: one worker emulated 4x slower throughout (``daskabsp.slow_workers``);
* ``transient``: every ``T`` seconds a seeded random worker becomes 4x slower until the next
  switch, ``T`` being the straggler-free BSP round time of the model measured in the same
  run, at least 0.1 s (time-based, so rounds and updates are treated alike).

Per fit: the whole ``fit()``, and the time until the fitted parameters are within 1% and
within 1e-4 (relative) of the optimum (the lowest objective scikit-learn or any fit of the
model reached), from parameters a scikit-learn fit callback copies after every round (every
update under SSP and ASP), their exact objectives evaluated after the fits. The variants run
interleaved (the order alternates per repeat) on one cluster per case, after an untimed
warm-up fit. "BSP/this" is BSP's median over this variant's median, in the same case. The
table prints medians [IQR]; the figure (``--figure``) the distance to the optimum against
time of each variant's first repeat, one panel per model and scenario.
"""

from __future__ import annotations

import os
import random
import threading
import time
import warnings

import numpy as np
from _common import parse_args, spread, summary, table, write_json
from _data import dense_classification
from bench_fit_time import _ATTRS, Trace  # (under SSP/ASP its "round" is an update)
from distributed import Client, LocalCluster
from sklearn.cluster import KMeans as SkKMeans
from sklearn.datasets import make_blobs
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression as SkLogisticRegression
from sklearn.svm import LinearSVC as SkLinearSVC

from daskabsp import ABSP, ASP, SSP, SlowWorkers
from daskabsp.cluster import fast_malloc, worker_addresses
from daskabsp.estimators import KMeans, LinearSVC, LogisticRegression

FACTOR = 4.0
TARGETS = {"1%": 1e-2, "1e-4": 1e-4}
SYNCS = {"bsp": "bsp", "absp": ABSP(), "absp-paper": ABSP.published(), "ssp1": SSP(1),
         "ssp3": SSP(3), "ssp10": SSP(10), "asp": ASP()}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIGURE = os.path.join(ROOT, "docs", "lab", "sync_models.png")


def add_options(p) -> None:
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--scenarios", default="none,persistent,transient")
    p.add_argument("--models", default="logistic,svc,kmeans")
    p.add_argument("--syncs", default=",".join(SYNCS))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--figure", default=FIGURE, help="where the figure goes ('' for none)")


def models(quick: bool, seed: int) -> dict:
    s = 10 if quick else 1

    def blobs():
        # overlapping clusters: Lloyd needs ~15 rounds from k-means++ (2 when well apart)
        return make_blobs(600_000 // s, 10, centers=8, cluster_std=6.0, random_state=seed)

    return {
        "logistic": (lambda: dense_classification(400_000 // s, 60, 2, seed),
                     lambda sync: LogisticRegression(sync=sync)),
        "svc": (lambda: dense_classification(400_000 // s, 60, 2, seed),
                lambda sync: LinearSVC(sync=sync)),
        "kmeans": (blobs, lambda sync: KMeans(8, sync=sync, random_state=seed)),
    }


# -- exact objectives ----------------------------------------------------------------------------


def objective(name: str, X, y, p: dict) -> float:
    """scikit-learn's training objective at default parameters, at the fitted attributes."""
    if name == "kmeans":
        C = p["cluster_centers_"]
        d = (X**2).sum(1)[:, None] - 2 * X @ C.T + (C**2).sum(1)[None, :]
        return float(np.maximum(d.min(1), 0).sum())
    w, b = np.ravel(p["coef_"]), float(np.ravel(p["intercept_"])[0])
    s = np.where(y == p["classes_"][1], 1.0, -1.0)
    z = s * (X @ w + b)
    if name == "svc":  # LIBLINEAR penalises the intercept (intercept_scaling=1)
        return float((np.maximum(0.0, 1.0 - z) ** 2).sum() + 0.5 * (w @ w + b * b))
    return float(np.logaddexp(0.0, -z).sum() + 0.5 * w @ w)


def reference(name: str, X, y, seed: int) -> float:
    """scikit-learn's objective, fitted tightly (k-means: Lloyd from k-means++; only a
    bound, the fits' own best usually beats it)."""
    if name == "kmeans":
        km = SkKMeans(8, n_init=1, tol=1e-8, random_state=seed).fit(X)
        return objective(name, X, y, {"cluster_centers_": km.cluster_centers_})
    est = (SkLogisticRegression(tol=1e-10, max_iter=10_000) if name == "logistic"
           else SkLinearSVC(dual=False, tol=1e-10, max_iter=100_000))
    est.fit(X, y)
    return objective(name, X, y, {a: getattr(est, a) for a in ("coef_", "intercept_",
                                                               "classes_")})


class Transient:
    """Every ``period`` seconds a seeded random worker becomes ``FACTOR`` times slower (the
    engine's emulation plugin, registered again under one name) until the next switch."""

    def __init__(self, client: Client, period: float, seed: int) -> None:
        self.client, self.period = client, period
        self.rng = random.Random(seed)
        self.workers = worker_addresses(client)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _slow_one(self) -> None:
        plugin = SlowWorkers({self.rng.choice(self.workers): FACTOR})
        plugin.name = "bench-transient"
        self.client.register_plugin(plugin)

    def _run(self) -> None:
        while not self.stop.wait(self.period):
            self._slow_one()

    def __enter__(self) -> Transient:
        self._slow_one()
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()
        self.client.unregister_worker_plugin("bench-transient")


def fit_once(client, make, X, y, sync: str, scenario: str, period: float, seed: int) -> dict:
    """One timed fit: seconds, rounds or updates, and the traced parameters."""
    est = make(SYNCS[sync])
    trace = Trace()
    est.set_callbacks(trace)
    t0 = trace.t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        if scenario == "transient":
            with Transient(client, period, seed):
                est.fit(X, y)
        else:
            est.fit(X, y)
    seconds = time.perf_counter() - t0
    h = est.history_
    final = {a: np.array(getattr(est, a)) for a in _ATTRS if hasattr(est, a)}
    steps = h.sizes.get("update", h.sizes.get("round", 0))
    return {"seconds": seconds, "steps": int(steps), "trace": [*trace.points, (seconds, final)],
            "round_seconds": float(h.wall_time.values[-1]) / max(steps, 1)}


def run_case(name: str, make, X, y, scenario: str, syncs: list[str], repeats: int,
             n_workers: int, period: float, seed: int) -> dict[str, list[dict]]:
    """Every variant's fits of one model and scenario, interleaved, on a cluster of its
    own; ``fits[sync]`` lists each repeat's."""
    with fast_malloc(), LocalCluster(n_workers=n_workers, threads_per_worker=1,
                                     processes=True, dashboard_address=":0") as cl, \
            Client(cl) as client:
        if scenario == "persistent":
            client.register_plugin(SlowWorkers({worker_addresses(client)[0]:
                                                FACTOR}))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            make("bsp").fit(X, y)  # warm-up: the workers import what the fits need
        fits: dict[str, list[dict]] = {s: [] for s in syncs}
        for r in range(repeats):
            for sync in (syncs if r % 2 == 0 else syncs[::-1]):
                fits[sync].append(fit_once(client, make, X, y, sync, scenario, period,
                                           seed + r))
    return fits


def reach(name: str, X, y, fits: dict[str, list[dict]], ref: float) -> float:
    """Evaluate every traced point's exact objective (kept as ``f["objectives"]``) and
    each fit's time to every target (``f["to"]``); returns the optimum used."""
    for fs in fits.values():
        for f in fs:
            f["objectives"] = [objective(name, X, y, p) for _, p in f.pop("trace_points")]
    best = min([ref, *(min(f["objectives"]) for fs in fits.values() for f in fs)])
    for fs in fits.values():
        for f in fs:
            f["to"] = {k: next((t for t, v in zip(f["times"], f["objectives"], strict=True)
                                if v <= best + tol * abs(best)), np.nan)
                       for k, tol in TARGETS.items()}
    return best


def med(fs: list[dict], get) -> float:
    values = [get(f) for f in fs]
    return float(np.nanmedian(values)) if np.isfinite(values).any() else np.nan


def rows_of(name: str, scenario: str, fits: dict[str, list[dict]]) -> list[list]:
    out = []
    for sync, fs in fits.items():
        unit = "u" if sync.startswith(("ssp", "asp")) else "r"
        steps = sorted({f["steps"] for f in fs})
        ratio = []
        for get in (lambda f: f["seconds"], *(lambda f, k=k: f["to"][k] for k in TARGETS)):
            b = med(fits.get("bsp", []), get)
            ratio.append("" if sync == "bsp" or "bsp" not in fits else f"{b / med(fs, get):.2f}")
        out.append([f"{name} {scenario} {sync}", spread(summary([f["seconds"] for f in fs])),
                    *(spread(summary([f["to"][k] for f in fs])) for k in TARGETS),
                    "/".join(f"{s}{unit}" for s in steps), *ratio])
    return out


def figure(path: str, curves: dict, models_: list[str], scenarios: list[str]) -> None:
    """Distance to the optimum against time, one panel per model (column) and scenario
    (row), one line per variant (its first repeat)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = {"bsp": ("k", "-"), "absp": ("C0", "-"), "absp-paper": ("C0", "--"),
              "ssp1": ("C1", ":"), "ssp3": ("C1", "-."), "ssp10": ("C1", "--"),
              "asp": ("C3", "-")}
    fig, axes = plt.subplots(len(scenarios), len(models_), squeeze=False,
                             figsize=(4.2 * len(models_), 3.2 * len(scenarios)))
    for (name, scenario), lines in curves.items():
        ax = axes[scenarios.index(scenario)][models_.index(name)]
        for sync, (t, gap) in lines.items():
            color, ls = styles.get(sync, ("C7", "-"))
            keep = gap > 0
            ax.plot(np.asarray(t)[keep], np.asarray(gap)[keep], color=color, ls=ls,
                    label=sync, marker=".", ms=3, lw=1.2)
        ax.set_yscale("log")
        for tol in TARGETS.values():
            ax.axhline(tol, color="0.7", lw=0.8)
        ax.set_title(f"{name}, {scenario} straggler" if scenario != "none"
                     else f"{name}, no straggler", fontsize=10)
        ax.set_xlabel("time since fit() was called (s)")
        ax.set_ylabel("(objective - optimum) / optimum")
    axes[0][0].legend(fontsize=8, ncol=2)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], add_options)
    load0 = os.getloadavg()[0]
    repeats = args.repeats or (1 if args.quick else 3)
    scenarios, wanted = args.scenarios.split(","), args.models.split(",")
    syncs = args.syncs.split(",")
    rows, raw, curves = [], [], {}
    for name, (data, make) in models(args.quick, args.seed).items():
        if name not in wanted:
            continue
        X, y = data()
        ref = reference(name, X, y, args.seed)
        period = 0.3
        for scenario in scenarios:
            fits = run_case(name, make, X, y, scenario, syncs, repeats, args.workers,
                            period, args.seed)
            for fs in fits.values():
                for f in fs:
                    trace = f.pop("trace")
                    f["times"] = [t for t, _ in trace]
                    f["trace_points"] = trace
            best = reach(name, X, y, fits, ref)
            if scenario == "none" and "bsp" in fits:  # the transient switch period
                period = max(0.1, med(fits["bsp"], lambda f: f["round_seconds"]))
            curves[(name, scenario)] = {
                s: (fs[0]["times"], (np.asarray(fs[0]["objectives"]) - best) / abs(best))
                for s, fs in fits.items()}
            rows += rows_of(name, scenario, fits)
            raw += [{"model": name, "scenario": scenario, "sync": s, "optimum": best,
                     "period": period if scenario == "transient" else None,
                     "seconds": [f["seconds"] for f in fs], "steps": [f["steps"] for f in fs],
                     **{f"to_{k}": [f["to"][k] for f in fs] for k in TARGETS}}
                    for s, fs in fits.items()]
            print(f"-- {name} {scenario} done", flush=True)
    print(f"\nSync models: est.fit(X, y) at default parameters, {args.workers} workers x 1 "
          f"thread, {repeats} interleaved repeats; seconds median [IQR]; to 1% / to 1e-4: "
          "until the fitted parameters are within that (relative) of the optimum; steps: "
          "rounds (r) or updates (u); BSP/this: BSP's median over this variant's")
    print(table(["model scenario sync", "fit s", "to 1% s", "to 1e-4 s", "steps",
                 "BSP/this fit", "BSP/this 1%", "BSP/this 1e-4"], rows))
    print(f"load average {load0:.1f} at start, {os.getloadavg()[0]:.1f} at end")
    if args.figure:
        figure(args.figure, curves, [m for m in models(True, 0) if m in wanted], scenarios)
        print(f"figure: {args.figure}")
    print(f"results: {write_json('bench_sync_models', args, {'runs': raw})}")


if __name__ == "__main__":
    main()
