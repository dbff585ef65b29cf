"""Lab 4: the straggler-free limit: each straggler source against the same cluster without it.

Whole ``daskabsp.estimators.LogisticRegression().fit(X, y)`` wall times on the pinned lab
cluster (one worker per core, one partition each), BSP, A-BSP and A-BSP as published
(``helpers=False``), each source paired with its absence in the same repeat (order rotated):

* ``emulated`` (worker 0 2x slower), ``neighbour`` (a busy process on worker 0's core),
  ``share`` (that neighbour busy half the time): against no straggler, dense data;
* ``skew`` (skewed sparse data): against the same non-zeros spread evenly (``skew=1``);
* ``sorted`` (dense rows sorted by label within partitions) with the CPU neighbour: against
  the same rows shuffled with the neighbour (what the order costs, the straggler being there
  in both);
* ``none``: A-BSP against BSP with no straggler at all (the price of A-BSP's machinery).

"with / without" is the ratio of a sync's fit time with the source to its fit time without (1:
the source costs nothing). The ideal for a worker that lost capacity is n / (n - 1 + 1/F), F the
slowdown of the slowest partition against the fastest in the BSP fits with the source (from
their histories); for skewed data, whose total work is that of its balanced twin, it is 1.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
from _lab import (
    SYNCS,
    dense,
    interleaved,
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
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import shuffle

from daskabsp.estimators import LogisticRegression
from daskabsp.lab.datasets import order_rows

PAIRS = {  # source: (straggler with, straggler without, data with, data without)
    "emulated": ("emulated", "none", "dense", "dense"),
    "neighbour": ("neighbour", "none", "dense", "dense"),
    "share": ("share", "none", "dense", "dense"),
    "skew": ("none", "none", "skew", "balanced"),
    "sorted": ("neighbour", "neighbour", "sorted", "dense"),
}


def add_options(p) -> None:
    p.add_argument("--repeats", type=int, default=None)


def fit(X, y, sync):
    est = LogisticRegression(sync=SYNCS[sync])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        sec, _ = timed(lambda: est.fit(X, y))
    comp = est.history_.compute_seconds.values
    comp = comp[np.isfinite(comp).all(axis=1) & (comp > 0).all(axis=1)]
    if comp.shape[0] == 0:
        return sec, float("nan")
    per_partition = np.median(comp, axis=0)
    return sec, float(per_partition.max() / per_partition.min())


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], add_options)
    load0 = os.getloadavg()[0]
    repeats = args.repeats or (1 if args.quick else 3)
    with lab_cluster() as client:
        n = len(client.nthreads())
        Xd, yd = dense(args.quick, args.seed, rows=600_000)
        Xd, yd = shuffle(Xd, yd, random_state=args.seed)
        data = {"dense": (Xd, yd),
                "skew": sparse(args.quick, args.seed, n, rows=600_000),
                "balanced": sparse(args.quick, args.seed, n, skew=1.0, rows=600_000),
                "sorted": order_rows(Xd, yd, n_partitions=n)}
        res = {}
        for source, (s_with, s_without, d_with, d_without) in PAIRS.items():
            t = {(c, s): [] for c in ("with", "without") for s in SYNCS}
            factor = []
            for r in range(repeats):
                for cond in interleaved(["with", "without"], r):
                    src, d = (s_with, d_with) if cond == "with" else (s_without, d_without)
                    with straggler(client, src):
                        for sync in interleaved(list(SYNCS), r):
                            sec, f = fit(*data[d], sync)
                            t[(cond, sync)].append(sec)
                            if cond == "with" and sync == "bsp":
                                factor.append(f)
            res[source] = {"times": {f"{c} {s}": v for (c, s), v in t.items()},
                           "factor": factor}
            print(f"  {source}: " + ", ".join(f"{k} {np.median(v):.2f}"
                                              for k, v in res[source]["times"].items()),
                  flush=True)
    rows = []
    for source, r in res.items():
        T = r["times"]
        F = float(np.median(r["factor"]))
        # skew: the same total work, so balanced partitions are the limit (1.00)
        ideal = {"skew": 1.0, "sorted": float("nan")}.get(source, n / (n - 1 + 1 / F))
        rows.append([source, f"{F:.2f}", f"{ideal:.2f}",
                     *(ratio_cell(T[f"with {s}"], T[f"without {s}"]) for s in SYNCS),
                     spread(summary(T["without absp"])), spread(summary(T["with absp"]))])
    none = [["A-BSP / BSP, no straggler", ratio_cell(res["neighbour"]["times"]["without absp"],
                                                      res["neighbour"]["times"]["without bsp"])],
            ["A-BSP paper / BSP, no straggler",
             ratio_cell(res["neighbour"]["times"]["without absp-paper"],
                        res["neighbour"]["times"]["without bsp"])]]
    print(f"\nLab 4: the straggler-free limit, LogisticRegression().fit, {n} pinned workers x 1 "
          f"thread, {repeats} repeats; fit time with the source / without it, paired, "
          "median [IQR]")
    print(table(["source", "F (worker 0)", "ideal", "BSP with/without", "A-BSP with/without",
                 "paper with/without", "A-BSP s without", "A-BSP s with"], rows))
    print("(F: the slowest partition's BSP compute over the fastest's with the source; "
          "sorted: both sides have the neighbour, F is the neighbour's; ideal for skew: the "
          "same work balanced)")
    print(table(["no straggler", "ratio"], none))
    print(load_note(load0))
    print(f"results: {write_json('lab_limit', args, {'sources': res})}")
    figure(res, args)


def figure(res, args) -> None:
    import matplotlib.pyplot as plt
    from _lab import COLORS, SYNC_LABELS

    fig, ax = plt.subplots(figsize=(8, 3.4))
    sources = list(res)
    width = 0.26
    for i, s in enumerate(SYNCS):
        med = [np.median(np.asarray(res[x]["times"][f"with {s}"])
                         / np.asarray(res[x]["times"][f"without {s}"])) for x in sources]
        ax.bar(np.arange(len(sources)) + (i - 1) * width, med, width, color=COLORS[s],
               label=SYNC_LABELS[s])
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(range(len(sources)), sources)
    ax.set_ylabel("fit time with the source\n/ without it (median)")
    ax.set_title("How far each straggler source keeps a LogisticRegression fit from the "
                 "straggler-free limit (1.0)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, "lab_limit", args)


if __name__ == "__main__":
    main()
