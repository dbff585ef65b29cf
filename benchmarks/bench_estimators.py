"""Estimators: time to reach scikit-learn's objective within 1e-3, daskabsp (BSP, A-BSP) vs
dask-ml vs scikit-learn in one process, with no straggler and with one worker 4x slower.

Logistic regression (binary, L2, ``C=1``): daskabsp's ``LogisticRegression`` under BSP and
A-BSP against dask-ml's ``LogisticRegression`` with each of its solvers. K-means: daskabsp's
``KMeans`` under BSP and A-BSP against dask-ml's ``KMeans``. Everything runs side by side in one
run on one ``LocalCluster`` of 4 worker processes x 1 thread, on the same persisted dask arrays
(one row chunk per worker); scikit-learn runs in the client process on the gathered arrays
while the cluster is idle.

Target: the objective (scikit-learn's, evaluated here on the fitted coefficients or centers)
within 1e-3 (relative) of the optimum: scikit-learn's ``LogisticRegression(tol=1e-10)``, and for
k-means the lowest inertia of scikit-learn's ``KMeans(n_init=10)``.

Time to target:

* daskabsp: one fit per repeat, from the ``fit`` call; a scikit-learn callback
  (``set_callbacks``, scikit-learn >= 1.9) records when each round's parameters exist on the
  client (time inside the callback is excluded). Includes validation, data placement and, for
  k-means, the k-means|| initialisation.
* dask-ml: its solvers expose no per-iteration hook, so a sweep of ``max_iter`` (1, 2, 3, ...)
  finds the fewest iterations that reach the target (dask-ml is deterministic on fixed data);
  each repeat then times a fit with that ``max_iter``.
* scikit-learn: the time of a default fit (it converges to its own tolerance).

The straggler: for daskabsp the engine's emulation (``daskabsp.slow_workers``: after each chunk
of a partition scan the slowed worker sleeps 3x the chunk's compute time). dask-ml's tasks
cannot be slowed from inside, so the same emulation is applied "through its tasks": on the
slowed worker every task sleeps 3x its own run time after running (a worker plugin wraps the
worker's thread pool). Both make that worker take 4x as long for the same work, and both free
its core while sleeping. The emulation at the task level is the only fair one for dask-ml (its
tasks are not interruptible); applied to daskabsp it would defeat harvesting, whose point is
to stop a slow task part-way.
"""

from __future__ import annotations

import time
import warnings

import dask.array as da
import numpy as np
from _common import (
    FitCallback,
    gather_local,
    load_note,
    local_cluster,
    logistic_data,
    parse_args,
    pin_chunks,
    spread,
    summary,
    table,
    verdict,
    warm_up,
    workers,
    write_json,
)
from distributed.diagnostics.plugin import WorkerPlugin
from sklearn import cluster as sk_cluster
from sklearn import linear_model as sk_linear
from sklearn.datasets import make_blobs

import daskabsp
from daskabsp.estimators import KMeans, LogisticRegression

TARGET = 1e-3
SPEEDUP_TARGET = 2.0
DASKML_SOLVERS = ["newton", "lbfgs", "gradient_descent", "admm", "proximal_grad"]
SWEEP_BUDGET = 180.0  # seconds per dask-ml method and straggler setting for the sweep


def add_options(p) -> None:
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--rows", type=int, default=None, help="rows of the logistic data")
    p.add_argument("--features", type=int, default=50)
    p.add_argument("--km-rows", type=int, default=None, help="rows of the k-means data")
    p.add_argument("--slow", type=float, default=4.0, help="straggler slowdown factor")
    p.add_argument("--skip-kmeans", action="store_true")


# -- the straggler, for dask-ml: every task on one worker takes `factor` times as long ------

class SlowThreadPoolExecutor:
    """Wraps a worker's thread pool: each task sleeps ``(factor - 1)`` times its run time after
    running. (The class name keeps the worker on its thread-pool code path.)"""

    def __init__(self, inner, factor: float) -> None:
        self._inner, self._extra = inner, factor - 1.0

    def submit(self, fn, *args, **kwargs):
        extra = self._extra

        def slowed(*a, **k):
            t0 = time.perf_counter()
            out = fn(*a, **k)
            time.sleep(extra * (time.perf_counter() - t0))
            return out

        return self._inner.submit(slowed, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class SlowTasks(WorkerPlugin):
    """Slows every task of one worker (see :class:`SlowThreadPoolExecutor`)."""

    name = "bench-slow-tasks"

    def __init__(self, address: str, factor: float) -> None:
        self.address, self.factor = address, factor

    def setup(self, worker) -> None:
        if worker.address == self.address:
            worker.executors["default"] = SlowThreadPoolExecutor(
                worker.executors["default"], self.factor)

    def teardown(self, worker) -> None:
        ex = worker.executors.get("default")
        if isinstance(ex, SlowThreadPoolExecutor):
            worker.executors["default"] = ex._inner


class Straggler:
    """Context manager: one worker ``factor`` x slower, the daskabsp way or through tasks."""

    def __init__(self, client, address: str | None, factor: float, how: str) -> None:
        self.client, self.address, self.factor, self.how = client, address, factor, how
        self._ctx = None

    def __enter__(self):
        if self.address is None:
            return self
        if self.how == "daskabsp":
            self._ctx = daskabsp.slow_workers(self.client, {self.address: self.factor})
            self._ctx.__enter__()
        else:
            self.client.register_plugin(SlowTasks(self.address, self.factor))
        return self

    def __exit__(self, *exc):
        if self.address is None:
            return
        if self._ctx is not None:
            self._ctx.__exit__(*exc)
        else:
            self.client.unregister_worker_plugin(SlowTasks.name)


# -- objectives -----------------------------------------------------------------------------

def logistic_objective(coef: np.ndarray, intercept: float, X, y, C: float = 1.0) -> float:
    z = X @ coef + intercept
    return float(C * (np.logaddexp(0.0, z) - y * z).sum() + 0.5 * coef @ coef)


def inertia(centers: np.ndarray, X) -> float:
    d = (X * X).sum(1)[:, None] - 2 * X @ centers.T + (centers * centers).sum(1)
    return float(np.maximum(d, 0).min(axis=1).sum())


# -- daskabsp: one fit, per-round times ------------------------------------------------------

class RoundMarks(FitCallback):
    """A scikit-learn fit callback (``sklearn.callback``, scikit-learn >= 1.9): when each
    engine round ended, since ``t0``, and its parameters (``coef_`` then ``intercept_``, or
    ``cluster_centers_``). Its own time is kept in ``spent`` and left out of the marks."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.spent = 0.0
        self.marks: list[tuple[float, np.ndarray]] = []

    def on_fit_task_end(self, estimator, context, *, fitted_estimator=None) -> bool:
        if context.task_name != "round":
            return False
        c0 = time.perf_counter()
        e = fitted_estimator
        theta = (np.array(e.cluster_centers_) if hasattr(e, "cluster_centers_")
                 else np.r_[np.ravel(e.coef_), np.ravel(e.intercept_)])
        self.marks.append((c0 - self.t0 - self.spent, theta))
        self.spent += time.perf_counter() - c0
        return False


def timed_ours(est, X, y, objective, target: float) -> dict:
    """Fit ``est`` once; the time from the call until a round's parameters reached ``target``
    (the callback's own time is excluded)."""
    t0 = time.perf_counter()
    rounds = RoundMarks(t0)
    est.set_callbacks(rounds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y) if y is not None else est.fit(X)
    total = time.perf_counter() - t0 - rounds.spent
    marks = rounds.marks
    reached = next((t for t, c in marks if objective(c) <= target), np.nan)
    return {"time": reached, "total": total, "rounds": len(marks),
            "final": objective(marks[-1][1]) if marks else np.nan}


# -- dask-ml: sweep max_iter once, then time fits at that max_iter ---------------------------

def sweep(make, X, y, objective, target: float, budget: float) -> int | None:
    """The fewest ``max_iter`` for which ``make(max_iter).fit`` reaches ``target``."""
    spent, k = 0.0, 1
    while spent < budget:
        est = make(k)
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(X, y) if y is not None else est.fit(X)
        spent += time.perf_counter() - t0
        if objective(est) <= target:
            return k
        k = k + 1 if k < 10 else int(k * 1.25)
    return None


def timed_fit(make, X, y) -> float:
    est = make()
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y) if y is not None else est.fit(X)
    return time.perf_counter() - t0


# -- the benchmark ----------------------------------------------------------------------------

def run_logistic(client, args, slow_addr, repeats) -> dict:
    from dask_ml.linear_model import LogisticRegression as DmlLogisticRegression

    n = args.rows or (40_000 if args.quick else 300_000)
    d = args.features if not args.quick else 20
    X, y = logistic_data(client, n, d, 4, seed=args.seed)
    Xl, yl = gather_local(client, X, y)
    ref = sk_linear.LogisticRegression(tol=1e-10, max_iter=1000).fit(Xl, yl)
    f_opt = logistic_objective(ref.coef_.ravel(), ref.intercept_[0], Xl, yl)
    target = f_opt * (1 + TARGET)

    def ours_objective(theta):
        theta = np.asarray(theta).ravel()
        return logistic_objective(theta[:d], theta[d], Xl, yl)

    def dml_objective(est):
        return logistic_objective(np.asarray(est.coef_), float(est.intercept_), Xl, yl)

    results: dict = {"rows": n, "features": d, "optimum": f_opt, "methods": {}}
    settings = [("none", None), (f"1 worker {args.slow:g}x slower", slow_addr)]
    for label, addr in settings:
        for sync in ("bsp", "absp"):
            name = f"daskabsp {sync.upper().replace('ABSP', 'A-BSP')}"
            runs = []
            for _ in range(repeats):
                with Straggler(client, addr, args.slow, "daskabsp"):
                    runs.append(timed_ours(LogisticRegression(sync=sync), X, y,
                                           ours_objective, target))
            results["methods"][(name, label)] = runs
        for solver in DASKML_SOLVERS:
            name = f"dask-ml {solver}"
            with Straggler(client, addr, args.slow, "tasks"):
                k = sweep(lambda k, s=solver: DmlLogisticRegression(solver=s, C=1.0,
                                                                    max_iter=k),
                          X, y, dml_objective, target, SWEEP_BUDGET if not args.quick else 20)
                runs = []
                for _ in range(repeats if k is not None else 0):
                    t = timed_fit(lambda s=solver, k=k: DmlLogisticRegression(
                        solver=s, C=1.0, max_iter=k), X, y)
                    runs.append({"time": t, "total": t, "rounds": k, "final": np.nan})
            results["methods"][(name, label)] = runs or [{"time": np.nan, "total": np.nan,
                                                          "rounds": None, "final": np.nan}]
    sk_runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        sk = sk_linear.LogisticRegression().fit(Xl, yl)
        t = time.perf_counter() - t0
        ok = logistic_objective(sk.coef_.ravel(), sk.intercept_[0], Xl, yl) <= target
        sk_runs.append({"time": t if ok else np.nan, "total": t, "rounds": int(sk.n_iter_[0]),
                        "final": np.nan})
    results["methods"][("scikit-learn (1 process)", "none")] = sk_runs
    del X, y
    return results


def run_kmeans(client, args, slow_addr, repeats) -> dict:
    from dask_ml.cluster import KMeans as DmlKMeans

    n = args.km_rows or (40_000 if args.quick else 300_000)
    k = 8
    Xl, _ = make_blobs(n, 10, centers=k, cluster_std=2.0, random_state=args.seed)
    (X,) = pin_chunks(client, da.from_array(Xl, chunks=(-(-n // 4), 10)))
    ref = sk_cluster.KMeans(k, n_init=10, random_state=0).fit(Xl)
    target = ref.inertia_ * (1 + TARGET)
    results: dict = {"rows": n, "features": 10, "clusters": k, "optimum": ref.inertia_,
                     "methods": {}}
    settings = [("none", None), (f"1 worker {args.slow:g}x slower", slow_addr)]
    for label, addr in settings:
        for sync in ("bsp", "absp"):
            name = f"daskabsp {sync.upper().replace('ABSP', 'A-BSP')}"
            runs = []
            for r in range(repeats):
                with Straggler(client, addr, args.slow, "daskabsp"):
                    runs.append(timed_ours(KMeans(k, sync=sync, random_state=r), X, None,
                                           lambda c: inertia(np.asarray(c), Xl), target))
            results["methods"][(name, label)] = runs
        with Straggler(client, addr, args.slow, "tasks"):
            it = sweep(lambda m: DmlKMeans(n_clusters=k, max_iter=m, random_state=0), X, None,
                       lambda e: inertia(np.asarray(e.cluster_centers_), Xl), target,
                       SWEEP_BUDGET if not args.quick else 20)
            runs = [{"time": timed_fit(lambda it=it: DmlKMeans(n_clusters=k, max_iter=it,
                                                                random_state=0), X, None),
                     "rounds": it, "total": np.nan, "final": np.nan}
                    for _ in range(repeats if it is not None else 0)]
        results["methods"][("dask-ml KMeans", label)] = runs or [
            {"time": np.nan, "total": np.nan, "rounds": None, "final": np.nan}]
    for n_init in ("auto", 10):
        sk_runs = []
        for r in range(repeats):
            t0 = time.perf_counter()
            sk = sk_cluster.KMeans(k, n_init=n_init, random_state=r).fit(Xl)
            t = time.perf_counter() - t0
            sk_runs.append({"time": t if sk.inertia_ <= target else np.nan, "total": t,
                            "rounds": int(sk.n_iter_), "final": sk.inertia_})
        results["methods"][(f"scikit-learn KMeans n_init={n_init} (1 process)", "none")] = \
            sk_runs
    return results


def report(title: str, res: dict) -> tuple[str, dict]:
    rows, med = [], {}
    for (name, label), runs in res["methods"].items():
        times = summary([r["time"] for r in runs])
        totals = summary([r["total"] for r in runs])
        reached = sum(np.isfinite(r["time"]) for r in runs)
        rounds = [r["rounds"] for r in runs if r["rounds"] is not None]
        med[(name, label)] = times["median"]
        rows.append([name, label, spread(times), f"{reached}/{len(runs)}",
                     spread(totals) if totals["n"] else "",
                     f"{int(np.median(rounds))}" if rounds else "-"])
    text = table(["method", "straggler", "time to target s, median [IQR]", "reached",
                  "full fit s", "rounds / iterations"], rows)
    return f"{title}\n{text}", med


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], add_options)
    repeats = args.repeats or (1 if args.quick else 3)
    load0 = __import__("os").getloadavg()[0]
    out: dict = {"target": TARGET, "repeats": repeats, "slow": args.slow}
    texts, verdicts = [], []
    with local_cluster(4, 1, args.event_loop) as client:
        warm_up(client)
        slow_addr = workers(client)[0]
        lr = run_logistic(client, args, slow_addr, repeats)
        text, med = report(f"Logistic regression, {lr['rows']} x {lr['features']}, C=1", lr)
        texts.append(text)
        slow_label = f"1 worker {args.slow:g}x slower"
        absp_slow = med[("daskabsp A-BSP", slow_label)]
        dml_slow = [med[(f"dask-ml {s}", slow_label)] for s in DASKML_SOLVERS]
        best_dml = np.nanmin(dml_slow) if np.isfinite(dml_slow).any() else np.nan
        ratio = best_dml / absp_slow
        verdicts.append(f"A-BSP vs fastest dask-ml solver with the straggler: {ratio:.2f}x "
                        f"(target >= {SPEEDUP_TARGET}x): {verdict(ratio >= SPEEDUP_TARGET)}")
        absp_none = med[("daskabsp A-BSP", "none")]
        dml_none = np.nanmin([med[(f"dask-ml {s}", "none")] for s in DASKML_SOLVERS])
        verdicts.append(f"A-BSP vs fastest dask-ml solver without a straggler: "
                        f"{dml_none / absp_none:.2f}x (target >= 1x): "
                        f"{verdict(dml_none / absp_none >= 1.0)}")
        out["logistic"] = {f"{k[0]} | {k[1]}": v for k, v in lr["methods"].items()}
        out["logistic_meta"] = {k: v for k, v in lr.items() if k != "methods"}
        if not args.skip_kmeans:
            km = run_kmeans(client, args, slow_addr, repeats)
            text, kmed = report(f"K-means, {km['rows']} x {km['features']}, "
                                f"{km['clusters']} clusters", km)
            texts.append(text)
            r_km = kmed[("dask-ml KMeans", slow_label)] / kmed[("daskabsp A-BSP", slow_label)]
            verdicts.append(f"k-means A-BSP vs dask-ml with the straggler: {r_km:.2f}x")
            out["kmeans"] = {f"{k[0]} | {k[1]}": v for k, v in km["methods"].items()}
            out["kmeans_meta"] = {k: v for k, v in km.items() if k != "methods"}
    print("\n\n".join(texts))
    print()
    print("\n".join(verdicts))
    print(load_note(load0))
    out["verdicts"] = verdicts
    path = write_json("estimators", args, out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
