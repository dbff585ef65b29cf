"""Soak: hundreds of random fault schedules across sync models and estimators (issue 33).

Each run is one fit of ``tests/test_fault_schedules.py``'s cases (logistic regression,
LinearSVC, Ridge, k-means on small data; four worker processes, one emulated 3x slower)
under BSP, the default A-BSP, A-BSP as published, SSP(3) or ASP, with one or two faults
(SIGKILL, SIGSTOP for 0.5-4 s, a slow-down by stopping a worker 50-90% of the time) at moments
the fit's own events choose (:mod:`daskabsp.lab.faults`). The policies and models rotate; the
schedules are drawn from consecutive seeds. Per run: did the fit return (within ``--bound``
seconds), its gap to scikit-learn's optimum, its wall time over the same fit's without faults
(the median of two, measured first), the history's accounting, tasks left on the cluster.

The table: per policy and fault kind ("several" for schedules of two faults of different
kinds), the runs, those in which a fault fired (a schedule's moments may not come in a short
fit), hangs, errors, the worst time ratio and the worst gap, accounting
violations and runs that left tasks behind. Failures are listed with their seeds: rerun one
with ``--seeds N``.

    python benchmarks/soak_faults.py            # 500 schedules, about 45 minutes on 2 cores
    python benchmarks/soak_faults.py --quick    # 10
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

import dask
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _common import load_note, parse_args, summary, table, write_json
from distributed import Client, LocalCluster
from test_fault_schedules import POLICIES, case, run_case

from daskabsp import slow_workers
from daskabsp.cluster import worker_addresses
from daskabsp.lab.faults import KEEP_NANNIES, wait_for_workers

MODELS = ("logistic", "svc", "ridge", "kmeans")


def options(p) -> None:
    p.add_argument("--runs", type=int, default=500, help="schedules to run")
    p.add_argument("--seeds", type=str, default=None,
                   help="comma-separated seeds to run (instead of --runs)")
    p.add_argument("--bound", type=float, default=180.0,
                   help="seconds after which a fit counts as hung")


def reference_seconds(client, model: str, policy: str) -> float:
    """The median of two fits of the case without faults (one worker 3x slower)."""
    X, y, make, _objective, _best = case(model)
    slow = worker_addresses(client)[0]
    times = []
    for _ in range(2):
        with slow_workers(client, {slow: 3.0}):
            t0 = time.perf_counter()
            make(POLICIES[policy]).fit(X, y)
            times.append(time.perf_counter() - t0)
    return float(np.median(times))


def kind_of(faults) -> str:
    kinds = {f.kind for f in faults}
    return kinds.pop() if len(kinds) == 1 else "several"


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], options)
    seeds = ([int(s) for s in args.seeds.split(",")] if args.seeds
             else list(range(10 if args.quick else args.runs)))
    load0 = os.getloadavg()[0]
    warnings.simplefilter("ignore")
    runs, stopped = [], None
    with dask.config.set(KEEP_NANNIES), LocalCluster(
            n_workers=4, threads_per_worker=1, processes=True,
            dashboard_address=":0") as cluster, Client(cluster) as client:
        ref = {(m, p): reference_seconds(client, m, p) for m in MODELS for p in POLICIES}
        for i, seed in enumerate(seeds):
            model, policy = MODELS[seed % len(MODELS)], list(POLICIES)[seed % len(POLICIES)]
            workers = len(wait_for_workers(client, 4))
            if workers < 4:  # not the set-up soaked: stop rather than mislead
                stopped = f"{workers} workers before seed {seed}, not 4"
                print(f"stopped: {stopped}", flush=True)
                break
            run, faults, gap = run_case(client, model, policy, seed, bound=args.bound)
            row = {"seed": seed, "model": model, "policy": policy, "kind": kind_of(faults),
                   "faults": [f.__dict__ for f in faults],
                   "fired": [(f.fault.kind, f.fault.moment, f.fault.n) for f in run.fired],
                   "seconds": run.seconds, "reference": ref[model, policy],
                   "ratio": None if run.seconds is None else run.seconds / ref[model, policy],
                   "gap": gap, "error": None if run.error is None else repr(run.error),
                   "accounting": run.accounting, "left": len(run.left)}
            runs.append(row)
            print(f"{i + 1:4d}/{len(seeds)} seed {seed:4d} {model:8s} {policy:9s} "
                  f"{row['kind']:7s} fired {len(run.fired)} "
                  + ("HUNG" if run.seconds is None else
                     f"{run.seconds:6.2f} s ({row['ratio']:.1f}x) "
                     + (f"ERROR {row['error']}" if gap is None else f"gap {gap:.1e}")),
                  flush=True)
            if run.seconds is None:  # a hung fit holds the cluster: start afresh
                stopped = f"seed {seed} hung"
                break
    by = defaultdict(list)
    for r in runs:
        by[r["policy"], r["kind"]].append(r)
    rows = []
    for (policy, kind), rs in sorted(by.items()):
        ratios = [r["ratio"] for r in rs if r["ratio"] is not None]
        gaps = [r["gap"] for r in rs if r["gap"] is not None]
        rows.append([policy, kind, len(rs), sum(bool(r["fired"]) for r in rs),
                     sum(r["seconds"] is None for r in rs),
                     sum(r["error"] is not None for r in rs),
                     f"{max(ratios):.1f}" if ratios else "-",
                     f"{max(gaps):.1e}" if gaps else "-",
                     sum(bool(r["accounting"]) for r in rs), sum(r["left"] > 0 for r in rs)])
    print()
    print(table(["policy", "fault", "runs", "faults fired", "hangs", "errors", "worst time ratio",
                 "worst gap", "accounting", "tasks left"], rows))
    bad = [r for r in runs if r["seconds"] is None or r["error"] or r["accounting"]
           or r["left"] or (r["gap"] is not None and r["gap"] > 1e-6)]
    print(f"\n{len(runs)} runs, {len(bad)} failed"
          + (f" (seeds {', '.join(str(r['seed']) for r in bad)})" if bad else "")
          + (f"; stopped after {len(runs)} of {len(seeds)}: {stopped}" if stopped else ""))
    print(load_note(load0))
    ratios = [r["ratio"] for r in runs if r["ratio"] is not None]
    write_json("soak_faults", args, {"runs": runs, "stopped": stopped,
                                     "ratio": summary(ratios) if ratios else {}})


if __name__ == "__main__":
    main()
