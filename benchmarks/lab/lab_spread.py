"""Lab 1: per-task time spread within a round, and idle time at the BSP barrier, per straggler
source.

BSP fits of ``LogisticGD`` (fixed rounds) on the pinned lab cluster (one worker per core), one
partition per worker, under each source in turn, interleaved over the repeats: no straggler,
worker 0 emulated 2x slower (``SlowWorkers``), a CPU-bound neighbour on worker 0's core, a
neighbour busy half the time (a partial share), and skewed sparse data (the last partition 8x
denser, on a worker of the same speed). Per round:

* spread: the slowest partition's compute seconds over the fastest's;
* barrier idle: the share of the round's worker time (n workers x the round's span, from the
  first task start to the last task stop) that workers spent finished and waiting for the
  last task: sum_p (last stop - stop_p) / (n x span);
* round seconds over the no-straggler round (dense sources; skew: over the same sparse data
  with the non-zeros spread evenly, ``skew=1``).

The first round (calibration) is left out. Figures: a timeline of the tasks of a few rounds per
source (``lab_spread_timeline.png``) and the spread per source (``lab_spread.png``).
"""

from __future__ import annotations

import os

import numpy as np
from _lab import (
    BSP,
    SOURCES,
    daskabsp,
    dense,
    interleaved,
    lab_cluster,
    load_note,
    parse_args,
    save_figure,
    sparse,
    spread,
    straggler,
    summary,
    table,
    write_json,
)

from daskabsp import LogisticGD

ORDER = ["none", "emulated", "neighbour", "share", "skew", "skew-balanced"]
LABEL = {**SOURCES, "skew-balanced": "sparse rows, the same non-zeros spread evenly"}


def add_options(p) -> None:
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--rounds", type=int, default=None)


def one_fit(client, X, y, rounds: int):
    res = daskabsp.fit(LogisticGD(), X, y, sync=BSP(), max_iter=rounds + 1, tol=None,
                       n_partitions=len(client.nthreads()), client=client)
    h = res.history.isel(round=slice(1, None))
    comp = h.compute_seconds.values
    start, stop = h.task_start.values, h.task_stop.values
    span = stop.max(axis=1) - start.min(axis=1)
    idle = (stop.max(axis=1, keepdims=True) - stop).sum(axis=1) / (comp.shape[1] * span)
    return {
        "compute": comp.tolist(), "start": start.tolist(), "stop": stop.tolist(),
        "spread": (comp.max(axis=1) / comp.min(axis=1)).tolist(),
        "idle": idle.tolist(), "round_s": np.diff(h.wall_time.values,
                                                  prepend=res.history.wall_time.values[0]
                                                  ).tolist(),
        "worker": [str(w) for w in h.worker.values[-1]],
    }


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], add_options)
    load0 = os.getloadavg()[0]
    repeats = args.repeats or (1 if args.quick else 3)
    rounds = args.rounds or (5 if args.quick else 12)
    with lab_cluster() as client:
        n = len(client.nthreads())
        data = {"dense": dense(args.quick, args.seed),
                "skew": sparse(args.quick, args.seed, n),
                "skew-balanced": sparse(args.quick, args.seed, n, skew=1.0)}
        runs = {s: [] for s in ORDER}
        for r in range(repeats):
            for source in interleaved(ORDER, r):
                X, y = data.get(source, data["dense"])
                with straggler(client, source):
                    runs[source].append(one_fit(client, X, y, rounds))
    rows, out = [], {}
    base_round = {"dense": summary([t for run in runs["none"] for t in run["round_s"]]),
                  "sparse": summary([t for run in runs["skew-balanced"]
                                     for t in run["round_s"]])}
    for source in ORDER:
        pooled = {k: [v for run in runs[source] for v in np.ravel(run[k])]
                  for k in ("spread", "idle", "round_s")}
        s = {k: summary(v) for k, v in pooled.items()}
        base = base_round["sparse" if source.startswith("skew") else "dense"]["median"]
        comp = np.concatenate([np.asarray(run["compute"]) for run in runs[source]])
        rows.append([source, spread(s["spread"]), spread(s["idle"], 100, "{:.0f}"),
                     f"{s['round_s']['median'] * 1e3:.0f}", f"{s['round_s']['median'] / base:.2f}",
                     " / ".join(f"{m * 1e3:.0f}" for m in np.median(comp, axis=0))])
        out[source] = {"runs": runs[source], "summary": s}
    print(f"\nLab 1: BSP rounds of LogisticGD, {n} pinned workers x 1 thread, one partition each, "
          f"{repeats} x {rounds} rounds per source; median [IQR] over rounds")
    print(table(["source", "slowest/fastest task", "barrier idle %", "round ms",
                 "round / no straggler", "compute ms per partition"], rows))
    print("(skew and skew-balanced: sparse data, 'round / no straggler' against skew-balanced)")
    print(load_note(load0))
    print(f"results: {write_json('lab_spread', args, {'sources': out, 'labels': LABEL})}")
    figures(runs, n, args)


def figures(runs, n, args) -> None:
    import matplotlib.pyplot as plt

    shown = ["none", "emulated", "neighbour", "share", "skew"]
    fig, axes = plt.subplots(len(shown), 1, figsize=(8, 1.3 * len(shown) + 0.6), sharex=False)
    for ax, source in zip(axes, shown, strict=True):
        run = runs[source][0]
        start, stop = np.asarray(run["start"]), np.asarray(run["stop"])
        k = min(4, start.shape[0])
        t0 = start[0].min()
        for r in range(k):
            for p in range(start.shape[1]):
                ax.barh(p, stop[r, p] - start[r, p], left=start[r, p] - t0, height=0.6,
                        color=f"C{p}", edgecolor="white")
            ax.axvline(stop[r].max() - t0, color="k", lw=0.8, ls=":")
        ax.set_yticks(range(start.shape[1]),
                      [f"partition {p}" for p in range(start.shape[1])], fontsize=8)
        ax.set_title(LABEL[source], fontsize=9, loc="left")
        ax.set_xlim(0, None)
    axes[-1].set_xlabel("seconds since the first task of the rounds shown started "
                        "(dotted: the BSP barrier, the end of each round)")
    fig.suptitle(f"BSP rounds under each straggler source ({n} pinned workers): bars are "
                 f"partition tasks,\nthe gap before each dotted line is a worker idle at "
                 f"the barrier", fontsize=10)
    fig.tight_layout()
    save_figure(fig, "lab_spread_timeline", args)

    fig, ax = plt.subplots(figsize=(7, 3.2))
    data = [[v for run in runs[s] for v in run["spread"]] for s in ORDER]
    ax.boxplot(data, whis=(5, 95), showfliers=False)
    ax.set_xticks(range(1, len(ORDER) + 1), ORDER, fontsize=8)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_ylabel("slowest / fastest task\nin a round (BSP)")
    ax.set_title("Per-task time spread within a round, per straggler source "
                 "(box: IQR, whiskers: p5-p95)", fontsize=9)
    fig.tight_layout()
    save_figure(fig, "lab_spread", args)


if __name__ == "__main__":
    main()
