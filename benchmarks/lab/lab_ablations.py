"""Lab 3: ablations on rows that are not exchangeable: harvest vs drop, resume vs restart,
quorum 1, 2, n/2, n; and the chunk target against harvest latency and scan throughput.

Dense logistic regression (``LogisticGD``, 20 features, fixed rounds) on rows sorted by label
within each partition (``daskabsp.lab.datasets.order_rows``), 4 partitions per worker on the pinned
lab cluster (so quorum 1, 2, n/2 and n differ), a CPU neighbour on worker 0's core. Every A-BSP
variant runs with ``helpers=False``, so each ablation isolates one mechanism of A-BSP as published:

* ``harvest``: ``ABSP(helpers=False)`` (quorum 1, harvest, resume);
* ``drop``: ``on_quorum="drop"``; ``restart``: ``cursor="restart"``;
* ``quorum k``: ``quorum=k``; ``BSP`` for reference;
* ``harvest``, ``drop`` and ``restart`` on the same rows shuffled (exchangeable).

Per fit, the exact objective at each round's parameters, against scikit-learn's optimum:
time and rounds to an excess of 1e-3 (relative), and the excess after the last round. Variants
run interleaved, rotated per repeat.

Chunk target: ``ABSP(helpers=False)`` on the sorted rows with the neighbour, chunk targets 0.5,
2 (the default), 8 and 32 ms: the harvest latency (``history.harvest_latency``) and the scan
throughput of the tasks that finished their quota (rows per compute second) relative to the
32 ms target's.
"""

from __future__ import annotations

import os

import numpy as np
from _lab import (
    ABSP,
    BSP,
    Trace,
    daskabsp,
    exact,
    interleaved,
    lab_cluster,
    load_note,
    parse_args,
    save_figure,
    sorted_dense,
    spread,
    straggler,
    summary,
    table,
    time_to,
    write_json,
)
from sklearn.linear_model import LogisticRegression as SkLogistic
from sklearn.utils import shuffle

from daskabsp import LogisticGD

PER_WORKER = 4
LEVEL = 1e-3
CHUNK_TARGETS = (0.0005, 0.002, 0.008, 0.032)


def add_options(p) -> None:
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--rounds", type=int, default=None)


def variants(n: int) -> dict:
    q = {1, 2, n // 2, n}
    out = {"harvest": ABSP(helpers=False), "drop": ABSP(on_quorum="drop", helpers=False),
           "restart": ABSP(cursor="restart", helpers=False)}
    out.update({f"quorum {k}": ABSP(quorum=k, helpers=False) for k in sorted(q - {1})})
    out["BSP"] = BSP()
    for v in ("harvest", "drop", "restart"):
        out[f"{v} shuffled"] = out[v]
    return out


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], add_options)
    load0 = os.getloadavg()[0]
    repeats = args.repeats or (1 if args.quick else 2)
    rounds = args.rounds or (20 if args.quick else 60)
    with lab_cluster() as client:
        n_workers = len(client.nthreads())
        n = PER_WORKER * n_workers
        X, y = sorted_dense(args.quick, args.seed, n, rows=2_000_000, features=20)
        Xs, ys = shuffle(X, y, random_state=args.seed)
        program = LogisticGD(C=1.0)
        sk = SkLogistic(C=1.0, tol=1e-10, max_iter=1000).fit(X, y)
        f_opt = program.full_objective(np.r_[sk.coef_.ravel(), sk.intercept_], X, y)
        V = variants(n)
        runs = {v: [] for v in V}
        with straggler(client, "neighbour"):
            for r in range(repeats):
                for v in interleaved(list(V), r):
                    Xv, yv = (Xs, ys) if v.endswith("shuffled") else (X, y)
                    trace = Trace()
                    res = daskabsp.fit(program, Xv, yv, sync=V[v], max_iter=rounds, tol=None,
                                       n_partitions=n, callback=trace, client=client)
                    f = exact(lambda c, Xv=Xv, yv=yv: program.full_objective(c, Xv, yv),
                              trace.coefs)
                    excess = (f - f_opt) / abs(f_opt)
                    wall = res.history.wall_time.values
                    runs[v].append({"wall": wall.tolist(), "excess": excess.tolist(),
                                    "rows": res.history.rows_total.values.tolist()})
            chunk = {}
            for r in range(repeats):
                for target in interleaved(list(CHUNK_TARGETS), r):
                    res = daskabsp.fit(program, X, y, sync=ABSP(helpers=False), max_iter=12,
                                       tol=None, n_partitions=n_workers,
                                       chunk_target=target, client=client)
                    h = res.history.isel(round=slice(1, None))
                    done = (~h.harvested.values) & (h.rows.values > 0)
                    tput = h.rows.values[done] / h.compute_seconds.values[done]
                    c = chunk.setdefault(target, {"latency": [], "throughput": []})
                    c["latency"] += h.harvest_latency.values.tolist()
                    c["throughput"] += tput.tolist()
    rows = []
    bsp_t = [time_to(np.asarray(x["excess"]), np.asarray(x["wall"]), LEVEL)
             for x in runs["BSP"]]
    for v, rs in runs.items():
        t = [time_to(np.asarray(x["excess"]), np.asarray(x["wall"]), LEVEL) for x in rs]
        k = np.array([np.argmax(np.asarray(x["excess"]) <= LEVEL) + 1.0
                      if min(x["excess"]) <= LEVEL else np.nan for x in rs])
        rows.append([v, spread(summary(t)),
                     f"{np.nanmedian(k):.0f}" if np.isfinite(k).any() else "never",
                     f"{np.median(bsp_t) / np.median(t):.2f}" if np.isfinite(t).all() else "never",
                     f"{np.median([x['excess'][-1] for x in rs]):.1e}",
                     f"{np.median([np.mean(x['rows']) for x in rs]) / X.shape[0]:.2f}"])
    print(f"\nLab 3a: ablations on rows sorted by label within {n} partitions "
          f"({n // PER_WORKER} pinned workers), CPU neighbour on worker 0, helpers off, "
          f"{rounds} rounds, {repeats} repeats; excess = (f - f_opt) / f_opt (scikit-learn's)")
    print(table(["variant", f"s to excess {LEVEL:g}", "rounds to it", "BSP time / this",
                 f"excess after {rounds} rounds", "rows counted per round / n"], rows))
    base = summary(chunk[max(CHUNK_TARGETS)]["throughput"])["median"]
    crow = [[f"{t * 1e3:g} ms", spread(summary(c["latency"]), 1e3),
             spread(summary(c["throughput"]), 1e-6),
             f"{summary(c['throughput'])['median'] / base:.2f}"]
            for t, c in sorted(chunk.items())]
    print(f"\nLab 3b: chunk target, ABSP(helpers=False), {n_workers} partitions, "
          "sorted rows, CPU neighbour on worker 0; medians [IQR] over rounds / tasks")
    print(table(["chunk target", "harvest latency ms", "scan M rows/s",
                 f"throughput / {max(CHUNK_TARGETS) * 1e3:g} ms"], crow))
    print(load_note(load0))
    path = write_json("lab_ablations", args, {"runs": runs, "chunk": chunk, "f_opt": f_opt})
    print(f"results: {path}")
    figure(runs, rounds, n, args)


def figure(runs, rounds, n, args) -> None:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    styles = {"harvest": "C0", "drop": "C3", "restart": "C2", "BSP": "k"}
    for v, rs in runs.items():
        x = rs[0]
        base = v.replace(" shuffled", "")
        color = styles.get(base)
        if color is None:  # quorum k
            color = {"quorum 2": "C4", f"quorum {n // 2}": "C5",
                     f"quorum {n}": "C7"}.get(v, "C8")
        ls = ":" if v.endswith("shuffled") else "-"
        y = np.maximum(np.asarray(x["excess"]), 1e-7)
        axes[0].semilogy(x["wall"], y, color=color, ls=ls, lw=1.3, label=v)
        axes[1].semilogy(np.arange(1, len(y) + 1), y, color=color, ls=ls, lw=1.3)
    for ax in axes:
        ax.axhline(LEVEL, color="grey", lw=0.7)
    axes[0].set_xlabel("wall time (s)")
    axes[1].set_xlabel("round")
    axes[0].set_ylabel("(f - f_opt) / f_opt")
    axes[0].legend(fontsize=7, ncol=2)
    fig.suptitle(f"Rows sorted by label within each of {n} partitions (dotted: the same rows "
                 "shuffled), CPU neighbour on worker 0, helpers off", fontsize=10)
    fig.tight_layout()
    save_figure(fig, "lab_ablations", args)


if __name__ == "__main__":
    main()
