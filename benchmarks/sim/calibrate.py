"""Measure the simulator's cost model (``daskabsp.lab.sim.Costs``) on this machine.

On one LocalCluster of ``--workers`` single-threaded worker processes, with ``--partitions``
tiny partitions (one row chunk each, pinned round-robin to the workers), modes interleaved in
blocks as ``bench_scale.py`` runs them:

* ``loop_task``, ``loop_round``: CPU of the event-loop thread (scheduler, client and driver
  share it) per round of plain Dask submit + gather, fitted as ``loop_round + loop_task * P``
  over the partition counts;
* ``engine_task``, ``engine_round``: the same fit of an engine BSP round's loop CPU less plain
  Dask's;
* ``stop_message``: A-BSP as published less BSP, per worker (a stop sent, an idle report
  received);
* ``worker_task``: the workers' process CPU per task in the plain rounds;
* ``row_seconds``: a partition scan (``run_partition``, LogisticGD) of ``--scan-rows`` rows
  (validate.py's partition size) in a worker process, alone on the machine's cores, per row;
  ``row_contention``: the CPU a row takes with every worker scanning at once (more scans
  than cores) over ``row_seconds``; ``update``: one LogisticGD update in this process;
* ``copy_bandwidth``: bytes per second of copying a partition from one worker to another, as
  the engine copies a dask array's chunk for helpers;
* ``stop_latency``: the scheduler seeing a round's first finish to a worker receiving the
  stop (A-BSP as published, one worker emulated ``--slow`` times slower);
* ``latency``: half of what a plain round at one partition per worker takes beyond what the
  simulator predicts with no latency.

Writes ``benchmarks/sim/costs.json`` (``--out`` elsewhere).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/

import numpy as np
from _common import (
    FinishTimes,
    StopReceipts,
    load_note,
    local_cluster,
    logistic_data,
    parse_args,
    round_finishes,
    stop_receipts,
    table,
    warm_up,
    workers,
)
from _sim import COSTS, save_costs
from bench_scale import LoopClock, run_mode
from distributed import futures_of, wait

import daskabsp
from daskabsp import ABSP
from daskabsp.engine.partitions import copy_on
from daskabsp.extension._client import ensure_plugins
from daskabsp.extension._core import run_partition
from daskabsp.lab.sim import Cluster, Costs, simulate

MODES = ("plain", "bsp", "absp-paper")


def add_options(p) -> None:
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--partitions", default="4,8,16,32", help="partition counts to fit over")
    p.add_argument("--rows", type=int, default=2000, help="rows per tiny partition")
    p.add_argument("--features", type=int, default=10)
    p.add_argument("--scan-rows", type=int, default=1_000_000,
                   help="rows of the timed partition scan (validate.py's --rows)")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--blocks", type=int, default=None)
    p.add_argument("--slow", type=float, default=4.0)
    p.add_argument("--costs", type=str, default=str(COSTS), help="where to write the costs")


def _worker_cpu(client) -> float:
    return sum(client.run(time.process_time).values())


def loop_costs(client, args, rounds: int, blocks: int) -> dict:
    """Loop CPU per round of each mode, and the workers' CPU per plain task, per P."""
    clock = LoopClock(client)
    out = {}
    for P in [int(p) for p in args.partitions.split(",")]:
        data = logistic_data(client, P * args.rows, args.features, P, args.seed)
        cpu = {m: [] for m in MODES}
        wall, wcpu = [], []
        for b in range(blocks):
            for mode in MODES[b % 3:] + MODES[:b % 3]:
                w0 = _worker_cpu(client)
                t, c, _ = run_mode(client, clock, data, mode, rounds)
                cpu[mode].append(c)
                if mode == "plain":
                    wcpu.append((_worker_cpu(client) - w0) / ((rounds + 1) * P))
                    wall += t
        out[P] = {"loop_cpu": {m: float(np.median(v)) for m, v in cpu.items()},
                  "worker_cpu_per_task": float(np.median(wcpu)),
                  "plain_wall": float(np.median(wall))}
    return out


def _line(ps, values) -> tuple[float, float]:
    """Least-squares ``(per partition, per round)`` of ``values`` against ``ps``, >= 0."""
    s, c = np.polyfit(np.asarray(ps, float), np.asarray(values, float), 1)
    return max(float(s), 0.0), max(float(c), 0.0)


def scan_costs(client, args) -> dict:
    """Seconds per row of a LogisticGD partition scan in a worker process, how much more a
    row costs when the machine's cores are oversubscribed, and one update's seconds.

    The scan is :func:`~daskabsp.extension.run_partition` as the engine runs it (in a worker
    process, its chunk size calibrated from a probe chunk) on partitions of ``--scan-rows``
    rows (the size validate.py fits: a scan of a partition far larger than the caches costs
    more per row than one of a partition that fits), at the parameters of a short fit.

    Returns
    -------
    dict
        ``row_seconds``: median seconds per row of one scan at a time (a core of its own);
        ``row_contention``: with a scan on every worker at once (``--workers`` on
        ``os.cpu_count()`` cores), the CPU a row takes (each scan's seconds per row times
        cores over workers) over ``row_seconds``; ``update``: the median seconds of one
        update in this process, as the driver applies it; ``chunk_rows``: the scans' median
        rows per chunk.
    """
    W = len(workers(client))
    X, y = logistic_data(client, W * args.scan_rows, args.features, W, args.seed)
    program, params, state = fit_params(client, X, y)
    xs, ys = futures_of(X), futures_of(y)
    alone = [client.submit(_scan, program, params, xs[0], ys[0], pure=False).result()
             for _ in range(8)][1:]
    together = []
    for _ in range(4):
        together += client.gather([client.submit(_scan, program, params, xs[i], ys[i],
                                                 pure=False) for i in range(W)])
    updates = []
    for res in alone:
        t0 = time.perf_counter()
        program.update(state, res.stats, res.rows)
        updates.append(time.perf_counter() - t0)
    row_seconds = per_row(alone)
    shared = per_row(together[W:]) * (os.cpu_count() or 1) / W
    return {"row_seconds": row_seconds, "row_contention": max(1.0, shared / row_seconds),
            "update": float(np.median(updates)),
            "chunk_rows": int(np.median([r.chunk_rows for r in alone]))}


def fit_params(client, X, y):
    """``(program, params, state)`` of a short LogisticGD fit: the parameters a fit scans at
    (at zero every z is 0 and ``np.logaddexp(0, z)`` takes its x == y shortcut: a scan about
    half as costly as in a fit)."""
    program = daskabsp.LogisticGD()
    state = daskabsp.fit(program, X, y, max_iter=6, tol=None, client=client).state
    return program, program.params(state), state


def row_seconds(client, X, y, params, program=None, reps: int = 6) -> float:
    """Median seconds per row of ``reps`` in-worker scans of ``X``'s first partition, one at
    a time (after one not counted)."""
    program = program or daskabsp.LogisticGD()
    x0, y0 = futures_of(X)[0], futures_of(y)[0]
    return per_row([client.submit(_scan, program, params, x0, y0, pure=False).result()
                    for _ in range(reps + 1)][1:])


def per_row(results) -> float:
    """Median seconds per row of scans' results."""
    return float(np.median([r.compute_seconds / r.rows for r in results]))


def _scan(program, params, X, y):
    return run_partition(program, params, X, y, None, round_id="calibrate", cursor=0,
                         quota=X.shape[0])


def copy_bandwidth(client, args, chunk=None) -> float:
    """Bytes per second of copying a partition's rows from one worker to another, as the
    engine copies a dask array's chunk for helpers (a task on the target that returns it);
    ``chunk``: the future of the rows to copy (default: a partition made for it)."""
    if chunk is None:
        X, _ = logistic_data(client, 2 * 20 * args.rows, args.features, 2, args.seed)
        chunk = futures_of(X)[0]
    nbytes = client.run_on_scheduler(_nbytes, chunk.key)
    src = client.who_has([chunk])[chunk.key][0]
    dst = next(w for w in workers(client) if w != src)
    client.sync(ensure_plugins, client)  # the scheduler plugin that drops the replica
    rates = []
    for _ in range(7):
        t0 = time.perf_counter()
        [copy] = copy_on(client, [chunk], dst)
        wait(copy)
        rates.append(nbytes / (time.perf_counter() - t0))
        copy.release()
        # the engine's copies leave no replica of their source behind (the scheduler
        # plugin drops it): wait for that, or the next copy would find the rows there
        deadline = time.monotonic() + 10
        while len(client.who_has([chunk])[chunk.key]) > 1 and time.monotonic() < deadline:
            time.sleep(0.01)
    return float(np.median(rates))


def _nbytes(key, dask_scheduler=None) -> int:
    return dask_scheduler.tasks[key].nbytes


def stop_latency(client, args) -> float:
    """Median first finish (scheduler) -> stop received (worker), A-BSP as published."""
    client.register_plugin(FinishTimes())
    W = args.workers
    X, y = logistic_data(client, W * 20 * args.rows, args.features, W, args.seed)
    slow = {workers(client)[0]: args.slow}
    with daskabsp.slow_workers(client, slow):
        daskabsp.fit(daskabsp.LogisticGD(), X, y, sync=ABSP.published(), max_iter=2, tol=None,
                     client=client)  # the engine's worker plugin is in place from here
        client.register_plugin(StopReceipts())
        res = daskabsp.fit(daskabsp.LogisticGD(), X, y, sync=ABSP.published(), max_iter=16,
                           tol=None, client=client)
    fit_id = res.history.attrs["fit_id"]
    got = stop_receipts(client)
    lat = []
    for r, fs in enumerate(round_finishes(client, fit_id, res.n_iter)):
        if r == 0 or not fs:
            continue
        first = min(f["seen"] for f in fs)
        lat += [t - first for (w, rid), t in got.items() if rid == f"{fit_id}:{r}"]
    return float(np.median(lat)) if lat else float("nan")


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], add_options)
    load0 = os.getloadavg()[0]
    rounds = args.rounds or (5 if args.quick else 20)
    blocks = args.blocks or (2 if args.quick else 4)
    with local_cluster(args.workers, 1, args.event_loop) as client:
        warm_up(client)
        scan = scan_costs(client, args)
        per_p = loop_costs(client, args, rounds, blocks)
        bandwidth = copy_bandwidth(client, args)
        stop = stop_latency(client, args)
    ps = sorted(per_p)
    loop_task, loop_round = _line(ps, [per_p[p]["loop_cpu"]["plain"] for p in ps])
    engine_task, engine_round = _line(ps, [per_p[p]["loop_cpu"]["bsp"]
                                           - per_p[p]["loop_cpu"]["plain"] for p in ps])
    stop_msg = max(0.0, float(np.median([
        (per_p[p]["loop_cpu"]["absp-paper"] - per_p[p]["loop_cpu"]["bsp"])
        / (2 * min(p, args.workers)) for p in ps])))
    costs = Costs(loop_task=loop_task, loop_round=loop_round, engine_task=engine_task,
                  engine_round=engine_round, update=scan["update"], stop_message=stop_msg,
                  worker_task=float(np.median([per_p[p]["worker_cpu_per_task"] for p in ps])),
                  latency=0.0, stop_latency=stop, row_seconds=scan["row_seconds"],
                  row_contention=scan["row_contention"],
                  row_bytes=8.0 * (args.features + 1), copy_bandwidth=bandwidth)
    costs = dataclasses.replace(costs, latency=fit_latency(costs, args, per_p))
    path = save_costs(costs, {"measured": {str(p): v for p, v in per_p.items()},
                              "workers": args.workers, "rows": args.rows,
                              "scan_rows": args.scan_rows, "scan_chunk_rows": scan["chunk_rows"],
                              "features": args.features, "time": time.strftime("%F %T")},
                      path=type(COSTS)(args.costs))
    print(f"Cost model measured on {os.cpu_count()} cores, {args.workers} worker processes, "
          f"partitions {args.partitions} of {args.rows} rows x {args.features} features")
    print(table(["cost", "value"], [[k, f"{v:.4g}"] for k, v in
                                    dataclasses.asdict(costs).items()]))
    print(load_note(load0))
    print(f"wrote {path}")


def fit_latency(costs: Costs, args, per_p: dict) -> float:
    """The one-way latency that makes the simulator's plain round at one partition per
    worker match the measured one."""
    W = args.workers
    measured = per_p[W]["plain_wall"]
    cl = Cluster(W, args.rows, shared_cores=os.cpu_count())
    pred = float(np.median(simulate("plain", cl, costs, rounds=6).round_times()))
    return max(0.0, (measured - pred) / 2)


if __name__ == "__main__":
    main()
