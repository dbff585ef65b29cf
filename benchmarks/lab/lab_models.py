"""Lab 2: objective against wall time and against round, BSP vs A-BSP vs A-BSP as published,
for logistic regression, linear SVM and k-means; and the whole-fit speed-up table across models
and straggler sources.

Curves (one fit each, on the pinned lab cluster, one partition per worker, a CPU neighbour on
worker 0's core): the engine's programs with the parameters of every round kept by a callback
(callback time is not in the history's wall time), then the exact objective over all rows at
each round's parameters: ``LogisticGD`` (dense, 20 features, fixed rounds; against
scikit-learn's optimum), ``LinearNewton`` with the squared hinge (a linear SVM; dense, 100
features) and ``LloydKMeans`` (blobs, k-means++ start); for these two, against the best
objective any fit reached (they converge). Plotted as the relative excess; BSP without the
neighbour is drawn dashed for reference.

Table: the whole ``est.fit(X, y)`` wall time at default parameters of
``daskabsp.estimators.LogisticRegression``, ``LinearSVC`` and ``KMeans(8)`` under every source
(none, emulated 2x, CPU neighbour, half-time neighbour, skewed sparse data and its balanced
twin), the three syncs interleaved (order rotated per repeat); ratios are paired per repeat.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
from _lab import (
    COLORS,
    SYNC_LABELS,
    SYNCS,
    Trace,
    daskabsp,
    dense,
    exact,
    interleaved,
    kmeans_inertia,
    lab_cluster,
    load_note,
    parse_args,
    ratio_cell,
    save_figure,
    sparse,
    spread,
    straggler,
    summary,
    table,
    timed,
    write_json,
)
from sklearn.cluster import kmeans_plusplus
from sklearn.datasets import make_blobs
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression as SkLogistic

from daskabsp import BSP, LogisticGD
from daskabsp.estimators import KMeans, LinearSVC, LogisticRegression
from daskabsp.programs import LinearNewton, LloydKMeans

SOURCES = ["none", "emulated", "neighbour", "share", "skew", "skew-balanced"]
CURVE_SOURCE = "neighbour"
#: Excess objective that counts as reached, per model.
LEVELS = {"logistic": 1e-3, "svm": 1e-3, "kmeans": 1e-4}


def add_options(p) -> None:
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--models", default="logistic,svm,kmeans")
    p.add_argument("--no-table", action="store_true", help="curves only")


def blobs(quick: bool, seed: int, rows: int = 1_000_000):
    X, _ = make_blobs(rows // (8 if quick else 1), 20, centers=8, cluster_std=2.0,
                      random_state=seed)
    return X


# -- curves ---------------------------------------------------------------------------------------


def curve_problems(quick: bool, seed: int):
    """model -> (program, X, y, exact objective, fit options, optimum or None).

    Logistic regression has scikit-learn's optimum; the SVM and k-means fits converge (Newton,
    Lloyd to their tolerance), so their reference is the best objective any fit reached."""
    Xg, yg = dense(quick, seed, rows=2_000_000, features=20)
    gd = LogisticGD(C=1.0)
    sk = SkLogistic(C=1.0, tol=1e-10, max_iter=1000).fit(Xg, yg)
    gd_opt = gd.full_objective(np.r_[sk.coef_.ravel(), sk.intercept_], Xg, yg)
    X, y = dense(quick, seed)
    n = X.shape[0]
    svm = LinearNewton(loss="squared_hinge", l2=1.0 / n, l2_intercept=1.0 / n, tol=1e-6)
    B = blobs(quick, seed)
    centers, _ = kmeans_plusplus(B[:20_000], 8, random_state=seed)
    km = LloydKMeans(initial_centers=centers, tol=1e-6)
    return {
        "logistic": (gd, Xg, yg, lambda c: gd.full_objective(c, Xg, yg),
                     {"max_iter": 20 if quick else 50, "tol": None}, gd_opt),
        "svm": (svm, X, y, lambda c: svm.full_objective(c, X, y), {"max_iter": 60}, None),
        "kmeans": (km, B, None, lambda c: kmeans_inertia(c, B), {"max_iter": 80}, None),
    }


def curves(client, args) -> dict:
    out = {}
    for model, (program, X, y, objective, opts, opt) in curve_problems(args.quick,
                                                                         args.seed).items():
        if model not in args.models.split(","):
            continue
        runs = {}
        for sync in [*SYNCS, "bsp-clean"]:
            trace = Trace()
            source = "none" if sync == "bsp-clean" else CURVE_SOURCE
            with straggler(client, source), warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                res = daskabsp.fit(program, X, y, sync=SYNCS.get(sync, BSP()), callback=trace,
                                   n_partitions=len(client.nthreads()), client=client, **opts)
            runs[sync] = {"wall": res.history.wall_time.values.tolist(),
                          "objective": exact(objective, trace.coefs).tolist(),
                          "rows": res.history.rows_total.values.tolist()}
        best = opt if opt is not None else min(min(r["objective"]) for r in runs.values())
        for r in runs.values():
            r["excess"] = ((np.asarray(r["objective"]) - best) / abs(best)).tolist()
        out[model] = {"runs": runs, "best": best}
    return out


def time_to_excess(run: dict, level: float) -> tuple[float, int]:
    hit = np.flatnonzero(np.asarray(run["excess"]) <= level)
    return (run["wall"][hit[0]], int(hit[0])) if hit.size else (float("nan"), -1)


def curve_table(cur: dict) -> str:
    rows = []
    for model, c in cur.items():
        for sync, r in c["runs"].items():
            level = LEVELS[model]
            t, k = time_to_excess(r, level)
            rows.append([f"{model} {sync}", f"{level:g}", f"{t:.2f}", k + 1 if k >= 0 else "-",
                         f"{r['wall'][-1]:.2f}", len(r["wall"]), f"{r['excess'][-1]:.1e}"])
    return table(["model sync (neighbour on worker 0; bsp-clean: none)", "excess target",
                  "s to target", "rounds to target", "fit s", "rounds", "final excess"], rows)


def plot_curves(cur: dict, args) -> None:
    import matplotlib.pyplot as plt

    models = list(cur)
    fig, axes = plt.subplots(len(models), 2, figsize=(10, 2.9 * len(models)), squeeze=False)
    for i, model in enumerate(models):
        for sync, r in cur[model]["runs"].items():
            y = np.maximum(np.asarray(r["excess"]), 1e-8)
            style = dict(color=COLORS.get(sync, "#444444"), lw=1.4, marker=".", ms=3,
                         ls="--" if sync == "bsp-clean" else "-",
                         label=SYNC_LABELS.get(sync, "BSP without the neighbour"))
            axes[i, 0].semilogy(r["wall"], y, **style)
            axes[i, 1].semilogy(np.arange(1, len(y) + 1), y, **style)
        axes[i, 0].set_ylabel(f"{model}\n(f - f*) / f*")
        axes[i, 0].set_xlabel("wall time (s)")
        axes[i, 1].set_xlabel("round")
    axes[0, 0].legend(fontsize=8)
    for i, model in enumerate(models):
        for ax in axes[i]:
            ax.axhline(LEVELS[model], color="grey", lw=0.7)
    fig.suptitle("Exact objective at each round's parameters, a CPU neighbour on worker 0's "
                 "core\n(logistic: LogisticGD; svm: squared hinge, Newton; kmeans: Lloyd)",
                 fontsize=10)
    fig.tight_layout()
    save_figure(fig, "lab_models_curves", args)


# -- whole-fit table ----------------------------------------------------------------------------


def estimators(quick: bool, seed: int, n: int):
    """model -> (maker(sync), data by source kind)."""
    Xd, yd = dense(quick, seed, rows=500_000)
    Xs, ys = sparse(quick, seed, n, rows=500_000)
    Xb, yb = sparse(quick, seed, n, skew=1.0, rows=500_000)
    B = blobs(quick, seed, rows=1_000_000)
    sup = {"dense": (Xd, yd), "skew": (Xs, ys), "skew-balanced": (Xb, yb)}
    uns = {"dense": (B, None), "skew": (Xs, None), "skew-balanced": (Xb, None)}
    return {
        "logistic": (lambda s: LogisticRegression(sync=s), sup),
        "svm": (lambda s: LinearSVC(sync=s), sup),
        "kmeans": (lambda s: KMeans(8, sync=s, random_state=seed), uns),
    }


def whole_fits(client, args) -> tuple[list, dict]:
    repeats = args.repeats or (1 if args.quick else 2)
    n = len(client.nthreads())
    raw = {}
    for model, (make, data) in estimators(args.quick, args.seed, n).items():
        if model not in args.models.split(","):
            continue
        for source in SOURCES:
            X, y = data.get(source, data["dense"])
            times = {s: [] for s in SYNCS}
            with straggler(client, source):
                for r in range(repeats):
                    for sync in interleaved(list(SYNCS), r):
                        est = make(SYNCS[sync])
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore", ConvergenceWarning)
                            sec, _ = timed(lambda e=est, X=X, y=y: e.fit(X, y))
                        times[sync].append(sec)
            raw[(model, source)] = times
            print(f"  {model} {source}: " + ", ".join(
                f"{s} {np.median(t):.2f} s" for s, t in times.items()), flush=True)
    rows = []
    for (model, source), t in raw.items():
        base = raw[(model, "skew-balanced" if source.startswith("skew") else "none")]
        rows.append([f"{model} {source}", *(spread(summary(t[s])) for s in SYNCS),
                     ratio_cell(t["bsp"], t["absp"]), ratio_cell(t["bsp"], t["absp-paper"]),
                     f"{np.median(t['absp']) / np.median(base['absp']):.2f}"])
    return rows, {f"{m} {s}": t for (m, s), t in raw.items()}


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], add_options)
    load0 = os.getloadavg()[0]
    with lab_cluster() as client:
        n = len(client.nthreads())
        cur = curves(client, args)
        print(f"\nLab 2a: exact objective per round, {n} pinned workers, CPU neighbour on "
              "worker 0 (bsp-clean: BSP without it); excess = (f - f*) / f*")
        print(curve_table(cur))
        rows, raw = ([], {}) if args.no_table else whole_fits(client, args)
    if rows:
        print(f"\nLab 2b: whole est.fit(X, y) wall time, default parameters, {n} pinned workers "
              f"x 1 thread; seconds median [IQR]; ratios paired per repeat")
        print(table(["model source", "BSP s", "A-BSP s", "A-BSP paper s", "BSP/A-BSP",
                     "BSP/paper", "A-BSP / no straggler"], rows))
        print("(skew: the same estimators on skewed sparse data; '/ no straggler' against "
              "skew-balanced)")
    print(load_note(load0))
    print(f"results: {write_json('lab_models', args, {'curves': cur, 'fits': raw})}")
    if cur:
        plot_curves(cur, args)


if __name__ == "__main__":
    main()
