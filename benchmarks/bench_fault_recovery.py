"""A worker killed, or stopped for 30 s, during an A-BSP fit: does the fit return, how soon,
and where (issue 33's acceptance).

The set-up of the hang issue 33 found: four worker processes (one thread each), one emulated
3x slower, ``LogisticRegression(sync="absp", tol=1e-9)`` on a 200 000 x 20 dask array in
50 000-row chunks. The fault (:mod:`daskabsp.lab.faults`) hits one worker at one of three moments,
10 fits each: when a random partition task finishes (a random moment: which one and which
worker are drawn), the moment the first copy of a partition starts being made (the worker it
is made on), and the moment the first helper task is queued (the worker holding the copy it
reads). The faults: SIGKILL (the nanny starts a new worker), and SIGSTOP for 30 s (resumed
after the fit). Every faulted fit is paired with a fit without a fault run just before it
(the 2 cores are shared: the same fit took 1.0 s in one run's baseline and 3.8 s in
another's, so a baseline measured once, first, says little about a fit minutes later). Per
row: fits whose moment came, how many returned, within 3x of their paired fit without a
fault, at scikit-learn's optimum within 1e-6, the worst and median of those ratios, and the
worst ratio over the median of 5 fits without a fault measured first.

    python benchmarks/bench_fault_recovery.py [--quick] [--runs 10] [--faults kill,stop]
        [--moments finish,copy,helpers]
"""

from __future__ import annotations

import os
import time
import warnings

import dask
import dask.array as da
import numpy as np
from _common import load_note, parse_args, summary, table, write_json
from _data import dense_classification
from distributed import Client, LocalCluster
from sklearn.linear_model import LogisticRegression as SkLogistic

from daskabsp import slow_workers
from daskabsp.cluster import worker_addresses
from daskabsp.estimators import LogisticRegression
from daskabsp.lab.faults import KEEP_NANNIES, Fault, run_with_faults, wait_for_workers


def options(p) -> None:
    p.add_argument("--runs", type=int, default=10, help="fits per fault and moment")
    p.add_argument("--faults", default="kill,stop", help="comma-separated: kill, stop")
    p.add_argument("--moments", default="finish,copy,helpers",
                   help="comma-separated: finish (a random one), copy, helpers")


def objective(coef, intercept, X, y) -> float:
    z = X @ coef.ravel() + intercept[0]
    return float((np.logaddexp(0.0, z) - y * z).sum() + 0.5 * coef.ravel() @ coef.ravel())


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], options)
    n = 20_000 if args.quick else 200_000
    runs = 2 if args.quick else args.runs
    X, y = dense_classification(n, 20, seed=args.seed)
    ref = SkLogistic(tol=1e-10, max_iter=1000).fit(X, y)
    best = objective(ref.coef_, ref.intercept_, X, y)
    Xd, yd = da.from_array(X, chunks=(n // 4, 20)), da.from_array(y, chunks=n // 4)
    load0 = os.getloadavg()[0]
    warnings.simplefilter("ignore")
    rng = np.random.default_rng(args.seed)
    rows, raw = [], []
    with dask.config.set(KEEP_NANNIES), LocalCluster(
            n_workers=4, threads_per_worker=1, processes=True,
            dashboard_address=":0") as cluster, Client(cluster) as client:

        def fit():
            return LogisticRegression(sync="absp", tol=1e-9).fit(Xd, yd)

        def slowed():
            return slow_workers(client, {worker_addresses(client)[0]: 3.0})

        base = []
        with slowed():
            fit()  # warm-up: imports on the workers
            for _ in range(3 if args.quick else 5):
                t0 = time.perf_counter()
                fit()
                base.append(time.perf_counter() - t0)
        unfaulted = float(np.median(base))
        print(f"without a fault: {unfaulted:.2f} s (median of {len(base)})", flush=True)
        def timed() -> float:
            with slowed():
                t0 = time.perf_counter()
                fit()
                return time.perf_counter() - t0

        kinds = args.faults.split(",")
        for kind, seconds in [(k, s) for k, s in (("kill", 0.0), ("stop", 30.0)) if k in kinds]:
            for moment in [m for m in ("finish", "copy", "helpers") if m in args.moments]:
                got = []
                for i in range(runs):
                    workers = len(wait_for_workers(client, 4))
                    if workers < 4:  # not the set-up measured: stop rather than mislead
                        raise RuntimeError(f"{workers} workers before a fit, not 4")
                    paired = timed()
                    n_at = int(rng.integers(0, 12)) if moment == "finish" else 0
                    target = "random" if moment == "finish" else "bound"
                    fault = Fault(kind, moment, n_at, target, seconds)
                    run = run_with_faults(client, fit, [fault], seed=int(rng.integers(1 << 30)),
                                          bound=120.0, around=slowed())
                    est = run.estimator
                    gap = (None if est is None else
                           (objective(est.coef_, est.intercept_, X, y) - best) / best)
                    r = {"kind": kind, "moment": moment, "n": n_at, "fired": len(run.fired),
                         "seconds": run.seconds, "gap": gap, "paired": paired,
                         "ratio": None if run.seconds is None else run.seconds / paired,
                         "ratio_first": (None if run.seconds is None
                                         else run.seconds / unfaulted),
                         "load": os.getloadavg()[0],
                         "error": None if run.error is None else repr(run.error),
                         "left": len(run.left), "accounting": run.accounting}
                    raw.append(r)
                    got.append(r)
                    print(f"{kind} at {moment} {i}: fired {r['fired']} "
                          + ("HUNG" if run.seconds is None else
                             f"{run.seconds:.2f} s ({r['ratio']:.2f}x of {paired:.2f} s "
                             f"without; {r['ratio_first']:.2f}x of the first), gap "
                             + ("-" if gap is None else f"{gap:.1e}")),
                          flush=True)
                came = [r for r in got if r["fired"]]
                ret = [r for r in came if r["seconds"] is not None and r["error"] is None]
                ratios = [r["ratio"] for r in ret]
                first = [r["ratio_first"] for r in ret]
                rows.append([f"{kind} ({moment})", f"{len(came)}/{len(got)}",
                             f"{len(ret)}/{len(came)}",
                             f"{sum(x <= 3 for x in ratios)}/{len(came)}",
                             f"{sum(r['gap'] <= 1e-6 for r in ret)}/{len(came)}",
                             f"{max(ratios):.2f}" if ratios else "-",
                             f"{np.median(ratios):.2f}" if ratios else "-",
                             f"{max(first):.2f}" if first else "-"])
    print()
    paired = [r["paired"] for r in raw]
    print(f"A-BSP, 4 workers, one 3x slower, {n} x 20 in 4 chunks; fit without a fault "
          f"{unfaulted:.2f} s first (median of {len(base)}), {min(paired):.2f}-"
          f"{max(paired):.2f} s paired (median {np.median(paired):.2f} s); ratios: faulted "
          "fit over its paired fit without a fault")
    print(table(["fault (moment)", "moment came", "returned", "within 3x", "at optimum",
                 "worst ratio", "median ratio", "worst over first"], rows))
    print(load_note(load0))
    write_json("bench_fault_recovery", args,
               {"unfaulted": base, "runs": raw, "summary": rows,
                "ratio": summary([r["ratio"] for r in raw if r["ratio"] is not None])})


if __name__ == "__main__":
    main()
