"""Lab 0: what each straggler source does to one partition's scan, side by side in one fit.

Measured on the pinned lab cluster (one worker per core, one partition each), from the
compute seconds of BSP k-means fits (256 centers: ~0.12 s per partition and round, long
enough that a round's slowdown is the core's share, not how a few scheduler slices fell):

* ``neighbour``: a busy process on each worker's core in turn; the neighboured partition's
  compute over the other partition's, in the same fit;
* ``duty``: two neighbours busy 30% and 100% of each 10 ms period on worker 0's core;
* ``skew``: skewed sparse rows (partition 1 holds ~8x the non-zeros of partition 0), logistic
  gradient descent: partition 1's compute over partition 0's, no neighbour.

These ratios were test assertions once; on a machine shared with other work they are
measurements (a neighbour's share depends on what else runs on the other core), so they live
here, with their spread over repeats.
"""

from __future__ import annotations

import os

import numpy as np
from _lab import (
    BSP,
    daskabsp,
    lab_cluster,
    load_note,
    parse_args,
    spread,
    summary,
    table,
    write_json,
)
from _lab import workers as lab_workers

from daskabsp.lab.datasets import skewed_sparse
from daskabsp.lab.stragglers import cpu_neighbour
from daskabsp.programs import LloydKMeans, LogisticGD


def add_options(p) -> None:
    p.add_argument("--repeats", type=int, default=None, help="fits per measurement")


def bsp_compute(client, program, X, y=None, rounds: int = 5):
    """Per partition, the median compute seconds over a BSP fit's rounds (the first, which
    calibrates, left out), and each partition's worker."""
    res = daskabsp.fit(program, X, y, sync=BSP(), max_iter=rounds + 1, tol=None,
                       n_partitions=2, client=client)
    h = res.history.isel(round=slice(1, None))
    return np.median(h.compute_seconds.values, axis=0), [str(w) for w in h.worker.values[0]]


def kmeans(d: int, k: int) -> LloydKMeans:
    rng = np.random.default_rng(1)
    return LloydKMeans(initial_centers=rng.standard_normal((k, d)) * 0.1, tol=0.0)


def main() -> None:
    args = parse_args(__doc__, add_options)
    load0 = os.getloadavg()[0]
    repeats = args.repeats or (1 if args.quick else 5)
    rng = np.random.default_rng(args.seed)
    dense = rng.standard_normal((40_000 if args.quick else 300_000, 20))
    k = 32 if args.quick else 256
    out: dict[str, list[float]] = {}
    with lab_cluster(2) as client:
        ws = lab_workers(client)
        for _ in range(repeats):
            for victim in ws:
                with cpu_neighbour(client, victim):
                    t, where = bsp_compute(client, kmeans(20, k), dense)
                p = where.index(victim)
                out.setdefault(f"neighbour on {victim}", []).append(float(t[p] / t[1 - p]))
            for duty in (0.3, 1.0):
                with cpu_neighbour(client, ws[0], duty=duty, processes=2, period=0.01):
                    t, where = bsp_compute(client, kmeans(20, k), dense)
                p = where.index(ws[0])
                out.setdefault(f"2 neighbours, duty {duty:g}", []).append(float(t[p] / t[1 - p]))
            X, y = skewed_sparse(40_000 if args.quick else 200_000, 2000, n_partitions=2,
                                 skew=8.0, mean_nnz=40, seed=args.seed)
            t, _ = bsp_compute(client, LogisticGD(), X, y.astype(float))
            out.setdefault("skewed rows (partition 1 / 0)", []).append(float(t[1] / t[0]))
    rows = [[name, spread(summary(v)), len(v)] for name, v in out.items()]
    print("Straggler sources: a partition's compute over the other's in the same BSP fit, "
          "median [IQR]")
    print(table(["source", "slowdown", "fits"], rows))
    print(load_note(load0))
    write_json("lab_sources", args, {"ratios": out})


if __name__ == "__main__":
    main()
